//go:build tools

// Build-only module for the alert-rule tests (tests/cluster/tools.sh): promtool, which
// checks and unit-tests the chart's PrometheusRule (tests/chart/test_alerts.py).
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
