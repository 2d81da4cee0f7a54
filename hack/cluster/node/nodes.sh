# shellcheck shell=bash disable=SC2153 # DIR, PIDS, LOGS...: cluster.sh's
# Real kubelet nodes for hack/cluster/cluster.sh (HOSTPOOL_REAL_NODES=N): sourced by it, uses
# its variables (DIR, PKI, LOGS, PIDS, BIN_DIR, STATE, APISERVER_*) and functions (log, fail,
# start, pid_of, survived_start, wait_for, kubectl_admin).
#
# Each node real-node-K is a kubelet (built by hack/cluster/tools.sh --nodes) with a containerd
# of its own: the kubelet takes every sandbox its runtime reports for its own and removes those
# it does not know, so two kubelets cannot share one containerd. containerd is Debian's (with
# runc and the CNI plugins; installed with apt-get where missing), its config, root, state and
# sockets under DIR/nodes/<node>/. The pause image comes from tools.sh (pause.tar), imported.
# Volumes: rancher's local-path-provisioner (tools.sh) provisions the default storage class
# local-path, a directory per claim under DIR/volumes on the pod's node (volumes_start).
#
# Network: one bridge per cluster, hpn<X> with 10.244.X.0/24 (X picked free at `up`, or
# HOSTPOOL_NODES_BRIDGE=NAME:10.244.X.1/24). Node K's address is 10.244.X.K (a secondary
# address of the bridge; node 1's is the gateway); its pods get 10.244.X.10-254, split between
# the nodes (CNI bridge + host-local). Pods of all the cluster's nodes share that bridge, so
# they reach each other and the host; nothing leaves the host (no masquerade).
#
# The API server: unless HOSTPOOL_HOSTS_BRIDGE moves it, it serves on the gateway 10.244.X.1
# (reachable from pods, unlike 127.0.0.1). Pods' in-cluster config (KUBERNETES_SERVICE_HOST/
# PORT, set by the kubelet from the `kubernetes` Service: 10.0.0.1:443) reaches it through one
# DNAT rule for traffic from the pod subnet, in a chain of this cluster's own (what kube-proxy
# would do for that one Service; no kube-proxy runs, other Services do not route).
#
# Authentication as on a real cluster: each node has a token of its own (system:node:<name>,
# group system:nodes), the API server runs the Node authorizer and NodeRestriction and calls
# kubelets with a client certificate; kubelets serve a certificate signed by the cluster CA and
# accept only that CA's clients and webhook-authorized tokens (anonymous calls: 401).
#
# What is left outside DIR, and removed by `down`: per node, its cgroup tree (cgroupRoot
# /hostpool-<bridge>-<node>, in every hierarchy); /var/log/containers symlinks into DIR;
# /var/lib/cni/results entries of this cluster's network; /run/containerd/s shim sockets of its
# containers; the bridge, the DNAT chain, portmap's per-pod chains. When no other kubelet runs
# on the machine: /var/lib/kubelet/device-plugins, and the shared CNI-HOSTPORT-* chains (and the
# kubelet's KUBE-* chains, which these kubelets are told not to make). Directories made for
# those paths go too when empty. Mounts under DIR (the kubelet's bind mount of its root,
# volumes, network namespaces) are unmounted.

NODE_PREFIX=real-node
NODE_MAX=8
CNI_BIN_DIR="${HOSTPOOL_CNI_BIN_DIR:-/usr/lib/cni}"
# The kubernetes Service's ClusterIP (first address of --service-cluster-ip-range) and port.
KUBERNETES_SERVICE_IP=10.0.0.1
NODE_PACKAGES=(containerd containernetworking-plugins runc iptables iproute2)

node_name() { echo "$NODE_PREFIX-$1"; }
node_dir() { echo "$DIR/nodes/$(node_name "$1")"; }
node_ip() { echo "$NODES_NET.$1"; }
node_sock() { echo "$(node_dir "$1")/containerd.sock"; }
node_cgroup_root() { echo "/hostpool-$NODES_BRIDGE-$(node_name "$1")"; }
node_ctr() { # k args... : ctr against node k's containerd, namespace k8s.io (the CRI's)
  local k="$1"
  shift
  ctr --address "$(node_sock "$k")" --namespace k8s.io "$@"
}

# The binary of a component: node components are named <binary>-<node>.
comp_bin() {
  case "$1" in
    kubelet-*) echo kubelet ;;
    containerd-*) echo containerd ;;
    *) echo "$1" ;;
  esac
}

node_components() { # the pid-file names of the nodes' processes
  local k
  for ((k = 1; k <= ${REAL_NODES:-0}; k++)); do
    echo "containerd-$(node_name "$k")" "kubelet-$(node_name "$k")"
  done
  ((${REAL_NODES:-0} == 0)) || echo local-path-provisioner
}

