#!/usr/bin/env bash
# Build the systemd Debian image the node-role Molecule scenarios run in, from this
# machine's own Debian mirror (no container registry is needed). Built once per machine
# and kept in podman's storage under a tag that names its recipe version.
set -euo pipefail

IMAGE="${GPUOPS_NODE_IMAGE:-localhost/gpuops-node:bookworm-1}"
SUITE=bookworm
PACKAGES=python3,systemd,systemd-sysv,dbus,procps,kmod,iproute2,ca-certificates

export CONTAINERS_CONF="${CONTAINERS_CONF:-$(cd "$(dirname "$0")" && pwd)/containers.conf}"

if podman image exists "$IMAGE"; then
  echo "image $IMAGE is present"
  exit 0
fi

for tool in debootstrap podman runc; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y podman runc debootstrap" >&2; exit 1; }
done

# shellcheck source-path=SCRIPTDIR source=debian-mirror.sh
source "$(dirname "$0")/debian-mirror.sh"
mirror=$(debian_mirror)

rootfs=$(mktemp -d /var/tmp/gpuops-node-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "building $IMAGE from $mirror (a few minutes, once per machine)"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$mirror" >/dev/null
# systemd in a container: no getty on a console that does not exist.
rm -f "$rootfs"/etc/systemd/system/getty.target.wants/* 2>/dev/null || true
tar -C "$rootfs" -c . | podman import --change 'CMD ["/sbin/init"]' - "$IMAGE" >/dev/null
echo "built $IMAGE"
