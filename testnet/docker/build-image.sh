#!/usr/bin/env bash
# Build the gpumesh-node test image without any registry: compile
# bin/gpumesh, assemble a minimal root filesystem (the binary, the shared
# libraries and loader it links against, busybox as /bin/sh and the usual
# tools, /etc/passwd, /tmp) and `docker import` it.
#
# The image carries a label with the hash of its root filesystem; when a
# rerun produces the same rootfs the import is skipped, so reruns cost only
# an (incremental) go build and a tar.
#
# Usage: testnet/docker/build-image.sh [IMAGE]   (default gpumesh-node:test)
# Environment: GPUMESH_IMAGE overrides the default image name.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
image="${1:-${GPUMESH_IMAGE:-gpumesh-node:test}}"
label=io.gpumesh.rootfs-sha256

log() { echo "build-image: $*" >&2; }
die() { log "$*"; exit 1; }

command -v docker >/dev/null || die "docker CLI not found"
command -v ldd >/dev/null || die "ldd not found (needed to collect shared libraries)"

export CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"
(cd "$root" && go build -o bin/gpumesh ./cmd/gpumesh) || die "go build failed"
bin="$root/bin/gpumesh"

# busybox provides /bin/sh and the tools a job needs; install it if missing.
busybox="$(command -v busybox || true)"
if [[ -z "$busybox" ]]; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    log "installing busybox-static"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q busybox-static >/dev/null 2>&1; then
      DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1 || true
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q busybox-static >/dev/null 2>&1 ||
        die "apt-get install busybox-static failed"
    fi
    busybox="$(command -v busybox || true)"
  fi
  [[ -n "$busybox" ]] || die "busybox not found; install busybox-static"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/gpumesh-rootfs.XXXXXX")"
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
mkdir -p "$rootfs"/{bin,usr/bin,usr/local/bin,etc,tmp,run,data,root,proc,sys,dev}
chmod 1777 "$rootfs/tmp"
chmod 0700 "$rootfs/data" "$rootfs/root"

# copy_libs FILE: copy the loader and shared libraries FILE links against,
# at their absolute paths (nothing for a static binary).
copy_libs() {
  local f
  while read -r f; do
    [[ -n "$f" && -e "$f" ]] || continue
    mkdir -p "$rootfs$(dirname "$f")"
    cp -L "$f" "$rootfs$f"
  done < <(ldd "$1" 2>/dev/null | awk '/=> \//{print $3} /^[[:space:]]*\//{print $1}' | sort -u)
}

install -m 0755 "$bin" "$rootfs/usr/local/bin/gpumesh"
copy_libs "$bin"
install -m 0755 "$busybox" "$rootfs/bin/busybox"
copy_libs "$busybox"
for applet in $("$busybox" --list); do
  case "$applet" in busybox) continue ;; esac
  [[ -e "$rootfs/bin/$applet" ]] || ln -s busybox "$rootfs/bin/$applet"
done
[[ -e "$rootfs/bin/sh" ]] || die "busybox at $busybox has no sh applet"
# Some scripts hard-code /usr/bin/env.
ln -sf ../../bin/env "$rootfs/usr/bin/env"

cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
echo "hosts: files dns" >"$rootfs/etc/nsswitch.conf"

# A reproducible tar, so that an unchanged rootfs hashes the same.
tarball="$work/rootfs.tar"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$tarball" .
sum="$(sha256sum "$tarball" | cut -d' ' -f1)"

have="$(docker image inspect -f "{{index .Config.Labels \"$label\"}}" "$image" 2>/dev/null || true)"
if [[ "$have" == "$sum" ]]; then
  log "$image is up to date (rootfs $sum)"
  exit 0
fi
docker import \
  --change "LABEL $label=$sum" \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
  --change 'WORKDIR /' \
  --change 'CMD ["gpumesh", "-d", "/data", "daemon"]' \
  "$tarball" "$image" >/dev/null
log "built $image (rootfs $sum)"