nodes_missing() { # the commands/plugins real nodes need that are not here
  local c missing=()
  for c in containerd ctr runc ip iptables ip6tables iptables-save; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  for c in bridge host-local portmap loopback; do
    [[ -x "$CNI_BIN_DIR/$c" ]] || missing+=("$CNI_BIN_DIR/$c")
  done
  echo "${missing[*]}"
}

# Why real nodes cannot run here ('' when they can: root, and the packages present or
# installable with apt-get).
nodes_why_not() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "real nodes need root (cgroups, a bridge, iptables, mounts); uid is $(id -u)"
    return
  fi
  local missing
  missing="$(nodes_missing)"
  if [[ -n "$missing" ]] && ! command -v apt-get >/dev/null; then
    echo "real nodes need $missing and there is no apt-get to install them"
  fi
}

nodes_install() { # apt-get what is missing (as hack/cluster/image.sh does for podman)
  local missing
  missing="$(nodes_missing)"
  [[ -z "$missing" ]] && return 0
  log "real nodes need $missing: installing ${NODE_PACKAGES[*]} with apt-get ..."
  export DEBIAN_FRONTEND=noninteractive
  "$REPO_ROOT/hack/cluster/apt-install.sh" "${NODE_PACKAGES[@]}" >"$LOGS/apt-get.log" 2>&1 ||
    fail "apt-get install ${NODE_PACKAGES[*]} failed; see $LOGS/apt-get.log"
  missing="$(nodes_missing)"
  [[ -z "$missing" ]] || fail "still missing after apt-get: $missing (HOSTPOOL_CNI_BIN_DIR: the CNI plugins' directory)"
}

net_in_use() { # 10.244.X -> true when any interface or route uses 10.244.X.0/24
  ip -4 -o addr show | grep -q " inet ${1//./\\.}\." && return 0
  ip -4 route show | grep -q "^${1//./\\.}\." && return 0
  return 1
}

nodes_make_bridge() { # sets NODES_BRIDGE, NODES_NET, NODES_BRIDGE_MADE
  NODES_BRIDGE_MADE=0
  if [[ -n "${HOSTPOOL_NODES_BRIDGE:-}" ]]; then
    local name="${HOSTPOOL_NODES_BRIDGE%%:*}" cidr="${HOSTPOOL_NODES_BRIDGE#*:}"
    [[ "$name" =~ ^[a-z][a-z0-9]{0,14}$ && "$cidr" =~ ^10\.244\.([0-9]{1,3})\.1/24$ ]] ||
      fail "HOSTPOOL_NODES_BRIDGE must be NAME:10.244.X.1/24 (e.g. hpn9:10.244.9.1/24), not $HOSTPOOL_NODES_BRIDGE"
    NODES_NET="10.244.${BASH_REMATCH[1]}"
    if ! ip link show "$name" >/dev/null 2>&1; then
      ip link add "$name" type bridge || fail "could not make bridge $name"
      NODES_BRIDGE_MADE=1
    fi
    NODES_BRIDGE="$name"
  else
    # The first free 10.244.X.0/24 whose bridge hpn<X> we can make: `ip link add` fails when a
    # concurrent `up` took the same X, and we try the next one.
    local x
    for ((x = 1; x < 255; x++)); do
      net_in_use "10.244.$x" && continue
      ip link show "hpn$x" >/dev/null 2>&1 && continue
      if ip link add "hpn$x" type bridge 2>/dev/null; then
        NODES_BRIDGE="hpn$x" NODES_NET="10.244.$x" NODES_BRIDGE_MADE=1
        break
      fi
    done
    [[ -n "${NODES_BRIDGE:-}" ]] || fail "no free 10.244.X.0/24 for the nodes' bridge"
  fi
  local k
  ip -4 -o addr show dev "$NODES_BRIDGE" | grep -q " $NODES_NET.1/24 " ||
    ip addr add "$NODES_NET.1/24" dev "$NODES_BRIDGE" ||
    fail "could not give bridge $NODES_BRIDGE the address $NODES_NET.1/24"
  for ((k = 2; k <= REAL_NODES; k++)); do
    ip -4 -o addr show dev "$NODES_BRIDGE" | grep -q " $NODES_NET.$k/" ||
      ip addr add "$NODES_NET.$k/32" dev "$NODES_BRIDGE" ||
      fail "could not give bridge $NODES_BRIDGE the address $NODES_NET.$k"
  done
  ip link set "$NODES_BRIDGE" up
  log "nodes' bridge $NODES_BRIDGE ($NODES_NET.0/24); node addresses $NODES_NET.1-$REAL_NODES"
}

