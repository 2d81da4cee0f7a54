#!/usr/bin/env bash
# Real RDP session hosts on this machine, for the end-to-end tests and the desktop demo: each
# host is a network namespace on a bridge, running its own xrdp and xrdp-sesman (xorgxrdp:
# every logon is a real Xorg session with twm and an xterm), reached by any RDP client at the
# host's address on port 3389.
#
# Usage: hack/cluster/xrdp-hosts.sh up DIR --bridge BR --hosts "NAME ..." [--first N]
#                                           [--users "USER:PASSWORD ..."]
#                                           [--signon KEYS.pem --verifier PATH]
#                                           [--clipboard Enabled|Disabled]
#            start the hosts (and create the users) when not already up; prints one line per
#            host: NAME ADDRESS NETNS. With --signon the hosts take the broker's one-time
#            logon credentials (single sign-on): PATH is hostpool-logon, KEYS.pem the
#            broker's public key(s); it makes the accounts at first logon. --clipboard
#            Disabled turns the hosts' clipboard channel off, as the session-host image does
#            for a pool without one (operator/session-host/clipboard.sh)
#        hack/cluster/xrdp-hosts.sh down DIR     stop every process of the hosts, remove their
#            namespaces, the users this script created and what Xorg left in /tmp
#        hack/cluster/xrdp-hosts.sh exec DIR NAME COMMAND...
#            run COMMAND in host NAME's network namespace (as that host's agent runs)
#        hack/cluster/xrdp-hosts.sh check       exit 0 when this machine can run hosts, else
#            print why and exit 3
#
# The bridge BR must exist with an IPv4 address (the local control plane makes it with
# HOSTPOOL_HOSTS_BRIDGE, and serves the API on that address so the hosts' agents reach it).
# Host i (from 0) gets the address N+i in the bridge's /24 (N is 11 by default).
#
# Each host's state lives in DIR/NAME: etc/ (its xrdp.ini and sesman.ini), run/ (bind-mounted
# on /run/xrdp inside the host's mount namespace: sesman's and xrdp's sockets and its
# host.env), logs, and pids. xrdp and sesman run with -n (no daemon, so no pid file in the
# shared /run/xrdp). Displays start at 10 for the first host, 20 for the second, and so on,
# so a display number tells the host; hosts share /tmp/.X11-unix, and sesman skips a display
# that another host uses.
#
# Each user's ~/.xsession sets the desktop background to the colour in the host's host.env and
# starts an xterm that prints the host's name and address, then twm: a screenshot tells which
# host a client reached. Users are local accounts; a user that exists already and was not
# made by this script is refused (its home would be overwritten).
#
# Needs root, ip, and Debian's xrdp, xorgxrdp, twm, xterm, x11-xserver-utils and xclip (the
# tests read and set a session's clipboard with it; installed with apt-get where missing).
set -euo pipefail
# shellcheck source=operator/session-host/clipboard.sh
source "$(dirname "$0")/../../operator/session-host/clipboard.sh"

PACKAGES=(xrdp xorgxrdp twm xterm x11-xserver-utils xclip iproute2 procps)
USER_COMMENT="hostpool-operator desktop test user"

log() { printf 'xrdp-hosts: %s\n' "$*" >&2; }
die() { printf 'xrdp-hosts: error: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '7,25p' "$0" >&2
  exit 2
}

why_not() { # empty when this machine can run hosts
  if [[ $(id -u) -ne 0 ]]; then
    echo "xrdp hosts need root (network namespaces, bind mounts, local users); uid is $(id -u)"
  elif ! command -v ip >/dev/null && ! command -v apt-get >/dev/null; then
    echo "ip (iproute2) is missing and there is no apt-get to install it"
  elif ! command -v xrdp >/dev/null && ! command -v apt-get >/dev/null; then
    echo "xrdp is missing and there is no apt-get to install it"
  fi
}

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  log "installing ${missing[*]} with apt-get ..."
  "$(dirname "$0")/apt-install.sh" --no-install-recommends "${missing[@]}" >&2
}

# A short, stable interface name for a host (interface names have at most 15 characters).
veth_of() { printf 'hpv%s' "$(printf '%s' "$1" | sha256sum | cut -c1-10)"; }
# The network namespace of a host: unique per state directory, so two sets never collide.
netns_of() { printf 'hpd-%s-%s' "$(printf '%s' "$DIR" | sha256sum | cut -c1-6)" "$1"; }

