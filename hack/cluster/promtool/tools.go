//go:build tools

// Build-only module for the alert-rule tests (hack/cluster/tools.sh): promtool, which
// checks and unit-tests the chart's PrometheusRule (tests/chart/test_alerts.py), and the
// Prometheus server itself, whose TSDB and query API recommend-plan --prometheus is tested
// against (tests/e2e/test_recommend_prometheus_live.py).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
