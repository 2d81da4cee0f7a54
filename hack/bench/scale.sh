#!/usr/bin/env bash
# make bench-scale: 100,000 assigned sessions over 1,000 pools (hack/bench/scale.py) on a
# control plane of its own (started afresh), on the one kept by an earlier run
# (SCALE_REUSE=1), or on the cluster of BENCH_KUBECONFIG. Its own control plane is stopped
# afterwards unless BENCH_KEEP, SCALE_PREFILL_ONLY or SCALE_REUSE is set.
#
# Env: HOSTPOOL_PYTHON, BENCH_KUBECONFIG, BENCH_KEEP, SCALE_REUSE, SCALE_PREFILL_ONLY and
# scale.py's own SCALE_* variables (docs/performance.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PY="${HOSTPOOL_PYTHON:-.venv/bin/python}"
KUBECTL=.cluster/bin/kubectl
DIR=.cluster/bench-scale

dir=""
if [[ -n "${BENCH_KUBECONFIG:-}" ]]; then
  kubeconfig="$BENCH_KUBECONFIG"
elif [[ -n "${SCALE_REUSE:-}" ]]; then
  kubeconfig="$DIR/kubeconfig"
  dir="$DIR"
else
  hack/cluster/cluster.sh down "$DIR" >/dev/null 2>&1 || true
  HOSTPOOL_FAKE_NODES=0 hack/cluster/cluster.sh up "$DIR" >/dev/null
  kubeconfig="$DIR/kubeconfig"
  dir="$DIR"
fi
stop() {
  if [[ -n "$dir" && -z "${BENCH_KEEP:-}${SCALE_PREFILL_ONLY:-}${SCALE_REUSE:-}" ]]; then
    hack/cluster/cluster.sh down "$dir" >/dev/null 2>&1
  fi
}
trap stop EXIT

"$KUBECTL" --kubeconfig "$kubeconfig" apply -f crds/ >/dev/null
"$KUBECTL" --kubeconfig "$kubeconfig" wait --for=condition=Established crd --all --timeout=60s >/dev/null
KUBECONFIG="$kubeconfig" SCALE_CLUSTER_DIR="$dir" "$PY" hack/bench/scale.py
