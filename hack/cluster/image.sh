#!/usr/bin/env bash
# Build the operator image (operator/Containerfile) with podman, without any image registry:
#   1. podman, runc and mmdebstrap: installed with apt-get where they are missing (as root);
#      a containers.conf with lowered default ulimits (the sandbox cannot raise them) is kept
#      in the cache and exported as CONTAINERS_CONF.
#   2. The base image: Debian bookworm minbase + python3, python3-venv, ca-certificates, made
#      by mmdebstrap from Debian's packages (SOURCE_DATE_EPOCH fixed, so the same package set
#      gives the same tarball) and `podman import`ed. Cached: rebuilt only when its inputs
#      (suite, mirrors, packages, options, epoch) change, or with HOSTPOOL_IMAGE_REFRESH_BASE=1
#      (to pick up Debian's security updates).
#   3. Wheels of the project and its dependencies, built on the host with the venv's pip
#      (`pip wheel`), pinned to the versions installed in the venv (the ones the tests ran).
#      Debian bookworm's python3 is 3.11, like the venv, so cp311 manylinux wheels fit.
#      Cached by the project's sources and the pins.
#   4. The browser's RDP client (hack/portal/web-client.sh: npm ci of the committed lockfile
#      into the cache; a second run only prints its directory), for the broker's desktops in
#      the browser. HOSTPOOL_IMAGE_WEB_CLIENT=0 leaves it out (no npm needed; install the chart
#      with broker.portal.webClient=false then).
#   5. The operator image from operator/Containerfile on that base, the wheels and the web
#      client as the build context, installed offline. Skipped when an image of the same
#      inputs exists.
# Prints the image, its size and the build time. Nothing is written into the repository.
#
# With --session-host it builds the session-host image instead (operator/session-host.Containerfile:
# xrdp + xorgxrdp desktops for pod-backed hosts, with hostpool-agent): the same steps, but the base
# is a second mmdebstrap tarball, BASE_PACKAGES plus SESSION_HOST_PACKAGES (cached the same way,
# as localhost/hostpool-session-host-base), and the build context is the wheels plus
# operator/session-host/ (the entrypoint and its configuration).
#
# Usage: hack/cluster/image.sh                 build what is missing, print the image name
#        hack/cluster/image.sh --optional      the same, but where podman cannot be had, say why
#                                                and exit 0 (make test: the live test then skips)
#        hack/cluster/image.sh --check         exit 0 if podman can be had here, else print why
#                                                and exit 3 (the live test's skip reason)
#        hack/cluster/image.sh --session-host  the session-host image (localhost/hostpool-session-host:
#                                                <version>); combines with --optional
# Exit status 3: podman, runc or mmdebstrap is missing and cannot be installed here.
# Env:   HOSTPOOL_TOOLS_CACHE   cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/hostpool-operator)
#        HOSTPOOL_IMAGE         image name (default localhost/hostpool-operator:<version>)
#        HOSTPOOL_SESSION_HOST_IMAGE  the session-host image's name (default
#                               localhost/hostpool-session-host:<version>)
#        HOSTPOOL_PYTHON        the Python whose pip builds the wheels (default <repo>/.venv/bin/python)
#        HOSTPOOL_IMAGE_WEB_CLIENT  0: the operator image without the browser's RDP client
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE_ROOT="${HOSTPOOL_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hostpool-operator}"
CACHE="$CACHE_ROOT/image"
PY="${HOSTPOOL_PYTHON:-$REPO_ROOT/.venv/bin/python}"

optional=0 check=0 target=operator
for arg in "$@"; do
  case "$arg" in
    --optional) optional=1 ;;
    --check) check=1 ;;
    --session-host) target=session-host ;;
    *) echo "usage: $0 [--optional | --check] [--session-host]" >&2; exit 2 ;;
  esac
done