nodes_check_args() { # validates HOSTPOOL_REAL_NODES (in REAL_NODES) and the machine
  [[ "$REAL_NODES" =~ ^[0-9]+$ ]] || fail "HOSTPOOL_REAL_NODES must be a whole number, not $REAL_NODES"
  ((REAL_NODES <= NODE_MAX)) || fail "HOSTPOOL_REAL_NODES: at most $NODE_MAX, not $REAL_NODES"
  ((REAL_NODES > 0)) || return 0
  local why
  why="$(nodes_why_not)"
  [[ -z "$why" ]] || fail "$why"
  local need
  for need in kubelet pause.tar local-path-provisioner volume-helper.tar; do
    [[ -s "$BIN_DIR/$need" ]] ||
      fail "$BIN_DIR/$need not found; run hack/cluster/tools.sh --nodes (make tools-nodes) first"
  done
  # Unix sockets: 108 bytes at most, the deepest being the kubelet's pod-resources socket.
  local deepest
  deepest="$DIR/nodes/$(node_name "$REAL_NODES")/kubelet/pod-resources/kubelet.sock"
  ((${#deepest} < 104)) || fail "DIR is too long for real nodes' unix sockets ($deepest)"
}

nodes_prepare() { # containerd & co. installed, PAUSE_IMAGE, an empty DIR/nodes, the bridge
  nodes_install
  PAUSE_IMAGE="$(tar -xOf "$BIN_DIR/pause.tar" manifest.json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["RepoTags"][0])')" ||
    fail "no image name in $BIN_DIR/pause.tar"
  rm -rf "$DIR/nodes"
  mkdir -p "$DIR/nodes"
  nodes_make_bridge
}

nodes_pki() { # node tokens, the API server's kubelet client certificate, kubelets' serving certs
  ((${REAL_NODES:-0} > 0)) || return 0
  local o="$PKI/openssl.log" k name ip
  {
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout "$PKI/apiserver-kubelet-client.key" -out "$PKI/apiserver-kubelet-client.csr" \
      -subj "/O=system:masters/CN=kube-apiserver-kubelet-client"
    printf '%s\n' "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=clientAuth" \
      >"$PKI/client.ext"
    openssl x509 -req -in "$PKI/apiserver-kubelet-client.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
      -CAcreateserial -days 3650 -extfile "$PKI/client.ext" -out "$PKI/apiserver-kubelet-client.crt"
    for ((k = 1; k <= REAL_NODES; k++)); do
      name="$(node_name "$k")" ip="$(node_ip "$k")"
      openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$PKI/kubelet-$name.key" -out "$PKI/kubelet-$name.csr" -subj "/O=system:nodes/CN=system:node:$name"
      printf '%s\n' "subjectAltName=IP:$ip,DNS:$name" "keyUsage=critical,digitalSignature,keyEncipherment" \
        "extendedKeyUsage=serverAuth" >"$PKI/kubelet-$name.ext"
      openssl x509 -req -in "$PKI/kubelet-$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
        -CAcreateserial -days 3650 -extfile "$PKI/kubelet-$name.ext" -out "$PKI/kubelet-$name.crt"
    done
  } >>"$o" 2>&1 || fail "generating the nodes' certificates with openssl failed; see $o: $(tail -n 5 "$o")"
  # One token per node: a node's earlier line (an attempt that failed before it could be
  # undone) is replaced, never added to. Written whole, then moved into place.
  local tmp="$PKI/tokens.csv.tmp" nodes_re
  nodes_re=",system:node:$NODE_PREFIX-[0-9]+,"
  (
    umask 077
    grep -Ev -- "$nodes_re" "$PKI/tokens.csv" >"$tmp" || true
    for ((k = 1; k <= REAL_NODES; k++)); do
      name="$(node_name "$k")"
      echo "$(openssl rand -hex 24),system:node:$name,system:node:$name,system:nodes" >>"$tmp"
    done
  ) || fail "could not write the nodes' tokens to $tmp"
  mv -f "$tmp" "$PKI/tokens.csv"
  chmod 600 "$PKI"/*.key
}

nodes_apiserver_args() { # kube-apiserver flags for nodes (none without)
  ((${REAL_NODES:-0} > 0)) || return 0
  printf '%s\n' --enable-admission-plugins=NodeRestriction \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" \
    --kubelet-preferred-address-types=InternalIP
}

iptables_both() { # args... : the same iptables command for IPv4 and IPv6 (quietly)
  iptables -w "$@" 2>/dev/null
  ip6tables -w "$@" 2>/dev/null
  return 0
}

nodes_chain() { echo "HOSTPOOL-APISVC-$NODES_BRIDGE"; }

nodes_iptables_up() { # pods' traffic to the kubernetes Service -> the API server
  local chain
  chain="$(nodes_chain)"
  iptables -w -t nat -N "$chain" 2>/dev/null || iptables -w -t nat -F "$chain"
  iptables -w -t nat -A "$chain" -d "$KUBERNETES_SERVICE_IP/32" -p tcp --dport 443 \
    -j DNAT --to-destination "$APISERVER_ADDRESS:$APISERVER_PORT" ||
    fail "could not add the DNAT rule for the kubernetes Service"
  iptables -w -t nat -C PREROUTING -s "$NODES_NET.0/24" -j "$chain" 2>/dev/null ||
    iptables -w -t nat -I PREROUTING -s "$NODES_NET.0/24" -j "$chain" ||
    fail "could not add the jump to $chain in nat PREROUTING"
}

nodes_iptables_down() {
  local chain
  chain="$(nodes_chain)"
  while iptables -w -t nat -D PREROUTING -s "$NODES_NET.0/24" -j "$chain" 2>/dev/null; do :; done
  if iptables -w -t nat -F "$chain" 2>/dev/null; then iptables -w -t nat -X "$chain" 2>/dev/null; fi
  # portmap's per-pod chains for this cluster's network (left when a pod's CNI DEL never ran).
  local ipt rule dn
  for ipt in iptables ip6tables; do
    while read -r rule; do
      dn="$(grep -o -- '-j CNI-DN-[0-9a-f]*' <<<"$rule" | cut -d' ' -f2 || true)"
      # shellcheck disable=SC2086 # the rule as iptables-save prints it, word by word
      eval "$ipt -w -t nat -D ${rule#-A }" 2>/dev/null || true
      if [[ -n "$dn" ]]; then "$ipt" -w -t nat -F "$dn" 2>/dev/null || true; "$ipt" -w -t nat -X "$dn" 2>/dev/null || true; fi
    done < <("$ipt-save" -t nat 2>/dev/null | grep -- "-A CNI-HOSTPORT-[A-Z]* .*name: \\\\\"$(cni_net_name)\\\\\"" || true)
  done
}

other_kubelets() { # true when a kubelet other than ours runs on this machine
  local p comm
  for p in /proc/[0-9]*; do
    comm="$(cat "$p/comm" 2>/dev/null)" || continue
    [[ "$comm" == kubelet ]] || continue
    grep -qF -- "$DIR/nodes/" "$p/cmdline" 2>/dev/null && continue
    return 0
  done
  return 1
}

shared_iptables_down() { # the machine-wide chains, when no kubelet is left to use them
  local ipt t c chains
  for ipt in iptables ip6tables; do
    for t in nat filter mangle; do
      chains="$("$ipt-save" -t "$t" 2>/dev/null | sed -n 's/^:\(CNI-HOSTPORT-[A-Z]*\|CNI-DN-[0-9a-f]*\|KUBE-FIREWALL\|KUBE-KUBELET-CANARY\|KUBE-IPTABLES-HINT\) .*/\1/p')"
      [[ -n "$chains" ]] || continue
      # Jumps to them from any chain, then the chains themselves.
      while read -r rule; do
        # shellcheck disable=SC2086
        eval "$ipt -w -t $t -D ${rule#-A }" 2>/dev/null || true
      done < <("$ipt-save" -t "$t" | grep -E -- "-j ($(tr '\n' '|' <<<"$chains" | sed 's/|$//'))( |$)" || true)
      for c in $chains; do "$ipt" -w -t "$t" -F "$c" 2>/dev/null || true; done
      for c in $chains; do "$ipt" -w -t "$t" -X "$c" 2>/dev/null || true; done
    done
  done
}

cni_net_name() { echo "hostpool-$NODES_BRIDGE"; }

cgroup_mounts() { # the mount point of every cgroup hierarchy (v1 and v2)
  sed -n 's/^[^ ]* [^ ]* [^ ]* [^ ]* \([^ ]*\) .* - cgroup2\? .*/\1/p' /proc/self/mountinfo
}

nodes_cgroups_up() { # k : node k's cgroup root in every hierarchy (the kubelet wants it there)
  local root m
  root="$(node_cgroup_root "$1")"
  while read -r m; do
    mkdir -p "$m$root" || fail "could not make cgroup $m$root"
    # cpuset: a new cgroup has no CPUs or memory nodes until given its parent's.
    if [[ -f "$m$root/cpuset.cpus" && -z "$(<"$m$root/cpuset.cpus")" ]]; then
      cat "$m/cpuset.cpus" >"$m$root/cpuset.cpus"
      cat "$m/cpuset.mems" >"$m$root/cpuset.mems"
    fi
  done < <(cgroup_mounts)
}

nodes_cgroups_kill() { # k : SIGKILL whatever still runs in node k's cgroup tree; wait for it
  local root m pids i
  root="$(node_cgroup_root "$1")"
  for ((i = 0; i < 50; i++)); do
    pids=""
    while read -r m; do
      [[ -d "$m$root" ]] || continue
      pids+=" $(find "$m$root" -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ' || true)"
    done < <(cgroup_mounts)
    [[ -n "${pids// /}" ]] || return 0
    # shellcheck disable=SC2086 # a list of pids
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  log "processes still in cgroup $root after SIGKILL: $pids"
}

nodes_cgroups_down() { # k : rmdir node k's cgroup tree, leaves first (processes must be gone)
  local root m d
  root="$(node_cgroup_root "$1")"
  while read -r m; do
    [[ -d "$m$root" ]] || continue
    while read -r d; do
      rmdir "$d" 2>/dev/null || log "could not remove cgroup $d (processes still in it: $(tr '\n' ' ' <"$d/cgroup.procs" 2>/dev/null))"
    done < <(find "$m$root" -depth -type d)
  done < <(cgroup_mounts)
}

write_node_config() { # k : containerd, CNI and kubelet configuration of node k
  local k="$1" d name ip first last span
  d="$(node_dir "$k")" name="$(node_name "$k")" ip="$(node_ip "$k")"
  mkdir -p "$d"/{net.d,cni-ipam,containerd-root,containerd-state,runc,kubelet,pod-logs,volume-plugins,certs}
  # containerd: everything under the node's directory. restrict_oom_score_adj: root here may
  # lack CAP_SYS_RESOURCE, without which every sandbox fails ("can't get final child's PID
  # from pipe: EOF"); the opt plugin would make /opt/containerd.
  cat >"$d/containerd.toml" <<EOF
version = 2
root = "$d/containerd-root"
state = "$d/containerd-state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$d/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$d/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
        Root = "$d/runc"
EOF
  # Pod addresses: .10-.254 of the subnet, split between the nodes.
  span=$((245 / REAL_NODES))
  first=$((10 + (k - 1) * span)) last=$((10 + k * span - 1))
  cat >"$d/net.d/10-hostpool.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$(cni_net_name)",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$NODES_BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$NODES_NET.0/24", "rangeStart": "$NODES_NET.$first",
                     "rangeEnd": "$NODES_NET.$last", "gateway": "$NODES_NET.1"}]],
        "routes": [{"dst": "0.0.0.0/0", "gw": "$NODES_NET.1"}],
        "dataDir": "$d/cni-ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  local tokens
  mapfile -t tokens < <(grep -F ",system:node:$name," "$PKI/tokens.csv" | cut -d, -f1)
  ((${#tokens[@]} == 1)) ||
    fail "$PKI/tokens.csv has ${#tokens[@]} tokens for system:node:$name; it needs exactly one"
  # Written whole to a temporary file (only root may read it), then moved into place.
  (umask 077 && cat >"$d/kubeconfig.tmp") <<EOF
apiVersion: v1
kind: Config
clusters:
- name: hostpool-local
  cluster:
    server: https://$APISERVER_ADDRESS:$APISERVER_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: system:node:$name
  user:
    token: ${tokens[0]}
contexts:
- name: node
  context: {cluster: hostpool-local, user: "system:node:$name"}
current-context: node
EOF
  mv -f "$d/kubeconfig.tmp" "$d/kubeconfig"
  # failCgroupV1: these machines run cgroups v1 (hybrid). makeIPTablesUtilChains: no
  # machine-wide KUBE-* chains (they guard route_localnet, which nothing here turns on).
  # Images cannot be pulled again (no registry): image GC never runs; eviction only when
  # really short.
  cat >"$d/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: $ip
healthzPort: 10248
tlsCertFile: $PKI/kubelet-$name.crt
tlsPrivateKeyFile: $PKI/kubelet-$name.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$d/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: $(node_cgroup_root "$k")
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
podLogsDir: $d/pod-logs
volumePluginDir: $d/volume-plugins
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 50Mi, nodefs.available: 2%, imagefs.available: 2%}
serializeImagePulls: false
EOF
}

containerd_ready() { node_ctr "$NODE_K" version >/dev/null 2>&1; }

start_node() { # k : containerd, the pause image, the kubelet of node k
  local k="$1" d name
  d="$(node_dir "$k")" name="$(node_name "$k")"
  write_node_config "$k"
  nodes_cgroups_up "$k"
  log "starting containerd for $name ($d/containerd.sock)"
  START_BIN="$(command -v containerd)" start "containerd-$name" --config "$d/containerd.toml"
  NODE_K="$k" wait_for "containerd-$name" "its socket answers" containerd_ready
  local image
  for image in pause.tar volume-helper.tar; do
    node_ctr "$k" images import "$BIN_DIR/$image" >>"$LOGS/containerd-$name.log" 2>&1 ||
      fail "importing $BIN_DIR/$image into $name's containerd failed" "containerd-$name"
  done
  log "starting kubelet $name on $(node_ip "$k")"
  START_BIN="$BIN_DIR/kubelet" start "kubelet-$name" \
    --config="$d/kubelet.yaml" \
    --kubeconfig="$d/kubeconfig" \
    --root-dir="$d/kubelet" \
    --cert-dir="$d/certs" \
    --node-ip="$(node_ip "$k")" \
    --hostname-override="$name" \
    --node-labels=type=real
}

real_nodes_ready() { # every real node Ready, without the not-ready taint
  local out
  out="$("$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG_PATH" get nodes -l type=real \
    -o 'jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}:{.spec.taints[*].key}{"\n"}{end}' 2>/dev/null)" ||
    return 1
  [[ "$(grep -c '=True:' <<<"$out")" -ge "$REAL_NODES" ]] || return 1
  ! grep -q 'node.kubernetes.io/not-ready' <<<"$out"
}

nodes_start() {
  ((${REAL_NODES:-0} > 0)) || return 0
  nodes_iptables_up
  local k t0=$SECONDS
  for ((k = 1; k <= REAL_NODES; k++)); do
    start_node "$k"
  done
  wait_for "kubelet-$(node_name 1)" "$REAL_NODES real node(s) Ready" real_nodes_ready
  log "$REAL_NODES real node(s) Ready in $((SECONDS - t0))s"
  volumes_start
}

# The nodes' volumes: rancher's local-path-provisioner, run here like the scheduler, makes a
# directory on the pod's node (under DIR/volumes) for each claim of the storage class
# local-path (the cluster's default), binding it once a pod that uses it is scheduled. Its
# helper pods run the volume helper image (tools.sh) in the namespace local-path-storage.
VOLUMES_NAMESPACE=local-path-storage
volumes_start() {
  local dir="$DIR/volumes" helper
  rm -rf --one-file-system "$dir" && mkdir -p "$dir"
  helper="$(tar -xOf "$BIN_DIR/volume-helper.tar" manifest.json |
    sed -n 's/.*"RepoTags":\["\([^"]*\)".*/\1/p')"
  [[ -n "$helper" ]] || fail "no image name in $BIN_DIR/volume-helper.tar"
  cat >"$DIR/volumes-config.json" <<EOF
{"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["$dir"]}],
 "setupCommand": "/volumehelper", "teardownCommand": "/volumehelper", "cmdTimeoutSeconds": 60}
EOF
  cat >"$DIR/volumes-helper-pod.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: helper-pod}
spec:
  containers:
  - {name: helper, image: "$helper", imagePullPolicy: Never}
EOF
  kubectl_admin apply -f - >>"$LOGS/local-path-provisioner.apply.log" 2>&1 <<EOF ||
apiVersion: v1
kind: Namespace
metadata: {name: $VOLUMES_NAMESPACE}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: local-path-provisioner, namespace: $VOLUMES_NAMESPACE}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-path
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: rancher.io/local-path
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
EOF
    fail "could not create the local-path storage class: $(tail -n 3 "$LOGS/local-path-provisioner.apply.log")"
  log "starting local-path-provisioner (volumes in $dir)"
  start local-path-provisioner --debug start --kubeconfig "$KUBECONFIG_PATH" \
    --config "$DIR/volumes-config.json" --helper-pod-file "$DIR/volumes-helper-pod.yaml" \
    --namespace "$VOLUMES_NAMESPACE" --service-account-name local-path-provisioner \
    --helper-image "$helper"
  survived_start local-path-provisioner ||
    fail "local-path-provisioner exited at start" local-path-provisioner
}

