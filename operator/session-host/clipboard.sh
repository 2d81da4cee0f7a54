#!/usr/bin/env bash
# Sourced by the session-host image's entrypoint and by hack/cluster/xrdp-hosts.sh: an xrdp
# host's clipboard as its pool says (HostPool spec.connection.clipboard, which the operator
# gives each Pod it starts as HOSTPOOL_CLIPBOARD=Enabled|Disabled).
#
# xrdp_clipboard XRDP_INI SESMAN_INI SETTING: with Disabled, xrdp does not open the clipboard
# channel ([Channels] cliprdr=false: whatever a client asks for, nothing reaches chansrv) and
# chansrv refuses both ways as well ([Security] Restrict{Outbound,Inbound}Clipboard=all, in
# case a client's channel got past); Enabled (or empty) writes xrdp's defaults back, so a
# restarted container follows a changed setting. Anything else: 1, and nothing is changed.

# clipboard_ini_set FILE SECTION KEY VALUE: KEY=VALUE in [SECTION] (the first line setting
# KEY there is replaced, else it is added at the section's end; the section too if missing).
clipboard_ini_set() {
  local file=$1 section=$2 key=$3 value=$4
  awk -v s="[$section]" -v k="$key" -v v="$value" '
    function add() { if (in_s && !done) { print k "=" v; done = 1 } }
    /^\[/ { add(); in_s = ($0 == s); print; next }
    in_s && index($0, k "=") == 1 { if (!done) { print k "=" v; done = 1 }; next }
    { print }
    END { add(); if (!done) { print s; print k "=" v } }
  ' "$file" >"$file.new"
  cat "$file.new" >"$file" # in place: keeps the file's owner, mode and any bind mount
  rm -f "$file.new"
}

xrdp_clipboard() {
  local channel=true restrict=none
  case "$3" in
    "" | Enabled) ;;
    Disabled) channel=false restrict=all ;;
    *)
      echo "HOSTPOOL_CLIPBOARD must be Enabled or Disabled, not '$3'" >&2
      return 1
      ;;
  esac
  clipboard_ini_set "$1" Channels cliprdr "$channel"
  clipboard_ini_set "$2" Security RestrictOutboundClipboard "$restrict"
  clipboard_ini_set "$2" Security RestrictInboundClipboard "$restrict"
}
