#!/usr/bin/env bash
# PID 1 of the session-host image (operator/session-host.Containerfile): an xrdp + xorgxrdp
# desktop host, optionally with hostpool-agent reporting for it. As root, it
#   1. creates the desktop users listed in $HOSTPOOL_DESKTOP_USERS_FILE (lines
#      `user:password[:uid]`; in Kubernetes a Secret's key mounted there), each with a fixed
#      uid (the one written, else one derived from the name: adding, removing or reordering
#      lines changes nobody's), a private group of the same id and an executable ~/.xsession
#      (an xterm under twm) unless the home already has one; a user whose account or home
#      belongs to another uid is not made (never re-owned), and the log says why;
#   2. with the broker's public logon key(s) mounted at $HOSTPOOL_LOGON_KEYS (single sign-on,
#      the ConfigMap the broker publishes), puts hostpool-logon first in xrdp-sesman's PAM
#      stack: the broker's one-time credential signs a person on, their account (the uid the
#      credential names) and home made at the first logon; typed passwords still go to the
#      users file's accounts;
#   3. makes this container's own TLS certificate and RSA keys (or uses a mounted certificate),
#      and sets xrdp's clipboard as $HOSTPOOL_CLIPBOARD says (clipboard.sh);
#   4. runs xrdp-sesman and xrdp in the foreground (-n: no daemon mode, so no pid files that a
#      restarted container would trip over), xrdp as the unprivileged user xrdp, as Debian does;
#   5. if $HOSTPOOL_AGENT_HOST is set, runs `hostpool-agent --sessions-from xrdp --host HOST`
#      plus $HOSTPOOL_AGENT_ARGS, and restarts it if it exits (an agent's crash must not end
#      the users' sessions);
#   6. on SIGTERM (or SIGINT) stops the agent, ends the sessions (the desktop users'
#      processes), then xrdp and sesman, and exits 0;
#   7. exits 1 as soon as xrdp or xrdp-sesman dies, so that the kubelet restarts the container.
#
# Env:  HOSTPOOL_DESKTOP_USERS_FILE  default /etc/hostpool/users (absent: no users are made)
#       HOSTPOOL_XRDP_TLS_DIR        default /etc/hostpool/tls: tls.crt and tls.key there (a
#                                    kubernetes.io/tls Secret) are xrdp's certificate; else a
#                                    self-signed one is made at start
#       HOSTPOOL_LOGON_KEYS          default /etc/hostpool/logon-keys/keys.pem (absent: no
#                                    single sign-on)
#       HOSTPOOL_LOGON_HOST          the SessionHost's name the credentials must be for
#                                    (default $HOSTPOOL_AGENT_HOST; required with the keys)
#       HOSTPOOL_LOGON_STATE         default /var/lib/hostpool-logon: the credentials taken
#                                    (never twice) and the accounts made; put it on the home's
#                                    volume to keep it across a pod's re-creation
#       HOSTPOOL_CLIPBOARD           Enabled (default) or Disabled: the pool's
#                                    connection.clipboard, which the operator sets in the Pods
#                                    it starts; Disabled turns xrdp's clipboard channel off
#       HOSTPOOL_AGENT_HOST          the SessionHost to report for (unset: no agent)
#       HOSTPOOL_AGENT_ARGS          more agent arguments, split at white space
#       HOSTPOOL_STOP_TIMEOUT        seconds sessions and daemons get after SIGTERM before they
#                                    are killed (default 5; keep it below the pod's grace period)
# The agent finds its credentials as it does anywhere: KUBECONFIG, else the pod's ServiceAccount.
# Ready: port 3389 accepts TCP (xrdp listens only once it has its keys and sesman is up).
set -euo pipefail

