#!/usr/bin/env bash
# Build the local control-plane tools from Go modules, once, into a cache outside the repo,
# and link them into .cluster/bin/:
#   kube-apiserver, kube-controller-manager,
#   kube-scheduler, kubectl                           (k8s.io/kubernetes, hack/cluster/k8s)
#   etcd                                              (go.etcd.io/etcd/server/v3, hack/cluster/etcd)
#   helm                                              (helm.sh/helm/v3, hack/cluster/helm)
#   kwok, and kwok-stages.yaml from the same module   (sigs.k8s.io/kwok, hack/cluster/kwok)
#   promtool (alert-rule tests)                       (github.com/prometheus/prometheus,
#                                                      hack/cluster/promtool)
#   prometheus (recommend-plan --prometheus tests)    (the same module as promtool, its
#                                                      server without the web UI's assets)
#   with --nodes (real nodes, cluster.sh HOSTPOOL_REAL_NODES):
#   kubelet                                           (k8s.io/kubernetes, hack/cluster/kubelet;
#                                                      the same version as hack/cluster/k8s)
#   pause.tar, the pod sandbox image localhost/pause:<tag> as a docker archive: the module's
#   own build/pause/linux/pause.c compiled static with gcc, no registry
#   local-path-provisioner (a real dynamic provisioner of the nodes' volumes: PVCs of the
#                           storage class local-path)  (github.com/rancher/local-path-provisioner,
#                                                      hack/cluster/provisioner)
#   volume-helper.tar, localhost/hostpool-volume-helper:<recipe>, what the provisioner's helper
#   pods run: hack/cluster/provisioner/volumehelper, one static binary, as a docker archive
# The module versions are pinned by the committed go.mod/go.sum files under hack/cluster/.
# The cache key covers those files, the Go version and this script, so any change rebuilds.
# promtool, prometheus, the kubelet, the pause image, the provisioner and its helper image have
# cache keys of their own: adding or
# upgrading them rebuilds none of the others (and without --nodes they are not built at all).
#
# Usage: hack/cluster/tools.sh            build what is missing, link, print the bin dir
#        hack/cluster/tools.sh --control-plane   the same without promtool and prometheus (only
#                                                 the alert and recommend-plan --prometheus
#                                                 tests need them; a demo should not wait)
#        hack/cluster/tools.sh --nodes    also the kubelet, the pause image, the provisioner and
#                                          its helper image (combines with
#                                          --control-plane); needs gcc and libc6-dev (installed
#                                          with apt-get where missing, as root)
# Env:   HOSTPOOL_TOOLS_CACHE     cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/hostpool-operator)
#        HOSTPOOL_BIN_DIR         where to link the binaries (default <repo>/.cluster/bin)
#        HOSTPOOL_REAL_NODES      a number > 0 implies --nodes (so `HOSTPOOL_REAL_NODES=1 make
#                                 cluster-up` builds what its nodes need)
set -euo pipefail

WITH_PROMTOOL=1
WITH_NODES=0
[[ "${HOSTPOOL_REAL_NODES:-0}" =~ ^[1-9][0-9]*$ ]] && WITH_NODES=1
for arg in "$@"; do
  case "$arg" in
    --control-plane) WITH_PROMTOOL=0 ;;
    --nodes) WITH_NODES=1 ;;
    *) printf 'tools: unknown argument %s (usage: tools.sh [--control-plane] [--nodes])\n' "$arg" >&2; exit 2 ;;
  esac
done

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MODS="$REPO_ROOT/hack/cluster"

K8S_VERSION=v1.37.2
K8S_MINOR=37
ETCD_VERSION=v3.6.16
HELM_VERSION=v3.22.0
KWOK_VERSION=v0.8.0
PROMTOOL_VERSION=v0.316.0
PROVISIONER_VERSION=v0.0.30

K8S_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
ALL_BINS=("${K8S_BINS[@]}" etcd helm kwok)
# kwok's stages (how fake nodes and their pods move on): node "fast" and "heartbeat", pod "fast".
KWOK_STAGES=(node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml
  pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml)