# The host's desktop colour: fixed per position, so tests and people can tell hosts apart.
COLOURS=("#1f6feb" "#2da44e" "#bf3989" "#d4a72c" "#8250df" "#cf222e" "#0a7d6c" "#6e7781")

# HOSTPOOL_XRDP_LOG_LEVEL (e.g. DEBUG) sets xrdp's and sesman's log level (default INFO).
LOG_LEVEL="${HOSTPOOL_XRDP_LOG_LEVEL:-INFO}"

sesman_ini() { # source dest display_offset log
  sed -e "s|^LogFile=.*|LogFile=$4|" -e "s|^X11DisplayOffset=.*|X11DisplayOffset=$3|" \
    -e "s|^EnableSyslog=.*|EnableSyslog=false|" -e "s|^LogLevel=.*|LogLevel=$LOG_LEVEL|" "$1" >"$2"
}

xrdp_ini() { # source dest log
  sed -e "s|^LogFile=.*|LogFile=$3|" -e "s|^EnableSyslog=.*|EnableSyslog=false|" \
    -e "s|^LogLevel=.*|LogLevel=$LOG_LEVEL|" "$1" >"$2"
}

# xrdp's keyboard map (the client's keyboard layout, sent at connect, to the session's XKB
# layout) with the layouts Debian's lacks that the desktop page offers: Turkish Q (0x041F).
# xrdp reads it from its compiled-in /etc/xrdp, so each host's own copy is bind-mounted there
# in the host's mount namespace. The session-host image adds the same lines
# (operator/session-host/configure.sh).
keyboard_ini() { # source dest
  awk '
    { print }
    /^\[default_rdp_layouts\]/ { print "rdp_layout_tr=0x0000041F" }
    /^\[default_layouts_map\]/ { print "rdp_layout_tr=tr" }
  ' "$1" >"$2"
}

write_xsession() { # user
  local home
  home="$(getent passwd "$1" | cut -d: -f6)"
  xsession_script >"$home/.xsession"
  chmod 755 "$home/.xsession"
  chown "$1:" "$home/.xsession"
}

xsession_script() {
  cat <<'EOF'
#!/bin/sh
# The host this session runs on (its xrdp run directory is the host's own).
[ -r /run/xrdp/host.env ] && . /run/xrdp/host.env
xsetroot -solid "${HOSTPOOL_DESKTOP_COLOUR:-#333333}"
# The xterm in UTF-8 (a Swedish keyboard's letters); twm keeps the session's locale (it exits
# in a UTF-8 one without the fonts of its font set).
LANG="${LANG:-C.UTF-8}" xterm -geometry 90x20+40+40 -title "${HOSTPOOL_DESKTOP_HOST:-desktop}" -e sh -c \
  'echo "host ${HOSTPOOL_DESKTOP_HOST:-?} $(ip -4 -o addr show dev eth0 | cut -d" " -f7) user $(id -un)"; exec bash' &
exec twm
EOF
}

make_users() { # "user:password ..."
  local entry user password
  for entry in $USERS; do
    user="${entry%%:*}"
    password="${entry#*:}"
    [[ "$user" =~ ^[a-z_][a-z0-9_-]{0,30}$ ]] || die "not a user name: $user"
    if getent passwd "$user" >/dev/null; then
      if [[ "$(getent passwd "$user" | cut -d: -f5)" != "$USER_COMMENT" ]]; then
        die "user $user exists and was not made by this script; choose another name"
      fi
    else
      useradd -m -s /bin/bash -c "$USER_COMMENT" "$user"
    fi
    printf '%s:%s\n' "$user" "$password" | chpasswd
    write_xsession "$user"
    grep -qx "$user" "$DIR/users" 2>/dev/null || echo "$user" >>"$DIR/users"
  done
}

