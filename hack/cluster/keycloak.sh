#!/usr/bin/env bash
# Keycloak, the OIDC identity provider of the tests and benchmarks, from Maven Central.
#
# Fetches the server distribution (org.keycloak:keycloak-quarkus-dist, version pinned below,
# SHA-256 checked) with mvn into the local Maven repository, unpacks it once into a cache
# outside the repository and prints the unpacked directory (the one holding bin/kc.sh) on
# stdout; progress goes to stderr. Run again, it only prints the directory (well under a
# second). Nothing is written inside the repository.
#
# The tree is unpacked into a temporary directory next to its final place and renamed into
# place when complete, so an interrupted run never leaves a half tree behind (the next run
# starts over; one killed with SIGKILL may leave its .keycloak-* temporary directory).
# Keycloak's first start of a tree writes the build of its configuration into lib/quarkus;
# tests/keycloak.py always starts it with the same build options, so that build is done once
# per tree and kept, and it keeps everything else a server writes (the transaction log,
# which would go to data/) in the session's own directory.
#
# Usage: hack/cluster/keycloak.sh
# Needs: java (17 or later, to run it), mvn (to fetch it), unzip, sha256sum.
# Env:   HOSTPOOL_TOOLS_CACHE   cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/hostpool-operator)
set -euo pipefail

KEYCLOAK_VERSION=26.5.6
# SHA-256 of keycloak-quarkus-dist-26.5.6.zip as served by Maven Central (mvn also checks the
# repository's own checksum with --strict-checksums).
KEYCLOAK_SHA256=490189d9dff05272432d51f71a069462eeca97f2920a694d539a1e6c26a5a347
ARTIFACT="org.keycloak:keycloak-quarkus-dist:${KEYCLOAK_VERSION}:zip"
DEPENDENCY_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1

log() { printf 'keycloak: %s\n' "$*" >&2; }
die() { printf 'keycloak: error: %s\n' "$*" >&2; exit 1; }

CACHE_ROOT="${HOSTPOOL_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hostpool-operator}"
DEST="$CACHE_ROOT/keycloak-$KEYCLOAK_VERSION"

if [[ -x "$DEST/bin/kc.sh" && -f "$DEST/lib/quarkus-run.jar" ]]; then
  printf '%s\n' "$DEST"
  exit 0
fi

for tool in mvn unzip sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not on PATH (needed to fetch Keycloak)"
done

mkdir -p "$CACHE_ROOT"
WORK="$(mktemp -d "$CACHE_ROOT/.keycloak-$KEYCLOAK_VERSION.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

log "fetching $ARTIFACT with mvn (about 160 MiB the first time, then from ~/.m2)"
# Run from an empty directory: a pom.xml in the current directory would become the project.
# Maven 3.8 prints colour resets even with -q -B: strip them (pipefail keeps mvn's status).
(
  cd "$WORK"
  mvn -q -B -C "$DEPENDENCY_PLUGIN:copy" \
    -Dartifact="$ARTIFACT" -DoutputDirectory="$WORK/zip" -Dmdep.overWriteReleases=true 2>&1 |
    sed -e 's/\x1b\[[0-9;]*m//g'
) >&2 || die "mvn could not fetch $ARTIFACT"
ZIP="$WORK/zip/keycloak-quarkus-dist-$KEYCLOAK_VERSION.zip"
[[ -f "$ZIP" ]] || die "mvn reported success but $ZIP is missing"

actual="$(sha256sum "$ZIP" | cut -d' ' -f1)"
[[ "$actual" == "$KEYCLOAK_SHA256" ]] ||
  die "SHA-256 of $(basename "$ZIP") is $actual, expected $KEYCLOAK_SHA256"

log "unpacking into $DEST"
unzip -q "$ZIP" -d "$WORK/tree"
[[ -x "$WORK/tree/keycloak-$KEYCLOAK_VERSION/bin/kc.sh" ]] ||
  die "the zip did not hold keycloak-$KEYCLOAK_VERSION/bin/kc.sh"
rm -f "$ZIP"

# Another run may have finished first: keep its tree.
if ! mv -T "$WORK/tree/keycloak-$KEYCLOAK_VERSION" "$DEST" 2>/dev/null; then
  [[ -x "$DEST/bin/kc.sh" ]] || die "could not move the unpacked tree to $DEST"
fi
log "ready: $DEST"
printf '%s\n' "$DEST"