log() { printf 'tools: %s\n' "$*" >&2; }
die() { printf 'tools: error: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "the Go toolchain (go) is not on PATH; install Go >= 1.26"

BIN_DIR="${HOSTPOOL_BIN_DIR:-$REPO_ROOT/.cluster/bin}"
CACHE_ROOT="${HOSTPOOL_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hostpool-operator}"

# How each binary is built; part of the cache key below.
GO_BUILD_FLAGS=(-trimpath -pgo=off)
ETCD_LDFLAGS="-s -w"
HELM_LDFLAGS="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
HELM_LDFLAGS+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
# kubectl reports component-base's version; client-go's goes into the User-Agent.
K8S_LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  K8S_LDFLAGS+=" -X $pkg.gitVersion=${K8S_VERSION}"
  K8S_LDFLAGS+=" -X $pkg.gitMajor=1 -X $pkg.gitMinor=${K8S_MINOR}"
  K8S_LDFLAGS+=" -X $pkg.gitTreeState=clean"
done
# promtool --version reports the module's version.
PROMTOOL_LDFLAGS="-s -w -X github.com/prometheus/common/version.Version=${PROMTOOL_VERSION#v}"
# prometheus --version too; the server is built from the same module (web UI assets not
# embedded: the tests use its HTTP API only).
PROMETHEUS_LDFLAGS="$PROMTOOL_LDFLAGS"

# Cache key: readable versions plus a hash of everything that shapes the binaries
# (Go version and platform, build flags, the pinned module graphs).
go_version="$(go env GOVERSION)"
digest="$(
  {
    echo "$go_version $(go env GOOS GOARCH | tr '\n' ' ') CGO_ENABLED=0"
    echo "${GO_BUILD_FLAGS[*]}|$ETCD_LDFLAGS|$HELM_LDFLAGS|$K8S_LDFLAGS"
    echo "${KWOK_STAGES[*]}"
    for m in k8s etcd helm kwok; do cat "$MODS/$m/go.mod" "$MODS/$m/go.sum"; done
  } | sha256sum | cut -c1-12
)"
KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_helm-${HELM_VERSION}_kwok-${KWOK_VERSION}_${go_version}_${digest}"
CACHE_BIN="$CACHE_ROOT/$KEY/bin"
# promtool and the server need no service discovery but the built-in static targets (the
# tests backfill a TSDB and run rules): remove_all_sd leaves out every discovery plugin but
# file and http, and with them the cloud SDKs that took most of a cold build.
PROM_TAGS=remove_all_sd
prom_key() { # NAME LDFLAGS -> the cache key of NAME built from hack/cluster/promtool
  local digest
  digest="$(
    {
      echo "$go_version $(go env GOOS GOARCH | tr '\n' ' ') CGO_ENABLED=0"
      echo "${GO_BUILD_FLAGS[*]}|$2|tags=$PROM_TAGS"
      cat "$MODS/promtool/go.mod" "$MODS/promtool/go.sum"
    } | sha256sum | cut -c1-12
  )"
  echo "$1-${PROMTOOL_VERSION}_${go_version}_${digest}"
}
PROM_KEY="$(prom_key promtool "$PROMTOOL_LDFLAGS")"
PROM_BIN="$CACHE_ROOT/$PROM_KEY/bin"
PROMETHEUS_KEY="$(prom_key prometheus "$PROMETHEUS_LDFLAGS")"
PROMETHEUS_BIN="$CACHE_ROOT/$PROMETHEUS_KEY/bin"
# The kubelet: the control plane's link flags, its own module (same k8s.io/kubernetes).
kubelet_digest="$(
  {
    echo "$go_version $(go env GOOS GOARCH | tr '\n' ' ') CGO_ENABLED=0"
    echo "${GO_BUILD_FLAGS[*]}|$K8S_LDFLAGS"
    cat "$MODS/kubelet/go.mod" "$MODS/kubelet/go.sum"
  } | sha256sum | cut -c1-12
)"
KUBELET_KEY="kubelet-${K8S_VERSION}_${go_version}_${kubelet_digest}"
KUBELET_BIN="$CACHE_ROOT/$KUBELET_KEY/bin"
# The pause image: keyed by its source's module version, gcc's version and this recipe's version.
PAUSE_RECIPE=1
PAUSE_CFLAGS=(-Os -Wall -Werror -static)
# The volumes' provisioner, and its helper image (keyed by its source, Go and this recipe).
# The helper is built without VCS stamps, so that the same source gives the same image.
module_key() { # NAME VERSION MODULE -> the cache key of NAME built from hack/cluster/MODULE
  local digest
  digest="$(
    {
      echo "$go_version $(go env GOOS GOARCH | tr '\n' ' ') CGO_ENABLED=0"
      echo "${GO_BUILD_FLAGS[*]}|-s -w"
      cat "$MODS/$3/go.mod" "$MODS/$3/go.sum"
      [[ "$1" != volume-helper ]] || cat "$MODS/$3/volumehelper/main.go"
    } | sha256sum | cut -c1-12
  )"
  echo "$1-${2}_${go_version}_${digest}"
}
PROVISIONER_KEY="$(module_key local-path-provisioner "$PROVISIONER_VERSION" provisioner)"
PROVISIONER_BIN="$CACHE_ROOT/$PROVISIONER_KEY/bin"
HELPER_RECIPE=2
HELPER_KEY="$(module_key volume-helper "r$HELPER_RECIPE" provisioner)"
HELPER_BIN="$CACHE_ROOT/$HELPER_KEY"

