#!/bin/sh
# Install the gpumesh daemon: the binary, a service user, its data dir and
# (unless --no-systemd) the systemd unit, enabled. Idempotent: a rerun
# leaves the same files, owners and modes, and keeps the data dir's
# contents (identity key, ledger, config).
#
# Usage: install.sh [--binary PATH] [--prefix DIR] [--user NAME]
#                   [--data-dir DIR] [--no-systemd] [--no-user] [--start]
#   --binary    the gpumesh binary to install (default: ./gpumesh, else
#               the one in PATH)
#   --prefix    install under DIR instead of / (packaging, tests)
#   --user      service user and group (default gpumesh)
#   --data-dir  the daemon's data dir (default /var/lib/gpumesh)
#   --no-systemd  do not install or enable the unit
#   --no-user   do not create the service user (files stay owned by the
#               caller; for unprivileged --prefix installs)
#   --start     start (or restart) the service once enabled
# POSIX sh: runs under busybox too.
set -eu

binary=""
prefix=""
user=gpumesh
datadir=/var/lib/gpumesh
systemd=1
mkuser=1
start=0
here=$(cd "$(dirname "$0")" && pwd)

die() { echo "install.sh: $*" >&2; exit 1; }
say() { echo "install.sh: $*"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --binary) [ $# -ge 2 ] || die "--binary needs a path"; binary=$2; shift 2 ;;
    --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix=${2%/}; shift 2 ;;
    --user) [ $# -ge 2 ] || die "--user needs a name"; user=$2; shift 2 ;;
    --data-dir) [ $# -ge 2 ] || die "--data-dir needs a directory"; datadir=$2; shift 2 ;;
    --no-systemd) systemd=0; shift ;;
    --no-user) mkuser=0; shift ;;
    --start) start=1; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

case "$datadir" in /*) ;; *) die "--data-dir must be absolute, got $datadir" ;; esac
case "$user" in ''|*[!a-z0-9_-]*) die "--user must be a plain lower-case name, got '$user'" ;; esac
if [ -z "$binary" ]; then
  if [ -x ./gpumesh ]; then binary=./gpumesh; else binary=$(command -v gpumesh || true); fi
fi
[ -n "$binary" ] && [ -f "$binary" ] || die "no gpumesh binary (pass --binary PATH)"
"$binary" --version >/dev/null 2>&1 || die "$binary does not run on this machine"

bindir=/usr/local/bin
unitdir=/etc/systemd/system

# The binary, replaced atomically so a running daemon keeps its inode.
mkdir -p "$prefix$bindir"
if ! cmp -s "$binary" "$prefix$bindir/gpumesh" 2>/dev/null; then
  cp "$binary" "$prefix$bindir/.gpumesh.new"
  chmod 0755 "$prefix$bindir/.gpumesh.new"
  mv -f "$prefix$bindir/.gpumesh.new" "$prefix$bindir/gpumesh"
  say "installed $prefix$bindir/gpumesh"
else
  chmod 0755 "$prefix$bindir/gpumesh"
fi

# The service user: a system account with no login and no home of its own.
owner=""
if [ "$mkuser" = 1 ]; then
  if ! id "$user" >/dev/null 2>&1; then
    if command -v useradd >/dev/null 2>&1; then
      nologin=$(command -v nologin || echo /bin/false)
      useradd --system --user-group --no-create-home --home-dir "$datadir" --shell "$nologin" "$user"
    elif command -v adduser >/dev/null 2>&1; then
      # busybox
      addgroup -S "$user" 2>/dev/null || true
      adduser -S -D -H -h "$datadir" -s /bin/false -G "$user" "$user"
    else
      # A minimal system (no shadow tools, busybox without adduser): add
      # the account to /etc/passwd and /etc/group with a free system id.
      [ -w /etc/passwd ] && [ -w /etc/group ] || die "cannot create user $user: no useradd/adduser and /etc/passwd is not writable"
      id=$(awk -F: 'FNR==1{f++} {used[$3]=1} END{for(i=999;i>=100;i--) if(!used[i]){print i; exit}}' /etc/passwd /etc/group)
      [ -n "$id" ] || die "no free system uid/gid in 100-999 for $user"
      grep -q "^$user:" /etc/group || echo "$user:x:$id:" >>/etc/group
      gid=$(awk -F: -v u="$user" '$1==u{print $3}' /etc/group)
      echo "$user:x:$id:$gid:gpumesh daemon:$datadir:/bin/false" >>/etc/passwd
    fi
    say "created service user $user"
  fi
  # Docker access for image jobs, where there is a docker group.
  if grep -q '^docker:' /etc/group 2>/dev/null && ! id -nG "$user" | tr ' ' '\n' | grep -qx docker; then
    if command -v usermod >/dev/null 2>&1; then usermod -aG docker "$user"; else addgroup "$user" docker; fi
    say "added $user to the docker group"
  fi
  owner="$user:$(id -gn "$user")"
fi

# The data dir: the identity key and the ledger live here, private to the
# service user.
mkdir -p "$prefix$datadir"
chmod 0700 "$prefix$datadir"
[ -z "$owner" ] || chown "$owner" "$prefix$datadir"

if [ "$systemd" = 1 ]; then
  mkdir -p "$prefix$unitdir"
  tmp="$prefix$unitdir/.gpumesh.service.new"
  sed -e "s|@BINDIR@|$bindir|g" -e "s|@DATADIR@|$datadir|g" -e "s|@USER@|$user|g" "$here/gpumesh.service" >"$tmp"
  chmod 0644 "$tmp"
  if cmp -s "$tmp" "$prefix$unitdir/gpumesh.service"; then
    rm -f "$tmp"
  else
    mv -f "$tmp" "$prefix$unitdir/gpumesh.service"
    say "installed $prefix$unitdir/gpumesh.service"
  fi
  if [ -z "$prefix" ] && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    systemctl enable gpumesh.service >/dev/null
    say "enabled gpumesh.service"
    if [ "$start" = 1 ]; then systemctl restart gpumesh.service; say "started gpumesh.service"; fi
  else
    # Enabled the way systemctl would: a link in the target's wants dir.
    mkdir -p "$prefix$unitdir/multi-user.target.wants"
    ln -sf "$unitdir/gpumesh.service" "$prefix$unitdir/multi-user.target.wants/gpumesh.service"
  fi
fi

say "done. Next: gpumesh -d $datadir provider init (as $user), gpumesh -d $datadir doctor"
