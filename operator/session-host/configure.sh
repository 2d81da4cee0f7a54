#!/usr/bin/env bash
# Build-time configuration of xrdp in the session-host image (run once by
# operator/session-host.Containerfile, as root). Debian's defaults are kept except where a
# container differs from a machine booted with systemd; each change says why.
set -euo pipefail

# shellcheck source=operator/session-host/ini.sh
source "$(dirname "${BASH_SOURCE[0]}")/ini.sh"

# Logs go to the container's output (kubectl logs / podman logs): the console, at INFO. There
# is no syslog daemon in a container. The log files stay (under /var/log) for `kubectl exec`.
for f in /etc/xrdp/xrdp.ini /etc/xrdp/sesman.ini; do
  ini_set "$f" Logging EnableSyslog false
  ini_set "$f" Logging EnableConsole true
  ini_set "$f" Logging ConsoleLevel INFO
done
ini_set /etc/xrdp/xrdp.ini Logging LogFile /var/log/xrdp.log
ini_set /etc/xrdp/sesman.ini Logging LogFile /var/log/xrdp-sesman.log
# chansrv runs per session as the user; without syslog its log is in the user's home.
ini_set /etc/xrdp/sesman.ini ChansrvLogging EnableSyslog false

# Desktop users come from the users file; root never logs on over RDP.
ini_set /etc/xrdp/sesman.ini Security AllowRootLogin false

# Only the Xorg (xorgxrdp) session type is installed: the Xvnc and NeutrinoRDP entries of the
# login screen's list would only fail. They are the last sections of Debian's xrdp.ini.
awk '/^\[(Xvnc|vnc-any|neutrinordp-any)\]/ { skip = 1 } /^\[Xorg\]/ { skip = 0 } !skip' \
  /etc/xrdp/xrdp.ini >/etc/xrdp/xrdp.ini.new
mv -f /etc/xrdp/xrdp.ini.new /etc/xrdp/xrdp.ini
grep -q '^\[Xorg\]' /etc/xrdp/xrdp.ini

# The keys the packages' maintainer scripts made when the base was built would be the same in
# every container of the image: removed here, made per container by the entrypoint (or taken
# from a mounted certificate). xrdp.ini's empty certificate=/key_file= mean these two paths.
find /etc/ssl/certs -lname '*ssl-cert-snakeoil.pem' -delete
rm -f /etc/xrdp/rsakeys.ini /etc/xrdp/cert.pem /etc/xrdp/key.pem \
  /etc/ssl/certs/ssl-cert-snakeoil.pem /etc/ssl/private/ssl-cert-snakeoil.key

# xrdp's keyboard map (the client's keyboard layout, sent at connect, to the session's XKB
# layout): Debian's lacks Turkish Q (0x041F), which the browser desktop sends for a Turkish
# keyboard.
grep -q '^rdp_layout_tr=' /etc/xrdp/xrdp_keyboard.ini || awk '
  { print }
  /^\[default_rdp_layouts\]/ { print "rdp_layout_tr=0x0000041F" }
  /^\[default_layouts_map\]/ { print "rdp_layout_tr=tr" }
' /etc/xrdp/xrdp_keyboard.ini >/etc/xrdp/xrdp_keyboard.ini.new
[[ ! -f /etc/xrdp/xrdp_keyboard.ini.new ]] || mv -f /etc/xrdp/xrdp_keyboard.ini.new /etc/xrdp/xrdp_keyboard.ini
grep -q '^rdp_layout_tr=tr' /etc/xrdp/xrdp_keyboard.ini

# xrdp-sesman's PAM stack as Debian ships it: the entrypoint writes /etc/pam.d/xrdp-sesman from
# this copy at every start, with the single sign-on rule first when the broker's keys are
# mounted.
cp /etc/pam.d/xrdp-sesman /usr/local/lib/hostpool-session-host/xrdp-sesman.pam
