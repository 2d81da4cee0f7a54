#!/usr/bin/env bash
# A real, local Kubernetes control plane for tests and demos (no Docker, no kubelet):
# etcd -> kube-apiserver -> kube-controller-manager, all on 127.0.0.1 and free ports; and,
# so that pods run, kube-scheduler and kwok with fake nodes (kwok plays their kubelet:
# nodes become Ready, scheduled pods Running and Ready with an IP; no container runs).
# With HOSTPOOL_REAL_NODES=N, also N real nodes: kubelets with containerd, whose pods run
# (hack/cluster/node/nodes.sh; root).
#
# Usage: hack/cluster/cluster.sh up DIR       start (or, if already healthy, just report) the cluster
#        hack/cluster/cluster.sh down DIR     stop it (fine when not running)
#        hack/cluster/cluster.sh status DIR   exit 0 when running and ready
#        hack/cluster/cluster.sh restart-controller-manager DIR
#            restart kube-controller-manager only: its garbage collector rediscovers resource
#            types every 30 s (fixed upstream), so after installing CRDs a restart makes
#            ownerReferences on custom resources cascade at once instead of up to 30 s later
#        hack/cluster/cluster.sh restart-apiserver DIR
#        hack/cluster/cluster.sh restart-etcd DIR
#            stop that one process and start it again with the same ports, flags and data
#            (a fault for tests: clients see their connections and watches drop); wait until
#            it is healthy again and the API server reports /readyz ok
#        hack/cluster/cluster.sh fail-pod DIR NAMESPACE POD
#            mark a pod Failed and not Ready, as a kubelet would for a crashed pod
#        hack/cluster/cluster.sh remove-node DIR NODE
#            delete a fake node; kube-controller-manager's pod GC then deletes its pods
#        hack/cluster/cluster.sh import-image DIR IMAGE|ARCHIVE
#            put an image into every real node's containerd (`podman save` of IMAGE, or a
#            docker/OCI archive), for pods with imagePullPolicy Never or IfNotPresent
#        hack/cluster/cluster.sh check-nodes
#            exit 0 when real nodes can run here, else print why and exit 3
#
# `up` prints the admin kubeconfig path (DIR/kubeconfig) on stdout; progress goes to stderr.
# Layout of DIR: kubeconfig, pki/ (CA, serving cert, service-account keys, token file),
# etcd/ (data, wiped at each fresh start), logs/<component>.log, pids/<name>.pid, state.env
# (ports, fake node count, extra kube-apiserver flags).
#
# Env: HOSTPOOL_BIN_DIR          binaries (default <repo>/.cluster/bin, filled by hack/cluster/tools.sh)
#      HOSTPOOL_FAKE_NODES       fake nodes to create (default 3); 0: no kube-scheduler, no kwok
#      HOSTPOOL_KCM_CONTROLLERS  kube-controller-manager --controllers value (with fake nodes, the
#                                node lifecycle and pod GC controllers are added to it)
#      HOSTPOOL_READY_TIMEOUT    seconds to wait for each component (default 60)
#      HOSTPOOL_APISERVER_ARGS   extra kube-apiserver flags at `up`, space-separated (kept for
#                                restarts), e.g. --feature-gates=WatchList=false
#      HOSTPOOL_STOP_SIGNAL      restart-apiserver/restart-etcd: TERM (default, a clean stop) or
#                                KILL (a crash)
#      HOSTPOOL_DOWN_SECONDS     restart-apiserver/restart-etcd: seconds to stay down (default 0)
#      HOSTPOOL_HOSTS_BRIDGE     NAME:ADDRESS/PREFIX, e.g. hpdesk0:10.251.0.1/24 (needs root): a
#                                bridge for session hosts in network namespaces (made when
#                                missing, removed by `down` if made here); the API server then
#                                serves on ADDRESS instead of 127.0.0.1 (in its certificate and
#                                the kubeconfig), so agents inside those namespaces reach it
#                                as a real machine's agent reaches a cluster
#      HOSTPOOL_REAL_NODES       real kubelet nodes real-node-1..N (default 0, at most 8; needs
#                                root, and tools.sh --nodes): each with a containerd of its own,
#                                on a bridge hpn<X> with 10.244.X.0/24; the API server then
#                                serves on 10.244.X.1 (unless HOSTPOOL_HOSTS_BRIDGE), which pods
#                                reach; kube-scheduler, node lifecycle and pod GC run even with
#                                HOSTPOOL_FAKE_NODES=0. Labelled type=real, not tainted.
#                                `add-nodes DIR N` adds them to a running cluster that has none
#                                and serves on a hosts' bridge (it restarts the API server with
#                                the Node authorizer and kube-controller-manager; what runs on
#                                the cluster keeps running, clients reconnect)
#      HOSTPOOL_NODES_BRIDGE     NAME:10.244.X.1/24: the nodes' bridge and subnet (default: the
#                                first free 10.244.X.0/24, bridge hpn<X>)
#      HOSTPOOL_CNI_BIN_DIR      the CNI plugins (default /usr/lib/cni, Debian's)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN_DIR="${HOSTPOOL_BIN_DIR:-$REPO_ROOT/.cluster/bin}"
KCM_CONTROLLERS="${HOSTPOOL_KCM_CONTROLLERS:-garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller}"
KCM_CONTROLLERS_GIVEN="$KCM_CONTROLLERS" # before load_state adds to it (add-nodes' undo)
READY_TIMEOUT="${HOSTPOOL_READY_TIMEOUT:-60}"
BASE_COMPONENTS=(etcd kube-apiserver kube-controller-manager)
POD_COMPONENTS=(kube-scheduler kwok)
COMPONENTS=("${BASE_COMPONENTS[@]}")
# With fake nodes, kube-controller-manager also runs the node lifecycle controller (it takes
# the not-ready taint off a node once kwok reports it Ready) and pod GC (the pods of a
# removed node are deleted). kwok renews a node's heartbeat every 20-45 s; on a loaded machine
# that can pass the default 50 s grace, and the controller then marks every pod on the node
# not Ready: a grace of 5 minutes keeps a slow heartbeat from looking like a lost node.
POD_CONTROLLERS="node-lifecycle-controller,pod-garbage-collector-controller"
# Real nodes run real Deployments (the chart's operator and broker): their controllers too;
# and real volumes (nodes.sh volumes_start): the binder that binds a provisioned volume to its
# claim, and the protections that keep a volume or claim in use from going.
WORKLOAD_CONTROLLERS="replicaset-controller,deployment-controller,persistentvolume-binder-controller"
WORKLOAD_CONTROLLERS+=",persistentvolume-protection-controller,persistentvolumeclaim-protection-controller"
STARTING=0 # set while `up` starts processes: a failure then stops them again
ADDING=0   # set while `add-nodes` adds nodes: a failure then puts the cluster back (add_nodes_undo)
ADD_RESTARTED="" # what `add-nodes` restarted or started so far: apiserver, kcm, scheduler

