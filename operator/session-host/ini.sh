#!/usr/bin/env bash
# Sourced by configure.sh (the image's build) and clipboard.sh (each start): the one way the
# session host edits xrdp's ini files.
#
# ini_set FILE SECTION KEY VALUE: set KEY=VALUE in [SECTION], replacing the first line that
# sets KEY there (commented-out examples are left alone), else adding it at the section's end
# (the section too, if it is missing). The file is rewritten in place, which keeps its owner,
# its mode and any bind mount on it.
ini_set() {
  local file=$1 section=$2 key=$3 value=$4
  awk -v s="[$section]" -v k="$key" -v v="$value" '
    function add() { if (in_s && !done) { print k "=" v; done = 1 } }
    /^\[/ { add(); in_s = ($0 == s); print; next }
    in_s && index($0, k "=") == 1 { if (!done) { print k "=" v; done = 1 }; next }
    { print }
    END { add(); if (!done) { print s; print k "=" v } }
  ' "$file" >"$file.new"
  cat "$file.new" >"$file"
  rm -f "$file.new"
}