USERS_FILE="${HOSTPOOL_DESKTOP_USERS_FILE:-/etc/hostpool/users}"
TLS_DIR="${HOSTPOOL_XRDP_TLS_DIR:-/etc/hostpool/tls}"
STOP_TIMEOUT="${HOSTPOOL_STOP_TIMEOUT:-5}"
LOGON_KEYS="${HOSTPOOL_LOGON_KEYS:-/etc/hostpool/logon-keys/keys.pem}"
LOGON_HOST="${HOSTPOOL_LOGON_HOST:-${HOSTPOOL_AGENT_HOST:-}}"
LOGON_STATE="${HOSTPOOL_LOGON_STATE:-/var/lib/hostpool-logon}"
XSESSION_TEMPLATE=/usr/local/lib/hostpool-session-host/xsession
# xrdp-sesman's PAM stack as Debian ships it (configure.sh keeps a copy): single sign-on
# puts its rule before it, on every start, so a restart never stacks the rule twice.
SESMAN_PAM=/usr/local/lib/hostpool-session-host/xrdp-sesman.pam
CLIPBOARD="${HOSTPOOL_CLIPBOARD:-Enabled}"
signon=""
# shellcheck source=operator/session-host/clipboard.sh
source "$(dirname "${BASH_SOURCE[0]}")/clipboard.sh"