# The base image's inputs.
SUITE=bookworm
BASE_PACKAGES=python3,python3-venv,ca-certificates
# The session-host base adds these (no recommends: mmdebstrap installs none). xorgxrdp pulls in
# xserver-xorg-core; xauth is what sesman writes the session's cookie with, and xfonts-base the
# `fixed` font Xorg and xterm cannot start without (both only recommended by the X packages).
# twm and xterm make the default desktop; x11-xserver-utils has sessreg; openssl makes each
# container's own TLS certificate at start; procps (pkill) ends the sessions at SIGTERM.
SESSION_HOST_PACKAGES=xrdp,xorgxrdp,xauth,xfonts-base,twm,xterm,x11-xserver-utils,openssl,procps
BASE_SOURCES=(
  "deb http://deb.debian.org/debian $SUITE main"
  "deb http://deb.debian.org/debian $SUITE-updates main"
  "deb http://deb.debian.org/debian-security $SUITE-security main"
)
# Documentation, manuals and translations are left out (copyright files are kept).
BASE_DPKG_OPTS=(
  "path-exclude=/usr/share/doc/*" "path-include=/usr/share/doc/*/copyright"
  "path-exclude=/usr/share/man/*" "path-exclude=/usr/share/info/*"
  "path-exclude=/usr/share/locale/*" "path-exclude=/usr/share/lintian/*"
)
# 2025-01-01T00:00:00Z: file times in the base tarball and the image layers.
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-1735689600}"

log() { printf 'image: %s\n' "$*" >&2; }
die() { printf 'image: error: %s\n' "$*" >&2; exit 1; }

# ------------------------------------------------------------------------------ podman
have_tools() { command -v podman >/dev/null && command -v runc >/dev/null && command -v mmdebstrap >/dev/null; }

# Why podman cannot be had here (empty when it can).
why_not() {
  have_tools && return 0
  if ! command -v apt-get >/dev/null; then
    echo "podman, runc or mmdebstrap is missing and there is no apt-get to install them"
  elif [[ $(id -u) -ne 0 ]]; then
    echo "podman, runc or mmdebstrap is missing and installing them needs root (uid $(id -u))"
  fi
}

if [[ $check == 1 ]]; then
  reason="$(why_not)"
  [[ -z "$reason" ]] || { echo "$reason"; exit 3; }
  exit 0
fi

start=$(date +%s)
reason="$(why_not)"
if [[ -n "$reason" ]]; then
  echo "image: $reason; no image built" >&2
  [[ $optional == 1 ]] && exit 0
  exit 3
fi
if ! have_tools; then
  log "installing podman, runc and mmdebstrap with apt-get ..."
  "$REPO_ROOT/hack/cluster/apt-install.sh" podman runc mmdebstrap >&2
fi

mkdir -p "$CACHE"
# crun fails on these machines (cgroups v1 hybrid): runc with the cgroupfs manager works.
# The default ulimits cannot be raised in the sandbox: lower them.
if [[ ! -s "$CACHE/containers.conf" ]]; then
  printf '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n' \
    >"$CACHE/containers.conf"
fi
export CONTAINERS_CONF="$CACHE/containers.conf"
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)

# One build at a time (parallel test runs may all call this).
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
  log "another hack/cluster/image.sh is building; waiting for it"
  flock 9
fi

hash12() { sha256sum | cut -c1-12; }

