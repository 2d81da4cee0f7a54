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

# shellcheck source=operator/session-host/ini.sh
source "$(dirname "${BASH_SOURCE[0]}")/ini.sh"

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
  ini_set "$1" Channels cliprdr "$channel"
  ini_set "$2" Security RestrictOutboundClipboard "$restrict"
  ini_set "$2" Security RestrictInboundClipboard "$restrict"
}