start_host() { # index name
  local i="$1" name="$2" d="$DIR/$2" ns veth address
  ns="$(netns_of "$name")"
  veth="$(veth_of "$ns")"
  address="$NET.$((FIRST + i))"
  mkdir -p "$d/etc" "$d/run/sockdir" "$d/logs"
  chmod 3777 "$d/run/sockdir"
  sesman_ini /etc/xrdp/sesman.ini "$d/etc/sesman.ini" "$((10 * (i + 1)))" "$d/logs/sesman.log"
  xrdp_ini /etc/xrdp/xrdp.ini "$d/etc/xrdp.ini" "$d/logs/xrdp.log"
  keyboard_ini /etc/xrdp/xrdp_keyboard.ini "$d/etc/xrdp_keyboard.ini"
  printf 'HOSTPOOL_DESKTOP_HOST=%s\nHOSTPOOL_DESKTOP_COLOUR="%s"\nexport HOSTPOOL_DESKTOP_HOST HOSTPOOL_DESKTOP_COLOUR\n' \
    "$name" "${COLOURS[$((i % ${#COLOURS[@]}))]}" >"$d/run/host.env"
  chmod 644 "$d/run/host.env"
  xrdp_clipboard "$d/etc/xrdp.ini" "$d/etc/sesman.ini" "$CLIPBOARD" || die "--clipboard: Enabled or Disabled"

  ip netns add "$ns"
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  ip link set "$veth" master "$BRIDGE" up
  ip -n "$ns" addr add "$address/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up # xrdp reaches its sesman over the namespace's own loopback
  ip -n "$ns" route add default via "$GATEWAY"
  printf 'NAME=%s\nNETNS=%s\nADDRESS=%s\n' "$name" "$ns" "$address" >"$d/host.env"

  # `ip netns exec` gives each command a private mount namespace: the bind mount of the
  # host's run directory on /run/xrdp stays the host's (pid-file-free with -n), and so does
  # sesman's PAM service of a single sign-on host.
  local pam=""
  if [[ -n "$SIGNON" ]]; then
    pam="$d/etc/pam-xrdp-sesman"
    signon_pam "$name" "$d" >"$pam"
  fi
  local what
  for what in xrdp-sesman xrdp; do
    local conf="$d/etc/sesman.ini" own_pam="$pam" keyboard=""
    [[ "$what" == xrdp ]] && conf="$d/etc/xrdp.ini" own_pam="" keyboard="$d/etc/xrdp_keyboard.ini"
    # shellcheck disable=SC2016 # expanded by the inner shell
    setsid ip netns exec "$ns" sh -c 'mount --bind "$1" /run/xrdp && { [ -z "$5" ] || mount --bind "$5" /etc/pam.d/xrdp-sesman; } && { [ -z "$6" ] || mount --bind "$6" /etc/xrdp/xrdp_keyboard.ini; } && echo $$ >"$2" && exec "$3" -n -c "$4"' \
      _ "$d/run" "$d/$what.pid" "$what" "$conf" "$own_pam" "$keyboard" </dev/null >>"$d/logs/$what.out" 2>&1 &
  done
  local n
  for ((n = 0; n < 100; n++)); do
    if ip netns exec "$ns" sh -c "ss -Hltn 'sport = :3389' | grep -q . && ss -Hltn 'sport = :3350' | grep -q ." 2>/dev/null; then
      printf '%s %s %s\n' "$name" "$address" "$ns"
      return 0
    fi
    sleep 0.1
  done
  die "host $name did not listen on 3389 and 3350 within 10 s; $(tail -n 5 "$d/logs/"*.out "$d/logs/"*.log 2>/dev/null)"
}

signon_pam() { # name dir: sesman's PAM service, the one-time credential checked first
  echo "# hostpool single sign-on: the broker's one-time logon credential first"
  printf 'auth [success=done default=ignore] pam_exec.so quiet expose_authtok %s --host %s --public-keys %s --state %s --xsession %s\n' \
    "$VERIFIER" "$1" "$SIGNON" "$2/logon" "$DIR/xsession"
  cat /etc/pam.d/xrdp-sesman
}

