#!/usr/bin/env bash
# Build the root filesystem the test trainer images start from: a Debian minbase with the
# shared libraries a CPython build and torch load, from this machine's own Debian mirror
# (no container registry is needed). It holds no Python: the tests mount this machine's
# Python and the project venv read-only (tests/podman/trainer_image.py adds that thin
# layer and builds training/Containerfile on it). Built once per machine and kept under a
# tag that names its recipe version.
#
# GPUOPS_PODMAN_ROOT and GPUOPS_PODMAN_RUNROOT select another containers storage (podman's
# --root and --runroot; CRI-O reads the same storage when its crio.conf names them);
# empty means podman's own.
set -euo pipefail

SUITE="${GPUOPS_TRAINER_ROOTFS_SUITE:-$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")}"
# Raise the number after the suite whenever the recipe below changes.
IMAGE="${GPUOPS_TRAINER_ROOTFS_IMAGE:-localhost/gpuops-trainer-rootfs:${SUITE}-1}"
# What CPython's extension modules (ssl, ctypes, bz2, lzma, sqlite3, readline, curses, zlib,
# uuid, pyexpat) and torch (OpenMP) link against, plus ps and ip for looking inside a pod.
PACKAGES=libssl3,libffi8,libbz2-1.0,liblzma5,libsqlite3-0,libreadline8,libncursesw6,zlib1g,libuuid1,libexpat1,libgomp1,procps,iproute2

# --image-name prints the image's name (tests/podman/trainer_image.py builds on it).
if [ "${1:-}" = --image-name ]; then
  echo "$IMAGE"
  exit 0
fi

export CONTAINERS_CONF="${CONTAINERS_CONF:-$(cd "$(dirname "$0")" && pwd)/containers.conf}"
podman=(podman)
[ -n "${GPUOPS_PODMAN_ROOT:-}" ] && podman+=(--root "$GPUOPS_PODMAN_ROOT")
[ -n "${GPUOPS_PODMAN_RUNROOT:-}" ] && podman+=(--runroot "$GPUOPS_PODMAN_RUNROOT")

if "${podman[@]}" image exists "$IMAGE"; then
  echo "image $IMAGE is present"
  exit 0
fi

# Already built in podman's own storage: copy it over rather than bootstrap it again.
if [ ${#podman[@]} -gt 1 ] && podman image exists "$IMAGE"; then
  podman save "$IMAGE" | "${podman[@]}" load >/dev/null
  echo "copied $IMAGE from podman's own storage"
  exit 0
fi

for tool in debootstrap podman runc; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y podman runc debootstrap" >&2; exit 1; }
done

# shellcheck source-path=SCRIPTDIR source=debian-mirror.sh
source "$(dirname "$0")/debian-mirror.sh"
mirror=$(debian_mirror)

rootfs=$(mktemp -d /var/tmp/gpuops-trainer-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "building $IMAGE from $mirror (about a minute, once per machine)"
started=$SECONDS
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$mirror" >/dev/null
# An image, not a system to upgrade: no package lists, downloaded packages, manuals or locales.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
  "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
  "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*.log "$rootfs"/var/cache/debconf/*-old
tar -C "$rootfs" -c . | "${podman[@]}" import --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
echo "built $IMAGE in $((SECONDS - started)) s"