kubelet_healthy() { # k
  [[ "$(curl -fsS --max-time 2 "http://$(node_ip "$1"):10248/healthz" 2>/dev/null)" == ok ]]
}

nodes_healthy() {
  local k
  for ((k = 1; k <= ${REAL_NODES:-0}; k++)); do
    kubelet_healthy "$k" || return 1
  done
}

# Stop the nodes and remove all they left, inside DIR and out. Works from what state.env says
# (or the variables of a half-done `up`), whether the processes still run or not.
nodes_down() {
  ((${REAL_NODES:-0} > 0)) || return 0
  [[ -n "${NODES_BRIDGE:-}" && -n "${NODES_NET:-}" ]] || return 0
  # Best effort: one step failing must not stop the others.
  local -
  set +e
  local k name d ids id t0=$SECONDS
  local -A NODE_IDS=()
  # 0. The provisioner, so that it starts no helper pod while the nodes go.
  stop_group local-path-provisioner
  # 1. Pods first, while the kubelets and the API server run: deleting them makes the kubelet
  #    stop them properly (CNI DEL: veth, address, portmap rules). Short grace period; the
  #    nodes cordoned first so that controllers' replacements do not land there. What is not
  #    gone after a few seconds is removed below.
  if pid_of "kubelet-$(node_name 1)" >/dev/null && apiserver_ready 2>/dev/null; then
    local nodes_sel ns pod node n=0
    nodes_sel="$(seq -f "$NODE_PREFIX-%g" 1 "$REAL_NODES" | paste -sd,)"
    # shellcheck disable=SC2046 # node names
    kubectl_admin cordon $(tr , ' ' <<<"$nodes_sel") >/dev/null 2>&1
    while read -r ns pod node; do
      [[ ",$nodes_sel," == *",$node,"* ]] || continue
      kubectl_admin -n "$ns" delete pod "$pod" --grace-period=1 --wait=false >/dev/null 2>&1 || true
      n=$((n + 1))
    done < <(kubectl_admin get pods -A -o 'jsonpath={range .items[*]}{.metadata.namespace} {.metadata.name} {.spec.nodeName}{"\n"}{end}' 2>/dev/null)
    ((n == 0)) || log "deleting the $n pod(s) on the real nodes"
    local deadline=$((SECONDS + 4)) busy
    while ((SECONDS < deadline)); do
      busy=0
      for ((k = 1; k <= REAL_NODES; k++)); do
        [[ -S "$(node_sock "$k")" ]] || continue
        [[ -z "$(node_ctr "$k" tasks ls -q 2>/dev/null)" ]] || busy=1
      done
      ((busy)) || break
      sleep 0.1
    done
  fi
  # 2. The kubelets; then whatever still runs in each containerd (tasks, then containers), and
  #    containerd. Their container ids name their shims' sockets in /run/containerd/s.
  local kubelets=() containerds=()
  for ((k = 1; k <= REAL_NODES; k++)); do
    kubelets+=("kubelet-$(node_name "$k")") containerds+=("containerd-$(node_name "$k")")
  done
  stop_group "${kubelets[@]}"
  for ((k = 1; k <= REAL_NODES; k++)); do
    name="$(node_name "$k")" d="$(node_dir "$k")"
    # Every container and sandbox id containerd knows, also when it no longer runs.
    ids="$(
      { node_ctr "$k" containers ls -q 2>/dev/null || true
        ls "$d/containerd-state/io.containerd.runtime.v2.task/k8s.io" \
          "$d/containerd-root/io.containerd.grpc.v1.cri/sandboxes" \
          "$d/containerd-root/io.containerd.grpc.v1.cri/containers" 2>/dev/null || true
      } | grep -E '^[0-9a-f]{64}$' | sort -u || true
    )"
    if pid_of "containerd-$name" >/dev/null; then
      for id in $(node_ctr "$k" tasks ls -q 2>/dev/null); do
        node_ctr "$k" tasks delete --force "$id" >/dev/null 2>&1 || true
      done
      for id in $ids; do node_ctr "$k" containers delete "$id" >/dev/null 2>&1 || true; done
    fi
    NODE_IDS[$k]="$ids"
  done
  stop_group "${containerds[@]}"
  for ((k = 1; k <= REAL_NODES; k++)); do
    d="$(node_dir "$k")" ids="${NODE_IDS[$k]:-}"
    # What still runs (containerd or the kubelet killed before): every process of the node is
    # in its cgroup tree, shims aside.
    local p
    for p in $(pgrep -f -- "-address $(node_sock "$k")" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    nodes_cgroups_kill "$k"
    # A shim's socket: /run/containerd/s/sha256(<containerd address>/<namespace>/<id>); libcni's
    # cache of a sandbox whose CNI DEL never ran: /var/lib/cni/results/<network>-<id>-<ifname>.
    for id in $ids; do
      rm -f "/run/containerd/s/$(printf '%s' "$(node_sock "$k")/k8s.io/$id" | sha256sum | cut -d' ' -f1)"
      rm -f /var/lib/cni/results/*-"$id"-*
    done
  done
  # 3. Mounts under the nodes' directories, deepest first: the kubelet's bind mount of its root,
  #    volumes, network namespaces, sandbox shm, container root filesystems.
  #    The kernel names them by the real path: DIR may be reached through a (short) link.
  local m resolved
  resolved="$(readlink -f "$DIR")"
  while read -r m; do
    umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done < <(awk -v d="$DIR/nodes/" -v r="$resolved/nodes/" 'index($5, d) == 1 || index($5, r) == 1 {print $5}' /proc/self/mountinfo | sort -r)
  # 4. Cgroups, the bridge (and any veth still on it), iptables.
  for ((k = 1; k <= REAL_NODES; k++)); do nodes_cgroups_down "$k"; done
  if ip link show "$NODES_BRIDGE" >/dev/null 2>&1; then
    local v
    for v in $(ip -o link show master "$NODES_BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
      ip link del "$v" 2>/dev/null || true
    done
    if [[ "${NODES_BRIDGE_MADE:-0}" == 1 ]]; then
      ip link del "$NODES_BRIDGE" 2>/dev/null && log "removed bridge $NODES_BRIDGE"
    else
      for ((k = 1; k <= REAL_NODES; k++)); do
        ip addr del "$NODES_NET.$k/$([[ $k == 1 ]] && echo 24 || echo 32)" dev "$NODES_BRIDGE" 2>/dev/null || true
      done
    fi
  fi
  nodes_iptables_down
  # 5. Fixed paths outside DIR: this cluster's entries, then what no other kubelet uses.
  find /var/log/containers -maxdepth 1 -type l -lname "$DIR/nodes/*" -delete 2>/dev/null || true
  rm -f /var/lib/cni/results/"$(cni_net_name)"-* 2>/dev/null || true
  if ! other_kubelets; then
    rm -f /var/lib/kubelet/device-plugins/kubelet.sock /var/lib/kubelet/device-plugins/DEPRECATION
    shared_iptables_down
  fi
  rmdir /var/log/containers /var/lib/cni/results /var/lib/cni /var/lib/kubelet/device-plugins \
    /var/lib/kubelet /run/containerd/s /run/containerd 2>/dev/null || true
  # 6. The nodes' images and containers (hundreds of MB; `up` starts from none anyway). Logs,
  #    configuration and certificates stay.
  for ((k = 1; k <= REAL_NODES; k++)); do
    d="$(node_dir "$k")"
    rm -rf --one-file-system "$d/containerd-root" "$d/containerd-state" "$d/kubelet" 2>/dev/null
  done
  log "real nodes stopped and cleaned up in $((SECONDS - t0))s"
}

stop_group() { # names... : SIGTERM them all at once, then wait (SIGKILL after 10 s)
  local name pid i alive
  local -A pids=()
  for name in "$@"; do
    if pid="$(pid_of "$name")"; then
      pids[$name]=$pid
      kill -TERM "$pid" 2>/dev/null
    fi
    rm -f "$PIDS/$name.pid"
  done
  for ((i = 0; i < 200; i++)); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.05
  done
  for name in "${!pids[@]}"; do
    pid=${pids[$name]}
    if kill -0 "$pid" 2>/dev/null; then
      log "$name (pid $pid) ignored SIGTERM for 10s; killing it"
      kill -KILL "$pid" 2>/dev/null
    fi
    log "stopped $name (pid $pid)"
  done
}

nodes_import_image() { # IMAGE-or-archive : into every node's containerd
  local what="$1" tar k tmp=""
  ((${REAL_NODES:-0} > 0)) || fail "no real nodes in $DIR (HOSTPOOL_REAL_NODES=0 at up)"
  if [[ -f "$what" ]]; then
    tar="$what"
  else
    command -v podman >/dev/null || fail "podman not found (to save image $what); or pass an image archive"
    tmp="$(mktemp "$DIR/nodes/import.XXXXXX.tar")"
    rm -f "$tmp"
    podman save --format docker-archive -o "$tmp" "$what" >"$LOGS/import-image.log" 2>&1 ||
      { rm -f "$tmp"; fail "podman save $what failed: $(tail -n 3 "$LOGS/import-image.log")"; }
    tar="$tmp"
  fi
  for ((k = 1; k <= REAL_NODES; k++)); do
    node_ctr "$k" images import "$tar" >>"$LOGS/import-image.log" 2>&1 ||
      { [[ -n "$tmp" ]] && rm -f "$tmp"; fail "importing $what into $(node_name "$k") failed: $(tail -n 3 "$LOGS/import-image.log")"; }
  done
  [[ -n "$tmp" ]] && rm -f "$tmp"
  log "imported $what into $REAL_NODES node(s)"
}