cmd_up() {
  local reason
  reason="$(why_not)"
  [[ -z "$reason" ]] || die "$reason"
  [[ -n "$BRIDGE" && -n "$HOSTS" ]] || usage
  install_packages
  GATEWAY="$(ip -4 -o addr show dev "$BRIDGE" 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -n 1)"
  [[ -n "$GATEWAY" ]] || die "bridge $BRIDGE not found or without an IPv4 address (start the control plane with HOSTPOOL_HOSTS_BRIDGE)"
  NET="${GATEWAY%.*}"
  mkdir -p "$DIR"
  if [[ -n "$SIGNON" ]]; then
    [[ -r "$SIGNON" ]] || die "--signon $SIGNON: no such file"
    [[ "$VERIFIER" == /* && -x "$VERIFIER" ]] || die "--verifier must be the absolute path of hostpool-logon"
    xsession_script >"$DIR/xsession"
  fi
  make_users
  mkdir -p /run/xrdp
  local i=0 name
  for name in $HOSTS; do
    [[ "$name" =~ ^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$ ]] || die "not a host name: $name"
    if [[ -f "$DIR/$name/host.env" ]] && ip netns pids "$(netns_of "$name")" >/dev/null 2>&1 &&
      [[ -n "$(ip netns pids "$(netns_of "$name")")" ]]; then
      # host.env is written by start_host: NAME, ADDRESS, NETNS.
      # shellcheck disable=SC1090,SC2153
      (source "$DIR/$name/host.env" && printf '%s %s %s\n' "$NAME" "$ADDRESS" "$NETNS")
    else
      start_host "$i" "$name"
    fi
    i=$((i + 1))
  done
}

stop_netns() { # netns: every process in it, TERM then KILL; then the namespace
  local ns="$1" n
  ip netns pids "$ns" 2>/dev/null | xargs -r kill -TERM 2>/dev/null || true
  for ((n = 0; n < 50; n++)); do
    [[ -z "$(ip netns pids "$ns" 2>/dev/null)" ]] && break
    sleep 0.1
  done
  ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
  for ((n = 0; n < 50; n++)); do
    [[ -z "$(ip netns pids "$ns" 2>/dev/null)" ]] && break
    sleep 0.1
  done
  ip netns del "$ns" 2>/dev/null || true
}

cmd_down() {
  [[ -d "$DIR" ]] || return 0
  local env
  for env in "$DIR"/*/host.env; do
    [[ -f "$env" ]] || continue
    # shellcheck disable=SC1090
    (source "$env" && stop_netns "$NETNS" && log "stopped host $NAME")
    rm -f "$env"
  done
  # Sessions' processes that left the namespace's process list but not the machine (none
  # expected; a user's processes are in the host's namespace from sesman on).
  local user accounts
  # The accounts single sign-on made on these hosts (hostpool-logon records each).
  for accounts in "$DIR"/*/logon/accounts; do
    [[ -f "$accounts" ]] || continue
    while read -r user; do
      [[ -n "$user" ]] || continue
      pkill -KILL -u "$user" 2>/dev/null || true
      if [[ "$(getent passwd "$user" | cut -d: -f5)" == "hostpool single sign-on" ]]; then
        userdel -r "$user" 2>/dev/null || userdel "$user" 2>/dev/null || true
        groupdel "$user" 2>/dev/null || true
      fi
    done <"$accounts"
    rm -f "$accounts"
  done
  if [[ -f "$DIR/users" ]]; then
    while read -r user; do
      [[ -n "$user" ]] || continue
      pkill -KILL -u "$user" 2>/dev/null || true
      if [[ "$(getent passwd "$user" | cut -d: -f5)" == "$USER_COMMENT" ]]; then
        userdel -r "$user" 2>/dev/null || userdel "$user" 2>/dev/null || true
      fi
    done <"$DIR/users"
    rm -f "$DIR/users"
  fi
  # X lock files and sockets whose server is gone (a killed Xorg leaves them).
  local lock pid display
  for lock in /tmp/.X*-lock; do
    [[ -f "$lock" ]] || continue
    pid="$(tr -d ' ' <"$lock" 2>/dev/null || true)"
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
      display="${lock#/tmp/.X}"
      display="${display%-lock}"
      rm -f "$lock" "/tmp/.X11-unix/X$display"
    fi
  done
}

cmd_exec() {
  local name="$1"
  shift
  [[ -f "$DIR/$name/host.env" ]] || die "no host $name in $DIR"
  # shellcheck disable=SC1090
  source "$DIR/$name/host.env"
  exec ip netns exec "$NETNS" "$@"
}

[[ $# -ge 1 ]] || usage
CMD="$1"
shift
if [[ "$CMD" == check ]]; then
  reason="$(why_not)"
  [[ -z "$reason" ]] || { echo "$reason"; exit 3; }
  exit 0
fi
[[ $# -ge 1 ]] || usage
mkdir -p "$1"
DIR="$(cd "$1" && pwd)"
shift
BRIDGE="" HOSTS="" FIRST=11 USERS="" SIGNON="" VERIFIER="" CLIPBOARD=Enabled
case "$CMD" in
  up)
    while [[ $# -gt 0 ]]; do
      case "$1" in
        --bridge) BRIDGE="$2"; shift 2 ;;
        --hosts) HOSTS="$2"; shift 2 ;;
        --first) FIRST="$2"; shift 2 ;;
        --users) USERS="$2"; shift 2 ;;
        --signon) SIGNON="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2 ;;
        --verifier) VERIFIER="$2"; shift 2 ;;
        --clipboard) CLIPBOARD="$2"; shift 2 ;;
        *) usage ;;
      esac
    done
    cmd_up
    ;;
  down) cmd_down ;;
  exec) [[ $# -ge 2 ]] || usage; cmd_exec "$@" ;;
  *) usage ;;
esac
