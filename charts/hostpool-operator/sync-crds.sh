#!/usr/bin/env bash
# Copy the generated CRDs (crds/*.yaml at the repository root) into the chart, byte for byte.
# templates/crds.yaml renders them from files/crds/; tests/chart fails when the copies differ.
# Run it after `make crds`:  charts/hostpool-operator/sync-crds.sh
set -euo pipefail
chart_dir="$(cd "$(dirname "$0")" && pwd)"
src="$chart_dir/../../crds"
dst="$chart_dir/files/crds"
mkdir -p "$dst"
rm -f "$dst"/*.yaml
cp "$src"/*.yaml "$dst"/
ls "$dst"