# image_once DIR NAME WHAT RECIPE: the image archive DIR/NAME, made once by `RECIPE ROOTFS OUT`
# (a function that fills the empty directory ROOTFS and writes the archive OUT) under DIR's
# lock: a second tools.sh waits for the first and reuses its result.
image_once() {
  local dir="$1" name="$2" what="$3" recipe="$4" tmp
  [[ -s "$dir/$name" ]] && return 0
  mkdir -p "$dir"
  exec 8>"$dir/.lock"
  flock 8
  if [[ ! -s "$dir/$name" ]]; then
    log "building $what ..."
    tmp="$(mktemp -d "$dir/build.XXXXXX")"
    mkdir -p "$tmp/rootfs"
    "$recipe" "$tmp/rootfs" "$dir/$name"
    rm -rf "$tmp"
    log "built $what ($(stat -c %s "$dir/$name") bytes)"
  fi
  exec 8>&-
}

# docker_archive DIR FILE USER NAME:TAG OUT: an image of one file, DIR/FILE, run as /FILE by
# USER, as a docker archive made by hand (ctr images import reads it; podman load too);
# reproducible (mtime 0, owner root).
docker_archive() {
  local rootfs="$1" file="$2" user="$3" ref="$4" out="$5" work layer_sha config_sha
  local tar_flags=(--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=ustar)
  work="$(mktemp -d "$(dirname "$out")/archive.XXXXXX")"
  tar -C "$rootfs" "${tar_flags[@]}" -cf "$work/layer.tar" "$file"
  layer_sha="$(sha256sum <"$work/layer.tar" | cut -d' ' -f1)"
  mkdir -p "$work/image/$layer_sha"
  mv "$work/layer.tar" "$work/image/$layer_sha/layer.tar"
  printf '{"architecture":"%s","os":"linux","created":"1970-01-01T00:00:00Z","config":{"Entrypoint":["/%s"],"User":"%s","WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$(go env GOARCH)" "$file" "$user" "$layer_sha" >"$work/config.json"
  config_sha="$(sha256sum <"$work/config.json" | cut -d' ' -f1)"
  mv "$work/config.json" "$work/image/$config_sha.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' \
    "$config_sha" "$ref" "$layer_sha" >"$work/image/manifest.json"
  tar -C "$work/image" "${tar_flags[@]}" -cf "$work/out.tar" \
    manifest.json "$config_sha.json" "$layer_sha/layer.tar"
  mv -f "$work/out.tar" "$out"
  rm -rf "$work"
}

link_all() {
  mkdir -p "$BIN_DIR"
  local b
  for b in "${ALL_BINS[@]}" kwok-stages.yaml; do
    ln -sfn "$CACHE_BIN/$b" "$BIN_DIR/$b"
  done
  if [[ -x "$PROM_BIN/promtool" ]]; then
    ln -sfn "$PROM_BIN/promtool" "$BIN_DIR/promtool"
  fi
  if [[ -x "$PROMETHEUS_BIN/prometheus" ]]; then
    ln -sfn "$PROMETHEUS_BIN/prometheus" "$BIN_DIR/prometheus"
  fi
  if [[ -x "$KUBELET_BIN/kubelet" ]]; then
    ln -sfn "$KUBELET_BIN/kubelet" "$BIN_DIR/kubelet"
  fi
  if [[ -n "${PAUSE_BIN:-}" && -s "$PAUSE_BIN/pause.tar" ]]; then
    ln -sfn "$PAUSE_BIN/pause.tar" "$BIN_DIR/pause.tar"
  fi
  if [[ -x "$PROVISIONER_BIN/local-path-provisioner" ]]; then
    ln -sfn "$PROVISIONER_BIN/local-path-provisioner" "$BIN_DIR/local-path-provisioner"
  fi
  if [[ -s "$HELPER_BIN/volume-helper.tar" ]]; then
    ln -sfn "$HELPER_BIN/volume-helper.tar" "$BIN_DIR/volume-helper.tar"
  fi
  echo "$BIN_DIR"
}