log() { printf '%s session-host: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }

# ------------------------------------------------------------------------------ users
desktop_users=()

# A user's uid when the users file names none: from the name alone, in a range of a billion
# (two names of a lab's users meet with a chance of about one in four million), far above the
# uids the image's own accounts and the broker's single sign-on allocations use.
uid_of_name() {
  local hash
  hash="$(printf '%s' "$1" | sha256sum | cut -c1-8)"
  echo $((1000000 + 16#$hash % 1000000000))
}

# make_user USER UID: the account with UID and a private group of the same id; 1 (and a log
# line) when the name, the uid or the home already belongs to someone else.
make_user() {
  local user=$1 uid=$2 home="/home/$1" holder
  if id -u "$user" >/dev/null 2>&1; then
    if [[ "$(id -u "$user")" != "$uid" ]]; then
      log "$user exists with uid $(id -u "$user"), not $uid: not made a desktop user"
      return 1
    fi
    return 0
  fi
  holder="$(getent passwd "$uid" | cut -d: -f1)"
  if [[ -n "$holder" ]]; then
    log "uid $uid of $user is $holder's: not made (write another uid in the users file)"
    return 1
  fi
  if [[ -e "$home" && "$(stat -c %u "$home")" != "$uid" ]]; then
    log "$home belongs to uid $(stat -c %u "$home"), not $user's $uid: not made (HomeOwnedByAnotherUser)"
    return 1
  fi
  getent group "$uid" >/dev/null || groupadd -g "$uid" "$user"
  useradd --create-home --uid "$uid" --gid "$uid" --shell /bin/bash "$user" 2>/dev/null
}

create_users() {
  if [[ -d "$USERS_FILE" ]]; then
    log "$USERS_FILE is a directory (mount the Secret's key there with subPath): no desktop users created"
    return 0
  elif [[ ! -f "$USERS_FILE" ]]; then
    log "no users file $USERS_FILE: no desktop users created"
    return 0
  fi
  local line user password uid n=0 home
  while IFS= read -r line || [[ -n "$line" ]]; do
    n=$((n + 1))
    line="${line%$'\r'}"
    [[ -z "$line" || "$line" == \#* ]] && continue
    user="${line%%:*}"
    password="${line#*:}"
    uid=""
    # user:password:uid (a password may hold colons: the uid is the last field when numeric).
    if [[ "$password" =~ ^(.*):([0-9]{4,10})$ ]]; then
      password="${BASH_REMATCH[1]}"
      uid="${BASH_REMATCH[2]}"
    fi
    # Never log the line itself: it holds a password.
    if [[ "$line" != *:* || -z "$password" || ! "$user" =~ ^[a-z_][a-z0-9_-]{0,31}$ ]]; then
      log "$USERS_FILE line $n is not user:password with a lower-case user name: skipped"
      continue
    fi
    if id -u "$user" >/dev/null 2>&1 && (($(id -u "$user") < 1000)); then
      # A system account (root, xrdp, ...) must not become a desktop login.
      log "$USERS_FILE line $n: $user is a system account: skipped"
      continue
    fi
    [[ -n "$uid" ]] || uid="$(uid_of_name "$user")"
    if ((uid < 1000 || uid > 2147483646)); then
      log "$USERS_FILE line $n: uid $uid is not a person's: skipped"
      continue
    fi
    make_user "$user" "$uid" || continue
    printf '%s:%s\n' "$user" "$password" | chpasswd
    home="$(getent passwd "$user" | cut -d: -f6)"
    # A home that already has its own session (a persistent volume) keeps it.
    if [[ ! -e "$home/.xsession" ]]; then
      install -o "$user" -g "$(id -gn "$user")" -m 0755 "$XSESSION_TEMPLATE" "$home/.xsession"
    fi
    desktop_users+=("$user")
  done <"$USERS_FILE"
  log "desktop users: ${desktop_users[*]:-none}"
}

# ------------------------------------------------------------------------------ single sign-on
setup_signon() {
  if [[ ! -e "$LOGON_KEYS" ]]; then
    cp "$SESMAN_PAM" /etc/pam.d/xrdp-sesman
    return 0
  fi
  if [[ -z "$LOGON_HOST" ]]; then
    log "single sign-on needs this host's SessionHost name: set HOSTPOOL_AGENT_HOST or HOSTPOOL_LOGON_HOST"
    exit 1
  fi
  # The verifier reads the keys at each logon: a rotated key is trusted as soon as the
  # kubelet updates the mounted ConfigMap. It must hold a key now, or nobody could sign on.
  if ! grep -q -- '-----BEGIN PUBLIC KEY-----' "$LOGON_KEYS"; then
    log "$LOGON_KEYS holds no public key: single sign-on cannot work"
    exit 1
  fi
  install -d -m 0700 "$LOGON_STATE"
  {
    echo "# hostpool single sign-on: the broker's one-time logon credential first"
    printf 'auth [success=done default=ignore] pam_exec.so quiet expose_authtok %s --host %s --public-keys %s --state %s --xsession %s\n' \
      "$(command -v hostpool-logon)" "$LOGON_HOST" "$LOGON_KEYS" "$LOGON_STATE" "$XSESSION_TEMPLATE"
    cat "$SESMAN_PAM"
  } >/etc/pam.d/xrdp-sesman.new
  mv -f /etc/pam.d/xrdp-sesman.new /etc/pam.d/xrdp-sesman
  signon=1
  log "single sign-on for host $LOGON_HOST (keys $LOGON_KEYS, state $LOGON_STATE)"
}

# ------------------------------------------------------------------------------ keys
setup_keys() {
  if [[ -s "$TLS_DIR/tls.crt" && -s "$TLS_DIR/tls.key" ]]; then
    ln -sfn "$TLS_DIR/tls.crt" /etc/xrdp/cert.pem
    ln -sfn "$TLS_DIR/tls.key" /etc/xrdp/key.pem
    log "TLS certificate from $TLS_DIR"
  elif [[ ! -s /etc/xrdp/key.pem ]]; then
    # Self-signed, for this container only (clients must accept it: /cert:ignore, or a
    # certificate of your own in $TLS_DIR).
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=$(hostname)" \
      -keyout /etc/xrdp/key.pem -out /etc/xrdp/cert.pem 2>/dev/null
    chgrp xrdp /etc/xrdp/key.pem
    chmod 0640 /etc/xrdp/key.pem
    log "made a self-signed TLS certificate for $(hostname)"
  fi
  # The RSA keys of RDP's standard security layer.
  if [[ ! -s /etc/xrdp/rsakeys.ini ]]; then
    xrdp-keygen xrdp /etc/xrdp/rsakeys.ini >/dev/null
    chown xrdp:root /etc/xrdp/rsakeys.ini
    chmod 0600 /etc/xrdp/rsakeys.ini
  fi
}

# ------------------------------------------------------------------------------ processes
sesman_pid="" xrdp_pid="" agent_pid="" agent_args=()

start_agent() {
  hostpool-agent --sessions-from xrdp --host "$HOSTPOOL_AGENT_HOST" "${agent_args[@]}" &
  agent_pid=$!
  log "hostpool-agent for host $HOSTPOOL_AGENT_HOST started (pid $agent_pid)"
}

# stop_pids SIGNAL PID...: signal the processes that still run, wait up to STOP_TIMEOUT s for
# them, then SIGKILL what is left.
stop_pids() {
  local sig=$1 pid deadline
  shift
  (($# > 0)) || return 0
  kill "-$sig" "$@" 2>/dev/null || true
  deadline=$((SECONDS + STOP_TIMEOUT))
  for pid in "$@"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  done
  kill -KILL "$@" 2>/dev/null || true
}

# The processes of the desktop users (the sessions: Xorg, the window manager, their programs).
session_pids() {
  local user users=("${desktop_users[@]}")
  # The accounts single sign-on made (one name a line).
  if [[ -n "$signon" && -f "$LOGON_STATE/accounts" ]]; then
    mapfile -t -O "${#users[@]}" users <"$LOGON_STATE/accounts"
  fi
  for user in "${users[@]}"; do
    if [[ -n "$user" ]] && id -u "$user" >/dev/null 2>&1; then pgrep -u "$user" || true; fi
  done
}

# shutdown STATUS: stop everything (agent, sessions, xrdp, sesman) and exit STATUS.
shutdown() {
  local status=$1 pids
  trap '' TERM INT
  # The agent first: it must not report the sessions going away as users logging off.
  if [[ -n "$agent_pid" ]]; then stop_pids TERM "$agent_pid"; fi
  mapfile -t pids < <(session_pids)
  if ((${#pids[@]} > 0)); then
    log "ending ${#pids[@]} session processes"
    stop_pids TERM "${pids[@]}"
  fi
  pids=()
  [[ -z "$xrdp_pid" ]] || pids+=("$xrdp_pid")
  [[ -z "$sesman_pid" ]] || pids+=("$sesman_pid")
  stop_pids TERM "${pids[@]}"
  # Whatever is left (a restart delay's sleep, an xrdp connection) ends with PID 1.
  log "stopped (exit $status)"
  exit "$status"
}

trap 'log "SIGTERM: stopping"; shutdown 0' TERM
trap 'log "SIGINT: stopping"; shutdown 0' INT

create_users
setup_signon
setup_keys
# At every start: a restarted container follows the setting it has now.
if ! xrdp_clipboard /etc/xrdp/xrdp.ini /etc/xrdp/sesman.ini "$CLIPBOARD"; then
  log "HOSTPOOL_CLIPBOARD is neither Enabled nor Disabled: not started"
  exit 1
fi
log "clipboard $CLIPBOARD"
# No session survives a restart of the container (podman restart keeps its files): the X
# servers' locks and sockets of the last run would make sesman skip their display numbers.
rm -rf /tmp/.X[0-9]*-lock /tmp/.X11-unix/X[0-9]* /run/xrdp/sockdir
# The directory xrdp and the sessions' X servers meet in (what Debian's unit does first).
/bin/sh /usr/share/xrdp/socksetup

# Their console log is stdout, which stdio buffers in blocks when it is a pipe (the container's
# log): line-buffered, lines show up in `kubectl logs` as they are written.
stdbuf -oL xrdp-sesman --nodaemon &
sesman_pid=$!
# xrdp connects to sesman (127.0.0.1:3350) only when a user logs on; it can start at once.
stdbuf -oL setpriv --reuid=xrdp --regid=xrdp --init-groups xrdp --nodaemon &
xrdp_pid=$!
log "xrdp-sesman (pid $sesman_pid) and xrdp (pid $xrdp_pid) started; RDP on port 3389"

if [[ -n "${HOSTPOOL_AGENT_HOST:-}" ]]; then
  read -ra agent_args <<<"${HOSTPOOL_AGENT_ARGS:-}"
  # The agent reports the verifier's refusals as Events (LogonRefused, HomeOwnedByAnotherUser).
  [[ -z "$signon" ]] || agent_args+=(--logon-state "$LOGON_STATE")
  start_agent
fi

# Wait for any child. A trapped signal interrupts `wait` at once and its trap runs shutdown.
while :; do
  finished=""
  status=0
  wait -n -p finished || status=$?
  if [[ -z "$finished" ]]; then
    continue # a signal (its trap ran), or no child of ours ended
  elif [[ "$finished" == "$sesman_pid" ]]; then
    log "xrdp-sesman exited with status $status"
    shutdown 1
  elif [[ "$finished" == "$xrdp_pid" ]]; then
    log "xrdp exited with status $status"
    shutdown 1
  elif [[ "$finished" == "$agent_pid" ]]; then
    log "hostpool-agent exited with status $status; restarting it in 10 s"
    agent_pid=""
    sleep 10 &
    wait $! || true
    start_agent
  fi
done