log() { printf 'cluster: %s\n' "$*" >&2; }

usage() {
  echo "usage: $0 {up|down|status|restart-controller-manager|restart-apiserver|restart-etcd} DIR" >&2
  echo "       $0 fail-pod DIR NAMESPACE POD | remove-node DIR NODE | import-image DIR IMAGE" >&2
  echo "       $0 add-nodes DIR N | check-nodes" >&2
  exit 2
}

# shellcheck source-path=SCRIPTDIR source=node/nodes.sh
source "$REPO_ROOT/hack/cluster/node/nodes.sh"

if [[ "${1:-}" == check-nodes ]]; then
  why="$(nodes_why_not)"
  [[ -z "$why" ]] || { echo "$why"; exit 3; }
  exit 0
fi
[[ $# -ge 2 ]] || usage
CMD="$1"
mkdir -p "$2"
DIR="$(cd "$2" && pwd)"
shift 2
ARGS=("$@")
PKI="$DIR/pki"
LOGS="$DIR/logs"
PIDS="$DIR/pids"
KUBECONFIG_PATH="$DIR/kubeconfig"
STATE="$DIR/state.env"

last_lines() { # name -> last log lines, indented
  local f="$LOGS/$1.log"
  if [[ -s "$f" ]]; then
    tail -n "${2:-20}" "$f" | sed 's/^/    /'
  elif [[ -e "$f" ]]; then
    echo "    ($f is empty: the process wrote nothing)"
  else
    echo "    (no log at $f)"
  fi
}

fail() { # step message [component-whose-log-to-show]
  local msg="cluster: $1"
  if [[ -n "${2:-}" ]]; then
    msg+=$'\n'"  last lines of $LOGS/$2.log:"$'\n'"$(last_lines "$2")"
  fi
  printf '%s\n' "$msg" >&2
  if ((STARTING)); then
    # Leave nothing half-started behind; the logs stay.
    STARTING=0
    nodes_down >/dev/null 2>&1 || true
    stop_all >/dev/null 2>&1 || true
    if [[ "${HOSTS_BRIDGE_MADE:-0}" == 1 ]]; then ip link del "$HOSTS_BRIDGE" 2>/dev/null || true; fi
  fi
  if ((ADDING)); then
    add_nodes_undo
  fi
  exit 1
}

alive() { # pid -> true while that process runs (a zombie, exited but not yet reaped, does not)
  local s
  s="$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)" || return 1
  [[ -n "$s" && "$s" != Z && "$s" != X ]]
}

survived_start() { # name -> true when it still runs half a second after `start`
  # pid_of can miss a process that runs (its /proc entry read mid-exec on a loaded machine),
  # so a miss is only an exit once the process is gone; a few seconds at most.
  local i
  sleep 0.5
  for ((i = 0; i < 20; i++)); do
    pid_of "$1" >/dev/null && return 0
    exited "$1" && return 1
    sleep 0.25
  done
  return 1
}

exited() { # name -> true when the process `start` started last under that name is gone
  local pid
  pid="$(cat "$PIDS/$1.pid" 2>/dev/null)" || return 0
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  ! alive "$pid"
}

pid_of() { # name -> pid of the running component, or nothing
  local f="$PIDS/$1.pid" pid
  [[ -f "$f" ]] || return 1
  pid="$(<"$f")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # Guard against a reused pid: the process must be our binary.
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "/$(comp_bin "$1") " || return 1
  echo "$pid"
}

apiserver_get() { # path -> body on HTTP 200, else fails
  # shellcheck disable=SC1090
  source "$STATE"
  curl -fsS --max-time 3 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" \
    "https://${APISERVER_ADDRESS:-127.0.0.1}:$APISERVER_PORT$1" 2>/dev/null
}

load_state() { # ports and fake node count of the running cluster; sets COMPONENTS
  # shellcheck disable=SC1090
  source "$STATE"
  COMPONENTS=("${BASE_COMPONENTS[@]}")
  if ((${FAKE_NODES:-0} > 0)); then
    COMPONENTS+=("${POD_COMPONENTS[@]}")
    [[ ",$KCM_CONTROLLERS," == *,node-lifecycle-controller,* ]] ||
      KCM_CONTROLLERS+=",$POD_CONTROLLERS"
  elif ((${REAL_NODES:-0} > 0)); then
    # Real nodes need the scheduler, node lifecycle and pod GC too, but no kwok.
    COMPONENTS+=(kube-scheduler)
    [[ ",$KCM_CONTROLLERS," == *,node-lifecycle-controller,* ]] ||
      KCM_CONTROLLERS+=",$POD_CONTROLLERS"
  fi
  if ((${REAL_NODES:-0} > 0)) && [[ ",$KCM_CONTROLLERS," != *,deployment-controller,* ]]; then
    KCM_CONTROLLERS+=",$WORKLOAD_CONTROLLERS"
  fi
  # shellcheck disable=SC2207 # names without spaces
  COMPONENTS+=($(node_components))
}

healthy() {
  [[ -f "$STATE" && -f "$KUBECONFIG_PATH" ]] || return 1
  load_state
  local c
  for c in "${COMPONENTS[@]}"; do
    pid_of "$c" >/dev/null || return 1
  done
  [[ "$(apiserver_get /readyz)" == "ok" ]] && nodes_healthy
}

stop_all() {
  # All at once: the data is thrown away at the next start, so there is nothing to drain.
  local c pid i
  local -A pids=()
  for c in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    if pid="$(pid_of "$c")"; then
      pids[$c]=$pid
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  for ((i = 0; i < 100; i++)); do
    local alive=0
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    ((alive)) || break
    sleep 0.1
  done
  for c in "${!pids[@]}"; do
    pid=${pids[$c]}
    if kill -0 "$pid" 2>/dev/null; then
      log "$c (pid $pid) ignored SIGTERM for 10s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    log "stopped $c (pid $pid)"
  done
  for c in "${BASE_COMPONENTS[@]}" "${POD_COMPONENTS[@]}"; do
    rm -f "$PIDS/$c.pid"
  done
}

free_ports() { # n -> n distinct free loopback ports, one per line
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
for s in socks:
    print(s.getsockname()[1])
EOF
}

start() { # name args... : start a component detached, logging to LOGS/name.log
  local name="$1"
  shift
  rm -f "$PIDS/$name.pid"
  # setsid: own session, so it outlives the caller's terminal or process group; all
  # standard streams redirected so that a caller reading our output is not held open.
  # The pid is written by the process itself just before it execs the binary, so it is right
  # even when setsid has to fork.
  # shellcheck disable=SC2016 # $$, $1 and $@ are for the inner bash
  # START_BIN: the binary when it is not BIN_DIR/name (the nodes' containerd and kubelet).
  setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$PIDS/$name.pid" "${START_BIN:-$BIN_DIR/$name}" "$@" \
    </dev/null >"$LOGS/$name.log" 2>&1 &
  # Wait for the pid file as long as the launcher runs: on a busy machine writing it can take
  # more than a second, and a pid file not written yet must not be taken for an exit
  # (wait_for). Once the launcher is gone, a few seconds more (setsid may have forked).
  local launcher=$! deadline=$((SECONDS + READY_TIMEOUT)) gone_at=-1
  while [[ ! -s "$PIDS/$name.pid" ]] && ((SECONDS < deadline)); do
    if ((gone_at < 0)) && ! alive "$launcher"; then gone_at=$SECONDS; fi
    ((gone_at < 0 || SECONDS - gone_at < 3)) || break
    sleep 0.02
  done
}

wait_for() { # name description command... : poll until command succeeds
  local name="$1" what="$2"
  shift 2
  local deadline=$((SECONDS + READY_TIMEOUT))
  while ! "$@"; do
    if exited "$name"; then
      fail "$name exited before $what" "$name"
    fi
    if ((SECONDS >= deadline)); then
      fail "$name did not become ready ($what) within ${READY_TIMEOUT}s" "$name"
    fi
    sleep 0.2
  done
}

etcd_healthy() {
  curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'
}
apiserver_ready() { [[ "$(apiserver_get /readyz)" == "ok" ]]; }
gc_synced() { grep -q 'Proceeding to collect garbage' "$LOGS/kube-controller-manager.log"; }
default_sa_exists() { apiserver_get /api/v1/namespaces/default/serviceaccounts/default >/dev/null; }

make_pki() {
  mkdir -p "$PKI"
  local o="$PKI/openssl.log"
  : >"$o"
  {
    # Cluster CA and the API server's serving certificate (127.0.0.1 and localhost).
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout "$PKI/ca.key" -out "$PKI/ca.crt" -days 3650 -subj "/CN=hostpool-local-ca"
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout "$PKI/apiserver.key" -out "$PKI/apiserver.csr" -subj "/CN=kube-apiserver"
    printf '%s\n' "subjectAltName=IP:127.0.0.1,IP:$APISERVER_ADDRESS,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1" \
      "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" \
      >"$PKI/apiserver.ext"
    openssl x509 -req -in "$PKI/apiserver.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
      -CAcreateserial -days 3650 -extfile "$PKI/apiserver.ext" -out "$PKI/apiserver.crt"
    # Service-account token signing key pair.
    openssl genrsa -out "$PKI/sa.key" 2048
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"
  } >>"$o" 2>&1 || fail "generating certificates and keys with openssl failed; see $o: $(tail -n 5 "$o")"
  ADMIN_TOKEN="$(openssl rand -hex 24)"
  echo "$ADMIN_TOKEN,admin,admin,system:masters" >"$PKI/tokens.csv"
  chmod 600 "$PKI"/*.key "$PKI/tokens.csv"
}

write_kubeconfig() {
  local tmp="$KUBECONFIG_PATH.tmp"
  cat >"$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: hostpool-local
  cluster:
    server: https://$APISERVER_ADDRESS:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: admin
  user:
    token: $ADMIN_TOKEN
contexts:
- name: hostpool-local
  context:
    cluster: hostpool-local
    user: admin
    namespace: default
current-context: hostpool-local
preferences: {}
EOF
  chmod 600 "$tmp"
  mv -f "$tmp" "$KUBECONFIG_PATH"
}

start_controller_manager() {
  log "starting kube-controller-manager ($KCM_CONTROLLERS)"
  start kube-controller-manager \
    --kubeconfig="$KUBECONFIG_PATH" \
    --controllers="$KCM_CONTROLLERS" \
    --leader-elect=false \
    --node-monitor-grace-period=5m \
    --secure-port=0 \
    --service-account-private-key-file="$PKI/sa.key" \
    --root-ca-file="$PKI/ca.crt"
  local waited=0
  if [[ ",$KCM_CONTROLLERS," == *,garbage-collector-controller,* ]]; then
    wait_for kube-controller-manager "garbage collector synced" gc_synced
    waited=1
  fi
  if [[ ",$KCM_CONTROLLERS," == *,serviceaccount-controller,* ]]; then
    wait_for kube-controller-manager "the default ServiceAccount in namespace default" default_sa_exists
    waited=1
  fi
  if ((!waited)); then
    sleep 1
    pid_of kube-controller-manager >/dev/null || fail "kube-controller-manager exited at start" kube-controller-manager
  fi
}

start_scheduler() {
  log "starting kube-scheduler"
  start kube-scheduler \
    --kubeconfig="$KUBECONFIG_PATH" \
    --authentication-kubeconfig="$KUBECONFIG_PATH" \
    --authorization-kubeconfig="$KUBECONFIG_PATH" \
    --leader-elect=false \
    --secure-port=0
  survived_start kube-scheduler || fail "kube-scheduler exited at start" kube-scheduler
}

start_kwok() {
  # Twice at most: once (a bench on a loaded machine) kwok was gone half a second after its
  # start without a line in its log; a second start is cheap, and its failure is reported.
  local attempt
  for attempt in 1 2; do
    log "starting kwok for nodes annotated kwok.x-k8s.io/node=fake"
    start kwok \
      --kubeconfig="$KUBECONFIG_PATH" \
      --manage-all-nodes=false \
      --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
      --cidr=10.0.0.1/24 \
      --node-ip=10.0.0.1 \
      --server-address=127.0.0.1:0 \
      --config="$BIN_DIR/kwok-stages.yaml"
    sleep 0.5
    pid_of kwok >/dev/null && return 0
    log "kwok exited at start (attempt $attempt); its log: $(tail -n 5 "$LOGS/kwok.log" 2>/dev/null | tr '\n' ' ')"
  done
  fail "kwok exited at start" kwok
}

fake_node() { # name -> a Node for kwok: annotated, tainted (pods must tolerate it), room for pods
  cat <<NODE
apiVersion: v1
kind: Node
metadata:
  name: $1
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: $1
    kubernetes.io/os: linux
    type: kwok
spec:
  taints:
  - key: kwok.x-k8s.io/node
    value: fake
    effect: NoSchedule
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
NODE
}

nodes_ready() { # every fake node Ready and without the not-ready taint
  local out
  out="$("$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG_PATH" get nodes -l type=kwok \
    -o 'jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}:{.spec.taints[*].key}{"\n"}{end}' 2>/dev/null)" ||
    return 1
  [[ "$(grep -c '=True:' <<<"$out")" -ge "$FAKE_NODES" ]] || return 1
  ! grep -q 'node.kubernetes.io/not-ready' <<<"$out"
}

start_fake_nodes() {
  local i
  for ((i = 1; i <= FAKE_NODES; i++)); do
    fake_node "kwok-node-$i" | "$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG_PATH" apply -f - >/dev/null ||
      fail "creating fake node kwok-node-$i failed" kwok
  done
  wait_for kwok "$FAKE_NODES fake node(s) Ready and schedulable" nodes_ready
}

start_etcd() { # same flags, ports and data dir at every start (`up` wipes the data first)
  log "starting etcd on 127.0.0.1:$ETCD_PORT"
  start etcd \
    --name=hostpool-local \
    --data-dir="$DIR/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="hostpool-local=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync \
    --quota-backend-bytes=1073741824 \
    --log-level=warn
  wait_for etcd "health check on port $ETCD_PORT" etcd_healthy
}

start_apiserver() { # same flags and ports at every start; waiting for /readyz is the caller's
  log "starting kube-apiserver on https://$APISERVER_ADDRESS:$APISERVER_PORT"
  local node_args=()
  mapfile -t node_args < <(nodes_apiserver_args)
  local extra_args=() # APISERVER_ARGS: extra flags, split on spaces
  read -r -a extra_args <<<"${APISERVER_ARGS:-}"
  start kube-apiserver \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address="$APISERVER_ADDRESS" \
    --advertise-address="$APISERVER_ADDRESS" \
    --secure-port="$APISERVER_PORT" \
    --cert-dir="$PKI/apiserver-generated" \
    --tls-cert-file="$PKI/apiserver.crt" \
    --tls-private-key-file="$PKI/apiserver.key" \
    --token-auth-file="$PKI/tokens.csv" \
    --authorization-mode="$( ((${REAL_NODES:-0} > 0)) && echo Node,RBAC || echo RBAC)" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --allow-privileged=true \
    --service-account-issuer="https://127.0.0.1:$APISERVER_PORT" \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --endpoint-reconciler-type=none \
    "${node_args[@]}" \
    "${extra_args[@]}"
}

cmd_up() {
  if healthy; then
    log "already running and ready"
    echo "$KUBECONFIG_PATH"
    return 0
  fi
  # Leftovers of a partial or crashed run: stop what is left, start afresh.
  if [[ -f "$STATE" ]]; then
    (load_state && nodes_down) 2>/dev/null || true
  fi
  stop_all 2>/dev/null

  FAKE_NODES="${HOSTPOOL_FAKE_NODES:-3}"
  [[ "$FAKE_NODES" =~ ^[0-9]+$ ]] || fail "HOSTPOOL_FAKE_NODES must be a whole number, not $FAKE_NODES"
  REAL_NODES="${HOSTPOOL_REAL_NODES:-0}"
  NODES_BRIDGE="" NODES_NET="" NODES_BRIDGE_MADE=0 PAUSE_IMAGE=""
  COMPONENTS=("${BASE_COMPONENTS[@]}")
  if ((FAKE_NODES > 0)); then
    COMPONENTS+=("${POD_COMPONENTS[@]}")
    KCM_CONTROLLERS+=",$POD_CONTROLLERS"
  fi
  nodes_check_args
  if ((REAL_NODES > 0 && FAKE_NODES == 0)); then
    COMPONENTS+=(kube-scheduler)
    KCM_CONTROLLERS+=",$POD_CONTROLLERS"
  fi
  if ((REAL_NODES > 0)) && [[ ",$KCM_CONTROLLERS," != *,deployment-controller,* ]]; then
    KCM_CONTROLLERS+=",$WORKLOAD_CONTROLLERS"
  fi
  local c
  for c in "${COMPONENTS[@]}" kubectl; do
    [[ -x "$BIN_DIR/$c" ]] ||
      fail "binary $BIN_DIR/$c not found; run hack/cluster/tools.sh (make tools) first or set HOSTPOOL_BIN_DIR"
  done
  if ((FAKE_NODES > 0)) && [[ ! -s "$BIN_DIR/kwok-stages.yaml" ]]; then
    fail "$BIN_DIR/kwok-stages.yaml not found; run hack/cluster/tools.sh (make tools) first"
  fi
  for c in openssl curl python3 setsid base64; do
    command -v "$c" >/dev/null || fail "required command '$c' not found on PATH"
  done

  # Extra kube-apiserver flags (space-separated, e.g. --feature-gates=WatchList=false),
  # kept for restarts.
  APISERVER_ARGS="${HOSTPOOL_APISERVER_ARGS:-}"
  local t0=$SECONDS
  STARTING=1
  rm -rf "$DIR/etcd" "$PKI" "$KUBECONFIG_PATH" "$STATE"
  APISERVER_ADDRESS=127.0.0.1 HOSTS_BRIDGE="" HOSTS_BRIDGE_MADE=0
  if [[ -n "${HOSTPOOL_HOSTS_BRIDGE:-}" ]]; then
    make_hosts_bridge "$HOSTPOOL_HOSTS_BRIDGE"
  fi
  mkdir -p "$LOGS" "$PIDS"
  mkdir -m 700 "$DIR/etcd"
  if ((REAL_NODES > 0)); then
    nodes_prepare
    # Pods reach the API server only on an address that is not loopback.
    [[ -n "$HOSTS_BRIDGE" ]] || APISERVER_ADDRESS="$NODES_NET.1"
  fi
  make_pki
  nodes_pki

  local ports
  mapfile -t ports < <(free_ports 3)
  ETCD_PORT="${ports[0]}"
  ETCD_PEER_PORT="${ports[1]}"
  APISERVER_PORT="${ports[2]}"
  cat >"$STATE" <<EOF
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_PORT=$APISERVER_PORT
ADMIN_TOKEN=$ADMIN_TOKEN
FAKE_NODES=$FAKE_NODES
APISERVER_ARGS="$APISERVER_ARGS"
APISERVER_ADDRESS=$APISERVER_ADDRESS
HOSTS_BRIDGE=$HOSTS_BRIDGE
HOSTS_BRIDGE_MADE=$HOSTS_BRIDGE_MADE
REAL_NODES=$REAL_NODES
NODES_BRIDGE=$NODES_BRIDGE
NODES_NET=$NODES_NET
NODES_BRIDGE_MADE=$NODES_BRIDGE_MADE
PAUSE_IMAGE=$PAUSE_IMAGE
EOF
  chmod 600 "$STATE"

  start_etcd

  start_apiserver
  write_kubeconfig
  wait_for kube-apiserver "/readyz on port $APISERVER_PORT" apiserver_ready

  start_controller_manager
  if ((FAKE_NODES > 0)); then
    start_scheduler
    start_kwok
    start_fake_nodes
  elif ((REAL_NODES > 0)); then
    start_scheduler
  fi
  nodes_start

  STARTING=0
  log "ready in $((SECONDS - t0))s; kubeconfig: $KUBECONFIG_PATH"
  echo "$KUBECONFIG_PATH"
}

make_hosts_bridge() { # NAME:ADDRESS/PREFIX -> sets HOSTS_BRIDGE, HOSTS_BRIDGE_MADE, APISERVER_ADDRESS
  local name="${1%%:*}" cidr="${1#*:}"
  [[ "$name" =~ ^[a-z][a-z0-9]{0,14}$ && "$cidr" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+/[0-9]+$ ]] ||
    fail "HOSTPOOL_HOSTS_BRIDGE must be NAME:ADDRESS/PREFIX (e.g. hpdesk0:10.251.0.1/24), not $1"
  [[ $(id -u) -eq 0 ]] || fail "HOSTPOOL_HOSTS_BRIDGE needs root (a bridge is made); uid is $(id -u)"
  command -v ip >/dev/null || fail "HOSTPOOL_HOSTS_BRIDGE needs ip (iproute2)"
  if ! ip link show "$name" >/dev/null 2>&1; then
    ip link add "$name" type bridge || fail "could not make bridge $name"
    HOSTS_BRIDGE_MADE=1
  fi
  ip -4 -o addr show dev "$name" | grep -q " ${cidr} " || ip addr add "$cidr" dev "$name" ||
    fail "could not give bridge $name the address $cidr"
  ip link set "$name" up
  HOSTS_BRIDGE="$name"
  APISERVER_ADDRESS="${cidr%/*}"
  log "session hosts' bridge $name ($cidr); the API server serves on $APISERVER_ADDRESS"
}

cmd_down() {
  if [[ -f "$STATE" ]]; then
    load_state
    nodes_down
  fi
  stop_all
  if [[ -f "$STATE" ]]; then
    load_state
    if [[ "${HOSTS_BRIDGE_MADE:-0}" == 1 && -n "${HOSTS_BRIDGE:-}" ]]; then
      ip link del "$HOSTS_BRIDGE" 2>/dev/null && log "removed bridge $HOSTS_BRIDGE"
    fi
  fi
  log "stopped (logs kept in $LOGS)"
}

cmd_restart_controller_manager() {
  healthy || fail "no running, ready cluster in $DIR; run: $0 up $DIR"
  local pid i
  if pid="$(pid_of kube-controller-manager)"; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDS/kube-controller-manager.pid"
  mv -f "$LOGS/kube-controller-manager.log" "$LOGS/kube-controller-manager.previous.log" 2>/dev/null || true
  load_state
  start_controller_manager
  log "kube-controller-manager restarted"
}

stop_one() { # name signal -> stop one component (SIGKILL after 10 s); fine when not running
  local name="$1" sig="$2" pid i
  if pid="$(pid_of "$name")"; then
    kill "-$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      alive "$pid" || break
      sleep 0.1
    done
    if alive "$pid"; then
      log "$name (pid $pid) ignored SIG$sig for 10s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 200; i++)); do
        alive "$pid" || break
        sleep 0.05
      done
      ! alive "$pid" || fail "$name (pid $pid) still runs 10s after SIGKILL"
    fi
    log "stopped $name (pid $pid, SIG$sig)"
  fi
  rm -f "$PIDS/$name.pid"
}

port_free() { # address port -> true when a listener could bind there (as the API server will)
  python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind((sys.argv[1], int(sys.argv[2])))
except OSError:
    sys.exit(1)
' "$1" "$2"
}

stop_apiserver() { # signal -> stop the API server; return once it is gone and its port is free
  stop_one kube-apiserver "$1"
  local deadline=$((SECONDS + READY_TIMEOUT))
  until port_free "$APISERVER_ADDRESS" "$APISERVER_PORT"; do
    ((SECONDS < deadline)) ||
      fail "port $APISERVER_PORT on $APISERVER_ADDRESS is still taken ${READY_TIMEOUT}s after the API server stopped: $(ss -Hltnp "sport = :$APISERVER_PORT" 2>/dev/null | head -n 3)"
    sleep 0.1
  done
}

cmd_restart_component() { # etcd | kube-apiserver
  local name="$1" sig="${HOSTPOOL_STOP_SIGNAL:-TERM}" down="${HOSTPOOL_DOWN_SECONDS:-0}"
  [[ "$sig" == TERM || "$sig" == KILL ]] || fail "HOSTPOOL_STOP_SIGNAL must be TERM or KILL, not $sig"
  [[ "$down" =~ ^[0-9]+(\.[0-9]+)?$ ]] || fail "HOSTPOOL_DOWN_SECONDS must be a number, not $down"
  healthy || fail "no running, ready cluster in $DIR; run: $0 up $DIR"
  load_state
  local t0=$SECONDS
  if [[ "$name" == kube-apiserver ]]; then
    stop_apiserver "$sig"
  else
    stop_one "$name" "$sig"
  fi
  sleep "$down"
  mv -f "$LOGS/$name.log" "$LOGS/$name.previous.log" 2>/dev/null || true
  if [[ "$name" == etcd ]]; then
    start_etcd
  else
    start_apiserver
  fi
  wait_for kube-apiserver "/readyz on port $APISERVER_PORT" apiserver_ready
  log "$name restarted; the API server is ready again ($((SECONDS - t0))s)"
}

cmd_status() {
  if healthy; then
    echo "running: $KUBECONFIG_PATH"
  else
    echo "not running"
    return 1
  fi
}

kubectl_admin() { "$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

cmd_fail_pod() { # namespace pod
  [[ ${#ARGS[@]} -eq 2 ]] || usage
  healthy || fail "no running, ready cluster in $DIR; run: $0 up $DIR"
  local now patch
  now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  patch='{"status":{"phase":"Failed","reason":"FailedOnPurpose","conditions":['
  patch+='{"type":"Ready","status":"False","reason":"FailedOnPurpose","lastTransitionTime":"'"$now"'"}]}}'
  kubectl_admin -n "${ARGS[0]}" patch pod "${ARGS[1]}" --subresource=status --type=merge -p "$patch" \
    >/dev/null || fail "could not mark pod ${ARGS[0]}/${ARGS[1]} Failed"
  log "pod ${ARGS[0]}/${ARGS[1]} marked Failed"
}

cmd_remove_node() { # node
  [[ ${#ARGS[@]} -eq 1 ]] || usage
  healthy || fail "no running, ready cluster in $DIR; run: $0 up $DIR"
  kubectl_admin delete node "${ARGS[0]}" --wait=false >/dev/null ||
    fail "could not delete node ${ARGS[0]}"
  log "node ${ARGS[0]} removed"
}

cmd_add_nodes() { # N : real nodes for a running cluster without any (e.g. `make demo-desktop`)
  [[ ${#ARGS[@]} -eq 1 && "${ARGS[0]}" =~ ^[1-9][0-9]*$ ]] || usage
  healthy || fail "no running, ready cluster in $DIR; run: $0 up $DIR"
  load_state
  ((${REAL_NODES:-0} == 0)) || fail "the cluster in $DIR has $REAL_NODES real node(s) already"
  # Pods reach the API server on an address that is not loopback, and it cannot move now:
  # every client's kubeconfig names it.
  [[ "$APISERVER_ADDRESS" != 127.0.0.1 ]] ||
    fail "add-nodes needs a cluster serving on a hosts' bridge (HOSTPOOL_HOSTS_BRIDGE at up); this one serves on 127.0.0.1 only"
  REAL_NODES="${ARGS[0]}"
  nodes_check_args
  local t0=$SECONDS
  # What a failure puts back (add_nodes_undo): the state, the token file, the PKI's files.
  cp -f "$STATE" "$STATE.before-add"
  cp -f "$PKI/tokens.csv" "$PKI/tokens.csv.before-add"
  find "$PKI" -maxdepth 1 -type f -printf '%f\n' >"$DIR/pki-files.before-add"
  ADDING=1 ADD_RESTARTED=""
  nodes_prepare
  nodes_pki
  local key
  for key in REAL_NODES NODES_BRIDGE NODES_NET NODES_BRIDGE_MADE PAUSE_IMAGE; do
    sed -i "s|^$key=.*|$key=${!key}|" "$STATE"
  done
  # The node tokens and the Node authorizer are read at the API server's start. SIGKILL: the
  # state is in etcd, and a SIGTERM waits out every open watch (>10 s), long enough for a
  # leader-elected client (the operator) to lose its Lease. The new one starts only once the
  # old one is gone and its port is free.
  ADD_RESTARTED+=" apiserver"
  stop_apiserver KILL
  mv -f "$LOGS/kube-apiserver.log" "$LOGS/kube-apiserver.previous.log" 2>/dev/null || true
  start_apiserver
  wait_for kube-apiserver "/readyz on port $APISERVER_PORT" apiserver_ready
  # kube-controller-manager gains the controllers real nodes need (load_state adds them).
  ADD_RESTARTED+=" kcm"
  stop_one kube-controller-manager TERM
  mv -f "$LOGS/kube-controller-manager.log" "$LOGS/kube-controller-manager.previous.log" 2>/dev/null || true
  load_state
  start_controller_manager
  if ! pid_of kube-scheduler >/dev/null; then
    ADD_RESTARTED+=" scheduler"
    start_scheduler
  fi
  nodes_start
  ADDING=0
  rm -f "$STATE.before-add" "$PKI/tokens.csv.before-add" "$DIR/pki-files.before-add"
  log "added $REAL_NODES real node(s) in $((SECONDS - t0))s"
}

# After a failed `add-nodes`: the nodes and all they left removed; the state, the token file
# and the PKI as before; and what it restarted running again as before (the API server
# without the node tokens and the Node authorizer, kube-controller-manager without the
# nodes' controllers). So `add-nodes` can simply be run again.
add_nodes_undo() {
  ADDING=0 # a failure from here on just exits
  log "add-nodes failed; putting the cluster back as it was ..."
  nodes_down >/dev/null 2>&1 || true
  rm -rf --one-file-system "$DIR/nodes" || log "could not remove all of $DIR/nodes"
  [[ -f "$STATE.before-add" ]] && mv -f "$STATE.before-add" "$STATE"
  [[ -f "$PKI/tokens.csv.before-add" ]] && mv -f "$PKI/tokens.csv.before-add" "$PKI/tokens.csv"
  if [[ -f "$DIR/pki-files.before-add" ]]; then
    local f
    while read -r f; do
      grep -qxF -- "$f" "$DIR/pki-files.before-add" || rm -f -- "${PKI:?}/$f"
    done < <(find "$PKI" -maxdepth 1 -type f -printf '%f\n')
    rm -f "$DIR/pki-files.before-add"
  fi
  KCM_CONTROLLERS="$KCM_CONTROLLERS_GIVEN"
  load_state
  if [[ " $ADD_RESTARTED " == *" apiserver "* ]]; then
    if [[ -e "$LOGS/kube-apiserver.log" ]]; then
      mv -f "$LOGS/kube-apiserver.log" "$LOGS/kube-apiserver.add-nodes-failed.log"
      log "the failed API server's log is kept as $LOGS/kube-apiserver.add-nodes-failed.log"
    fi
    stop_apiserver KILL
    start_apiserver
    wait_for kube-apiserver "/readyz on port $APISERVER_PORT (started again as before)" apiserver_ready
  fi
  if [[ " $ADD_RESTARTED " == *" kcm "* ]]; then
    stop_one kube-controller-manager TERM
    start_controller_manager
  fi
  if [[ " $ADD_RESTARTED " == *" scheduler "* ]]; then
    stop_one kube-scheduler TERM
  fi
  log "the cluster is as it was before add-nodes; add-nodes can be run again"
}

cmd_import_image() { # image or archive
  [[ ${#ARGS[@]} -eq 1 ]] || usage
  healthy || fail "no running, ready cluster in $DIR; run: $0 up $DIR"
  nodes_import_image "${ARGS[0]}"
}

case "$CMD" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  restart-controller-manager) cmd_restart_controller_manager ;;
  restart-apiserver) cmd_restart_component kube-apiserver ;;
  restart-etcd) cmd_restart_component etcd ;;
  fail-pod) cmd_fail_pod ;;
  remove-node) cmd_remove_node ;;
  import-image) cmd_import_image ;;
  add-nodes) cmd_add_nodes ;;
  *) usage ;;
esac