all_cached() {
  local b
  for b in "${ALL_BINS[@]}"; do
    [[ -x "$CACHE_BIN/$b" ]] || return 1
  done
  [[ -s "$CACHE_BIN/kwok-stages.yaml" ]]
}

export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -mod=readonly"

# go build NAME-LIST MODULE-DIR LDFLAGS PACKAGES...: builds into a temp dir, then moves
# the binaries into the cache (DEST_BIN, default CACHE_BIN) so that a half-written binary
# is never taken as built.
build() {
  local names="$1" dir="$2" ldflags="$3"
  shift 3
  local dest="${DEST_BIN:-$CACHE_BIN}"
  local tmp start end
  tmp="$(mktemp -d "$(dirname "$dest")/build.XXXXXX")"
  start=$(date +%s)
  log "building $names (in hack/cluster/$(basename "$dir")) ..."
  local out="$tmp/"
  [[ $# -eq 1 ]] && out="$tmp/$names" # a single package is named after us, not its path
  local tags=()
  [[ -z "${BUILD_TAGS:-}" ]] || tags=(-tags "$BUILD_TAGS")
  if ! (cd "$dir" && go build "${GO_BUILD_FLAGS[@]}" "${tags[@]}" -ldflags "$ldflags" -o "$out" "$@"); then
    rm -rf "$tmp"
    die "go build of $names failed (module hack/cluster/$(basename "$dir"))"
  fi
  local n
  for n in $names; do
    [[ -x "$tmp/$n" ]] || die "go build did not produce $n"
    mv -f "$tmp/$n" "$dest/$n"
  done
  rm -rf "$tmp"
  end=$(date +%s)
  log "built $names in $((end - start))s"
}

need() {
  local b
  for b in "$@"; do
    [[ -x "$CACHE_BIN/$b" ]] || return 0
  done
  return 1
}

# build_locked KEY NAME MODULE-DIR LDFLAGS PACKAGE: NAME into CACHE_ROOT/KEY/bin once, under
# that key's own lock (a second tools.sh waits for the first and reuses its result).
build_locked() {
  local key="$1" name="$2" dir="$3" ldflags="$4" package="$5"
  local dest="$CACHE_ROOT/$key/bin"
  [[ -x "$dest/$name" ]] && return 0
  mkdir -p "$dest"
  exec 8>"$CACHE_ROOT/$key/.lock"
  if ! flock -n 8; then
    log "another hack/cluster/tools.sh is building $key; waiting for it"
    flock 8
  fi
  if [[ ! -x "$dest/$name" ]]; then
    DEST_BIN="$dest" build "$name" "$dir" "$ldflags" "$package"
  fi
  exec 8>&-
}

# promtool and the prometheus server: each under its own key and lock.
if [[ "$WITH_PROMTOOL" == 1 ]]; then
  BUILD_TAGS="$PROM_TAGS" build_locked "$PROM_KEY" promtool "$MODS/promtool" "$PROMTOOL_LDFLAGS" \
    github.com/prometheus/prometheus/cmd/promtool
  BUILD_TAGS="$PROM_TAGS" build_locked "$PROMETHEUS_KEY" prometheus "$MODS/promtool" \
    "$PROMETHEUS_LDFLAGS" github.com/prometheus/prometheus/cmd/prometheus
fi

# The kubelet and the pause image (--nodes): each under its own key and lock.
if [[ "$WITH_NODES" == 1 ]]; then
  # The kubelet must come from the Kubernetes the control plane is built from.
  for m in k8s kubelet; do
    grep -qx "require k8s.io/kubernetes $K8S_VERSION" "$MODS/$m/go.mod" ||
      die "hack/cluster/$m/go.mod does not require k8s.io/kubernetes $K8S_VERSION (K8S_VERSION here)"
  done
  build_locked "$KUBELET_KEY" kubelet "$MODS/kubelet" "$K8S_LDFLAGS" k8s.io/kubernetes/cmd/kubelet

  static_libc() { local f; f="$(gcc -print-file-name=libc.a 2>/dev/null)" && [[ "$f" == /* && -e "$f" ]]; }
  if ! command -v gcc >/dev/null || ! static_libc; then
    if command -v apt-get >/dev/null && [[ $(id -u) -eq 0 ]]; then
      log "installing gcc and libc6-dev with apt-get (the pause image is compiled from C) ..."
      "$REPO_ROOT/hack/cluster/apt-install.sh" gcc libc6-dev >&2 ||
        die "apt-get install gcc libc6-dev failed"
    else
      die "the pause image needs gcc and a static libc (Debian: apt-get install gcc libc6-dev)"
    fi
  fi
  k8s_dir="$(cd "$MODS/kubelet" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
  PAUSE_SRC="$k8s_dir/build/pause/linux/pause.c"
  [[ -f "$PAUSE_SRC" ]] || die "pause.c not found in $k8s_dir/build/pause/linux"
  # The tag the module's own build/pause/Makefile gives the image.
  PAUSE_TAG="$(sed -n 's/^TAG ?= *//p' "$k8s_dir/build/pause/Makefile")"
  [[ "$PAUSE_TAG" =~ ^[0-9][0-9.]*$ ]] || die "no pause TAG found in $k8s_dir/build/pause/Makefile"
  pause_digest="$(
    {
      echo "$PAUSE_RECIPE ${PAUSE_CFLAGS[*]} $(gcc -dumpfullversion 2>/dev/null) $(go env GOARCH)"
      cat "$PAUSE_SRC"
    } | sha256sum | cut -c1-12
  )"
  PAUSE_KEY="pause-${PAUSE_TAG}_${K8S_VERSION}_${pause_digest}"
  PAUSE_BIN="$CACHE_ROOT/$PAUSE_KEY"
  pause_recipe() { # ROOTFS OUT
    gcc "${PAUSE_CFLAGS[@]}" -DVERSION="v$PAUSE_TAG" -o "$1/pause" "$PAUSE_SRC" >&2 ||
      die "gcc could not compile $PAUSE_SRC"
    strip "$1/pause" 2>/dev/null || true
    docker_archive "$1" pause 65535:65535 "localhost/pause:$PAUSE_TAG" "$2"
  }
  image_once "$PAUSE_BIN" pause.tar "the pause image localhost/pause:$PAUSE_TAG from $PAUSE_SRC" \
    pause_recipe

  build_locked "$PROVISIONER_KEY" local-path-provisioner "$MODS/provisioner" "-s -w" \
    github.com/rancher/local-path-provisioner
  helper_recipe() { # ROOTFS OUT
    (cd "$MODS/provisioner" && go build "${GO_BUILD_FLAGS[@]}" -buildvcs=false -ldflags "-s -w" \
      -o "$1/volumehelper" ./volumehelper) || die "go build of volumehelper failed"
    docker_archive "$1" volumehelper 0:0 "localhost/hostpool-volume-helper:$HELPER_RECIPE" "$2"
  }
  image_once "$HELPER_BIN" volume-helper.tar \
    "the volume helper image localhost/hostpool-volume-helper:$HELPER_RECIPE" helper_recipe
fi

# Warm path: nothing to build.
if all_cached; then
  link_all
  exit 0
fi

mkdir -p "$CACHE_BIN"
# One builder at a time per cache key (parallel test runs may all call this).
exec 9>"$CACHE_ROOT/$KEY/.lock"
if ! flock -n 9; then
  log "another hack/cluster/tools.sh is building $KEY; waiting for it"
  flock 9
fi
if all_cached; then
  link_all
  exit 0
fi

total_start=$(date +%s)

if need etcd; then
  build etcd "$MODS/etcd" "$ETCD_LDFLAGS" go.etcd.io/etcd/server/v3
fi

if need helm; then
  build helm "$MODS/helm" "$HELM_LDFLAGS" helm.sh/helm/v3/cmd/helm
fi

if need "${K8S_BINS[@]}"; then
  build "${K8S_BINS[*]}" "$MODS/k8s" "$K8S_LDFLAGS" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl
fi

if need kwok; then
  build kwok "$MODS/kwok" "-s -w" sigs.k8s.io/kwok/cmd/kwok
fi

if [[ ! -s "$CACHE_BIN/kwok-stages.yaml" ]]; then
  # The stage definitions ship in the kwok module; kwok wants them as one file of documents.
  kwok_dir="$(cd "$MODS/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
  [[ -d "$kwok_dir/kustomize/stage" ]] || die "kwok's stage definitions not found in $kwok_dir"
  tmp="$(mktemp "$CACHE_ROOT/$KEY/stages.XXXXXX")"
  for f in "${KWOK_STAGES[@]}"; do
    [[ -f "$kwok_dir/kustomize/stage/$f" ]] || die "kwok stage $f not found in $kwok_dir"
    printf -- '---\n' >>"$tmp"
    cat "$kwok_dir/kustomize/stage/$f" >>"$tmp"
  done
  mv -f "$tmp" "$CACHE_BIN/kwok-stages.yaml"
fi

log "all tools built in $(($(date +%s) - total_start))s into $CACHE_BIN"
link_all
