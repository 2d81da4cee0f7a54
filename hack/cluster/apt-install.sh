#!/usr/bin/env bash
# Install Debian packages for the project's scripts and tests, one apt-get at a time.
#
# Usage: hack/cluster/apt-install.sh [--no-install-recommends] [--even-if-installed] PACKAGE...
#        hack/cluster/apt-install.sh --test-packages   every package `make test` may install
#        hack/cluster/apt-install.sh --list            print TEST_PACKAGES (one a line)
#
# Every apt-get of the project goes through this script. It holds a lock of its own around
# update + install, so two of the project's installs never run at once; and it waits for
# apt's and dpkg's own locks, held by any other apt or dpkg on the machine (an unattended
# upgrade, a user's apt-get), rather than failing on them: DPkg::Lock::Timeout makes apt-get
# wait for dpkg's locks, but not for the package lists' lock (apt-get update) or the
# download cache's, so a run that fails only on one of those is run again (for at most
# 10 minutes).
#
# --test-packages: `make test-prepare` installs, in this one step and before it starts
# anything in parallel, every package the tests and their scripts would install where
# missing; as root where apt-get is, else it says why and does nothing (the tests that need
# them then say why they cannot run). --even-if-installed: update and install even when the
# packages are there (with --no-upgrade: nothing changes); the locks' test uses it.
set -euo pipefail

# Every Debian package a script of the project installs where it is missing, as its script
# installs it (tests/unit/test_packages.py checks that each call of this script is covered):
#   with recommends: shellcheck (make lint); podman, runc, mmdebstrap (hack/cluster/image.sh);
#     gcc, libc6-dev (the pause image, hack/cluster/tools.sh --nodes); containerd,
#     containernetworking-plugins, runc, iptables, iproute2 (real nodes, node/nodes.sh)
#   without: xrdp, xorgxrdp, twm, xterm, x11-xserver-utils, xclip, iproute2, procps (the xrdp
#     hosts, hack/cluster/xrdp-hosts.sh); freerdp2-x11, xvfb, imagemagick (the desktop tests' client);
#     chromium (the portal's browser tests, tests/support/browser.py)
TEST_PACKAGES=(shellcheck podman runc mmdebstrap gcc libc6-dev containerd
  containernetworking-plugins iptables iproute2)
TEST_PACKAGES_NO_RECOMMENDS=(xrdp xorgxrdp twm xterm x11-xserver-utils xclip iproute2 procps
  freerdp2-x11 xvfb imagemagick chromium)

LOCK="${HOSTPOOL_APT_LOCK:-/run/lock/hostpool-apt.lock}"
# How long to wait for another apt or dpkg (seconds).
APT_WAIT="${HOSTPOOL_APT_WAIT:-600}"
opts=() always=0 tests=0
case "${1:-}" in
  --list)
    printf '%s\n' "${TEST_PACKAGES[@]}" "${TEST_PACKAGES_NO_RECOMMENDS[@]}" | sort -u
    exit 0
    ;;
  --test-packages)
    if ! command -v apt-get >/dev/null || [[ $(id -u) -ne 0 ]]; then
      echo "apt-install: no apt-get here, or not root (uid $(id -u)): the tests' packages are not installed; the tests that need them say why" >&2
      exit 0
    fi
    tests=1
    shift
    ;;
esac
while [[ ${1:-} == --* ]]; do
  case "$1" in
    --no-install-recommends) opts+=("$1") ;;
    --even-if-installed) always=1 opts+=(--no-upgrade) ;;
    *) echo "apt-install: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
(($# > 0 || tests)) || { echo "usage: $0 [--no-install-recommends] [--even-if-installed] PACKAGE... | --test-packages | --list" >&2; exit 2; }
command -v apt-get >/dev/null || { echo "apt-install: no apt-get here to install $*" >&2; exit 3; }
[[ $(id -u) -eq 0 ]] || { echo "apt-install: installing $* needs root (uid $(id -u))" >&2; exit 3; }

export DEBIAN_FRONTEND=noninteractive
apt_get() { # args... : apt-get, run again while it fails only because another apt holds a lock
  local err rc deadline=$((SECONDS + APT_WAIT)) said=0
  err="$(mktemp)"
  while :; do
    rc=0
    apt-get -o DPkg::Lock::Timeout="$APT_WAIT" "$@" 2>"$err" || rc=$?
    if ((rc != 0 && SECONDS < deadline)) && grep -q "Could not get lock" "$err" &&
      ! grep -v -e "Could not get lock" -e "Unable to lock" -e '^W: ' "$err" | grep -q .; then
      if ((!said)); then
        echo "apt-install: waiting for another apt: $(grep -m1 "Could not get lock" "$err")" >&2
        said=1
      fi
      sleep 1
      continue
    fi
    cat "$err" >&2
    rm -f "$err"
    return "$rc"
  done
}

updated=0
install_missing() { # [--no-install-recommends] PACKAGE... : those not installed (under the lock)
  local extra=() missing=() p
  if [[ $1 == --no-install-recommends ]]; then extra+=("$1"); shift; fi
  for p in "$@"; do
    ((always)) && { missing+=("$p"); continue; }
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  # Another run may have installed them while this one waited for the lock.
  ((${#missing[@]} > 0)) || return 0
  if ((!updated)); then
    apt_get update -qq
    updated=1
  fi
  apt_get install -y -qq "${opts[@]}" "${extra[@]}" "${missing[@]}"
}

exec 9>"$LOCK"
flock 9
if ((tests)); then
  install_missing "${TEST_PACKAGES[@]}"
  install_missing --no-install-recommends "${TEST_PACKAGES_NO_RECOMMENDS[@]}"
else
  install_missing "$@"
fi
