#!/usr/bin/env bash
# make bench: the logon storm (hack/bench/storm.py) on a control plane of its own, or on the
# cluster of BENCH_KUBECONFIG. A control plane it started is stopped afterwards (BENCH_KEEP=1
# keeps it): a kept kube-apiserver goes on deleting the bench's namespaces, busy for minutes
# after the figures.
#
# Env: HOSTPOOL_PYTHON (the project's Python), BENCH_KUBECONFIG, BENCH_KEEP, and storm.py's own
# BENCH_* variables (docs/performance.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PY="${HOSTPOOL_PYTHON:-.venv/bin/python}"
KUBECTL=.cluster/bin/kubectl

started=""
if [[ -n "${BENCH_KUBECONFIG:-}" ]]; then
  kubeconfig="$BENCH_KUBECONFIG"
else
  # The storm needs no pods: no kube-scheduler, kwok or fake nodes, as in docs/performance.md.
  HOSTPOOL_FAKE_NODES=0 hack/cluster/cluster.sh up .cluster/bench >/dev/null
  kubeconfig=.cluster/bench/kubeconfig
  started=.cluster/bench
fi
stop() { if [[ -n "$started" && -z "${BENCH_KEEP:-}" ]]; then hack/cluster/cluster.sh down "$started" >/dev/null 2>&1; fi; }
trap stop EXIT

"$KUBECTL" --kubeconfig "$kubeconfig" apply -f crds/ >/dev/null
"$KUBECTL" --kubeconfig "$kubeconfig" wait --for=condition=Established crd --all --timeout=60s >/dev/null
KUBECONFIG="$kubeconfig" "$PY" hack/bench/storm.py --plot .cluster/bench-storm.png