# ------------------------------------------------------------------------------ base image
# make_base NAME TARBALL_PREFIX PACKAGES: the mmdebstrap base image of PACKAGES, imported as
# localhost/NAME:<suite>-<key> (key: a hash of every input) and tagged localhost/NAME:<suite> (the
# name the Containerfiles default to); its name on stdout. Cached as $CACHE/PREFIX-<key>.tar.
make_base() {
  local name=$1 prefix=$2 packages=$3 key image tar t0 o
  key="$(
    printf '%s\n' "$SUITE" "$packages" "${BASE_SOURCES[@]}" "${BASE_DPKG_OPTS[@]}" \
      "$SOURCE_DATE_EPOCH" "$(mmdebstrap --version)" | hash12
  )"
  image="localhost/$name:$SUITE-$key"
  tar="$CACHE/$prefix-$key.tar"
  if [[ "${HOSTPOOL_IMAGE_REFRESH_BASE:-0}" == 1 ]]; then
    rm -f "$tar"
    "${PODMAN[@]}" image rm -f "$image" >/dev/null 2>&1 || true
  fi
  if ! "${PODMAN[@]}" image exists "$image"; then
    if [[ ! -s "$tar" ]]; then
      t0=$(date +%s)
      log "building the base image $name ($SUITE minbase + $packages) with mmdebstrap ..."
      local opts=()
      for o in "${BASE_DPKG_OPTS[@]}"; do opts+=("--dpkgopt=$o"); done
      mmdebstrap --quiet --format=tar --variant=minbase --include="$packages" "${opts[@]}" \
        "$SUITE" "$tar.tmp" "${BASE_SOURCES[@]}" >&2 || { rm -f "$tar.tmp"; die "mmdebstrap failed"; }
      mv -f "$tar.tmp" "$tar"
      log "base tarball $(du -h "$tar" | cut -f1), sha256 $(sha256sum "$tar" | cut -c1-16), in $(($(date +%s) - t0))s"
    fi
    "${PODMAN[@]}" import --quiet "$tar" "$image" >/dev/null
  fi
  "${PODMAN[@]}" tag "$image" "localhost/$name:$SUITE"
  echo "$image"
}

if [[ $target == session-host ]]; then
  BASE_IMAGE="$(make_base hostpool-session-host-base session-host-base "$BASE_PACKAGES,$SESSION_HOST_PACKAGES")"
else
  BASE_IMAGE="$(make_base hostpool-base base "$BASE_PACKAGES")"
fi

# ------------------------------------------------------------------------------ wheels
[[ -x "$PY" ]] || die "$PY not found: run make venv first (or set HOSTPOOL_PYTHON)"
pins="$("$PY" -m pip freeze --exclude-editable --disable-pip-version-check | grep -v ' @ ' | sort)"
src_files=(pyproject.toml README.md)
while IFS= read -r f; do src_files+=("$f"); done < <(
  # Every file of the package: the modules and their data (the portal's page, its languages).
  cd "$REPO_ROOT" && find operator/hostpool_operator -type f ! -name '*.pyc' ! -path '*/__pycache__/*' | sort
)
wheels_key="$(
  {
    "$PY" -c 'import sys, sysconfig; print(sys.version, sysconfig.get_platform())'
    echo "$pins"
    (cd "$REPO_ROOT" && sha256sum "${src_files[@]}")
  } | hash12
)"
WHEELS="$CACHE/wheels-$wheels_key"
if [[ ! -f "$WHEELS/.complete" ]]; then
  t0=$(date +%s)
  log "building wheels of the project and its dependencies ..."
  rm -rf "$WHEELS" "$WHEELS.src"
  mkdir -p "$WHEELS.src"
  # A copy of the sources, so that the build leaves nothing (build/, *.egg-info) in the repo.
  (cd "$REPO_ROOT" && cp --parents "${src_files[@]}" "$WHEELS.src/")
  echo "$pins" >"$WHEELS.src/constraints.txt"
  "$PY" -m pip wheel --quiet --disable-pip-version-check --only-binary=:all: \
    --constraint "$WHEELS.src/constraints.txt" -w "$WHEELS.tmp" "$WHEELS.src" >&2 ||
    { rm -rf "$WHEELS.tmp" "$WHEELS.src"; die "pip wheel failed"; }
  rm -rf "$WHEELS.src"
  mv -f "$WHEELS.tmp" "$WHEELS"
  touch "$WHEELS/.complete"
  log "$(find "$WHEELS" -name '*.whl' | wc -l) wheels in $(($(date +%s) - t0))s"
fi
# Wheels of earlier sources are not needed again.
find "$CACHE" -maxdepth 1 -name 'wheels-*' ! -name "wheels-$wheels_key" -exec rm -rf {} +

