#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Build the simulated GPU host image: Debian bookworm with systemd as PID 1,
# made with debootstrap from the machine's own Debian mirror and imported
# with `podman import`. Nothing is pulled from a container registry.
#
# Prints the image reference on stdout. The image is tagged with a hash of
# this recipe, so it is rebuilt only when the recipe changes; an interrupted
# build leaves only a *.partial directory or file, which the next run
# deletes and redoes (podman import only creates the image when it succeeds).
#
# Environment:
#   GPUFLEET_HOST_IMAGE      use this image instead (any image with systemd
#                            at /sbin/init and python3); nothing is built
#   GPUFLEET_DEBIAN_MIRROR   Debian mirror for debootstrap (default: the
#                            first bookworm mirror in this machine's apt
#                            sources)
#   GPUFLEET_CACHE           cache directory (see scripts/lib.sh)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../../../scripts/lib.sh
source "$HERE/../../../scripts/lib.sh"

if [[ -n "${GPUFLEET_HOST_IMAGE:-}" ]]; then
  echo "$GPUFLEET_HOST_IMAGE"
  exit 0
fi

SUITE=bookworm
PACKAGES=(systemd systemd-sysv dbus python3 python3-venv iproute2 procps
          ca-certificates less)
RECIPE_HASH="$( { cat "$HERE/build.sh"; printf '%s\n' "${PACKAGES[@]}"; } \
                | sha256sum | cut -c1-12)"
IMAGE="localhost/gpufleet-host:${SUITE}-${RECIPE_HASH}"
WORK="$GPUFLEET_CACHE/image"
ROOTFS_TAR="$WORK/rootfs-${SUITE}-${RECIPE_HASH}.tar"

command -v podman >/dev/null || die "podman is not installed: apt-get install podman runc (scripts/bootstrap.sh does it)"

if podman image exists "$IMAGE"; then
  echo "$IMAGE"
  exit 0
fi

find_mirror() {
  if [[ -n "${GPUFLEET_DEBIAN_MIRROR:-}" ]]; then
    echo "$GPUFLEET_DEBIAN_MIRROR"; return
  fi
  local f uri
  # deb822 sources: the URIs of the stanza whose Suites name bookworm
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    uri="$(awk -v s="$SUITE" '
      /^[[:space:]]*$/ { if (u != "" && hit) { print u; exit } u=""; hit=0; next }
      /^URIs:/   { u=$2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == s) hit=1 }
      END        { if (u != "" && hit) print u }' "$f" | grep -v security | head -n1)"
    if [[ -n "$uri" ]]; then echo "$uri"; return; fi
  done
  if [[ -f /etc/apt/sources.list ]]; then
    uri="$(awk -v s="$SUITE" '$1 == "deb" && $3 == s { print $2; exit }' /etc/apt/sources.list)"
    if [[ -n "$uri" ]]; then echo "$uri"; return; fi
  fi
  die "no Debian $SUITE mirror found in the apt sources; set GPUFLEET_DEBIAN_MIRROR"
}

# debootstrap can leave /proc mounted inside its root (always when it was
# interrupted): unmount what is mounted below a directory, deepest first
unmount_under() {
  [[ -d "$1" ]] || return 0
  awk -v r="$1/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r \
    | while read -r mnt; do umount -l "$mnt" || true; done
}

mkdir -p "$WORK"
if [[ ! -s "$ROOTFS_TAR" ]]; then
  command -v debootstrap >/dev/null || die "debootstrap is not installed: apt-get install debootstrap (scripts/bootstrap.sh does it)"
  [[ "$(id -u)" == 0 ]] || die "debootstrap needs root to build the host image; run as root or set GPUFLEET_HOST_IMAGE to an existing systemd image"
  MIRROR="$(find_mirror)"
  ROOT="$WORK/rootfs.partial"
  unmount_under "$ROOT"
  rm -rf "$ROOT" "$ROOTFS_TAR.partial"
  step "building the simulated host image: debootstrap $SUITE ($(IFS=,; echo "${PACKAGES[*]}"))" \
    "$WORK/debootstrap.log" --size "$ROOT" --fail "debootstrap failed (full log: $WORK/debootstrap.log)" -- \
    debootstrap --variant=minbase --include="$(IFS=,; echo "${PACKAGES[*]}")" "$SUITE" "$ROOT" "$MIRROR"
  # A container host: no getty, no udev, no kernel mounts of its own; an
  # empty machine-id so each container gets its own.
  for unit in getty.target console-getty.service systemd-udevd.service \
              systemd-udevd-control.socket systemd-udevd-kernel.socket \
              sys-kernel-debug.mount sys-kernel-tracing.mount \
              sys-kernel-config.mount systemd-remount-fs.service \
              systemd-firstboot.service systemd-modules-load.service \
              apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
              fstrim.timer; do
    ln -sf /dev/null "$ROOT/etc/systemd/system/$unit"
  done
  unmount_under "$ROOT"
  : >"$ROOT/etc/machine-id"
  rm -f "$ROOT/var/lib/dbus/machine-id"
  echo "gpufleet-host" >"$ROOT/etc/hostname"
  rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*
  tar -C "$ROOT" -cf "$ROOTFS_TAR.partial" .
  mv "$ROOTFS_TAR.partial" "$ROOTFS_TAR"
  rm -rf "$ROOT"
fi

log "podman import -> $IMAGE"
podman import --quiet \
  --change 'CMD ["/sbin/init"]' \
  --change 'ENV container=podman' \
  --change 'STOPSIGNAL SIGRTMIN+3' \
  --change "LABEL org.gpufleet.recipe=$RECIPE_HASH" \
  "$ROOTFS_TAR" "$IMAGE" >/dev/null
# old builds of the recipe are no longer needed
for old in "$WORK"/rootfs-"$SUITE"-*.tar; do
  [[ "$old" == "$ROOTFS_TAR" ]] || rm -f "$old"
done
echo "$IMAGE"
