#!/usr/bin/env bash
# Install Debian packages for the project's scripts and tests, one apt-get at a time.
#
# Usage: hack/cluster/apt-install.sh [--no-install-recommends] PACKAGE...
#
# make test-prepare builds both images and the tools at once, and more than one of them may
# need packages on a fresh machine: two apt-get runs at the same moment fail on apt's lock
# ("Could not get lock /var/lib/apt/lists/lock"). Every install goes through this script,
# which holds a lock of its own around update + install, and also waits for apt's own locks
# (another apt-get on the machine) rather than failing.
set -euo pipefail

LOCK="${HOSTPOOL_APT_LOCK:-/run/lock/hostpool-apt.lock}"
opts=()
if [[ ${1:-} == --no-install-recommends ]]; then opts+=("$1"); shift; fi
(($# > 0)) || { echo "usage: $0 [--no-install-recommends] PACKAGE..." >&2; exit 2; }
command -v apt-get >/dev/null || { echo "apt-install: no apt-get here to install $*" >&2; exit 3; }
[[ $(id -u) -eq 0 ]] || { echo "apt-install: installing $* needs root (uid $(id -u))" >&2; exit 3; }

export DEBIAN_FRONTEND=noninteractive
wait_apt=(-o DPkg::Lock::Timeout=600)
exec 9>"$LOCK"
flock 9
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Another run may have installed them while this one waited for the lock.
((${#missing[@]} > 0)) || exit 0
apt-get "${wait_apt[@]}" update -qq
apt-get "${wait_apt[@]}" install -y -qq "${opts[@]}" "${missing[@]}"