# ------------------------------------------------------------------------------ the image
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO_ROOT/pyproject.toml" | head -1)"
if [[ $target == session-host ]]; then
  IMAGE="${HOSTPOOL_SESSION_HOST_IMAGE:-localhost/hostpool-session-host:$version}"
  CONTAINERFILE=operator/session-host.Containerfile
  # The entrypoint and its configuration are inputs too.
  extra_inputs="$(cd "$REPO_ROOT" && find operator/session-host -type f | sort | xargs sha256sum)"
else
  IMAGE="${HOSTPOOL_IMAGE:-localhost/hostpool-operator:$version}"
  CONTAINERFILE=operator/Containerfile
  # The browser's RDP client, served by the broker from the image (the chart's
  # broker.portal.webClient); its files are inputs too.
  web_client=""
  if [[ "${HOSTPOOL_IMAGE_WEB_CLIENT:-1}" != 0 ]]; then
    web_client="$("$REPO_ROOT/hack/portal/web-client.sh" | tail -1)" ||
      die "fetching the browser's RDP client failed (hack/portal/web-client.sh, above); HOSTPOOL_IMAGE_WEB_CLIENT=0 builds the image without it"
    [[ -d "$web_client/node_modules" ]] || die "hack/portal/web-client.sh printed no web client directory: $web_client"
  fi
  extra_inputs="web-client: $(
    [[ -z "$web_client" ]] || (cd "$web_client" && find node_modules package.json package-lock.json -type f | sort | xargs sha256sum)
  )"
fi
image_key="$(
  {
    echo "$BASE_IMAGE $wheels_key $SOURCE_DATE_EPOCH"
    cat "$REPO_ROOT/$CONTAINERFILE"
    [[ -z "$extra_inputs" ]] || echo "$extra_inputs"
  } | hash12
)"
current="$("${PODMAN[@]}" image inspect --format '{{index .Labels "io.hostpool.inputs"}}' "$IMAGE" 2>/dev/null || true)"
if [[ "$current" != "$image_key" ]]; then
  log "building $IMAGE from $CONTAINERFILE on $BASE_IMAGE ..."
  if [[ $target == session-host ]]; then
    # Build context: wheels/ (hard links where the file system allows) and session-host/.
    context="$CACHE/session-host-context"
    rm -rf "$context"
    mkdir -p "$context/wheels"
    cp -l "$WHEELS"/*.whl "$context/wheels/" 2>/dev/null || cp "$WHEELS"/*.whl "$context/wheels/"
    cp -r "$REPO_ROOT/operator/session-host" "$context/session-host"
  else
    # Build context: the wheels and web-client/ (empty without HOSTPOOL_IMAGE_WEB_CLIENT).
    context="$CACHE/operator-context"
    rm -rf "$context"
    mkdir -p "$context/web-client"
    cp -l "$WHEELS"/*.whl "$context/" 2>/dev/null || cp "$WHEELS"/*.whl "$context/"
    if [[ -n "$web_client" ]]; then
      cp -rL "$web_client/node_modules" "$web_client/package.json" "$web_client/package-lock.json" \
        "$context/web-client/"
    fi
  fi
  old="$("${PODMAN[@]}" image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
  # --layers=false: no intermediate images left behind (an unchanged build is skipped above).
  "${PODMAN[@]}" build --quiet --layers=false --network=none --timestamp "$SOURCE_DATE_EPOCH" \
    --build-arg "BASE_IMAGE=$BASE_IMAGE" --label "io.hostpool.inputs=$image_key" \
    -f "$REPO_ROOT/$CONTAINERFILE" -t "$IMAGE" "$context" >/dev/null ||
    { rm -rf "$context"; die "podman build failed"; }
  rm -rf "$context"
  built=built
  # The image this one replaces, now untagged (kept if a container still uses it).
  [[ -z "$old" ]] || "${PODMAN[@]}" image rm "$old" >/dev/null 2>&1 || true
else
  built="up to date"
fi

size="$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE")"
id="$("${PODMAN[@]}" image inspect --format '{{.Id}}' "$IMAGE" | cut -c1-12)"
log "$IMAGE ($built, id $id): $((size / 1000000)) MB, in $(($(date +%s) - start))s"
echo "$IMAGE"
