#!/usr/bin/env bash
# The browser's RDP client (IronRDP's web component and its RDP backend, from npm with the
# committed lockfile), installed into a cache outside the repository; prints that directory.
# The broker serves it with --web-client-dir. Cached: a second run with the same lockfile
# only prints the directory.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${HOSTPOOL_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hostpool-operator}"
target="$cache/web-client"
stamp="$target/.lock-sha256"
# The stamp names the lockfile and this layout (v2: gzipped copies beside the modules).
want="v2-$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" \
  && -d "$target/node_modules/@devolutions/iron-remote-desktop-rdp" ]]; then
  echo "$target"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "web-client.sh: npm is missing (Debian: apt-get install npm)" >&2
  exit 1
fi
mkdir -p "$cache"
work="$(mktemp -d "$cache/web-client.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cp "$here/package.json" "$here/package-lock.json" "$work/"
# npm ci: exactly the lockfile's versions and integrity hashes; no install scripts run.
(cd "$work" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
# Gzipped copies (the backend is 6 MB of JavaScript with its wasm inlined): the broker
# sends one to a browser that accepts gzip.
find "$work/node_modules/@devolutions" -maxdepth 2 -name '*.js' -exec gzip -k -9 {} +
echo "$want" >"$work/.lock-sha256"
rm -rf "$target"
mv "$work" "$target"
trap - EXIT
echo "$target"
