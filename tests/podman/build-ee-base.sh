#!/usr/bin/env bash
# Build the base image the test execution environment starts from (ansible-builder 3 builds
# execution-environment.yml on it; see tests/podman/execution_environment.py): a Debian
# minbase from this machine's own Debian mirror, so no container registry is needed. It
# holds what ansible-builder's scripts run before anything else is installed:
# - python3, python3-pip and python3-venv: Debian disables ensurepip for its system Python,
#   so pip comes from Debian and the build definition sets options.skip_pip_install;
#   assemble creates a virtual environment with `python3 -m venv`;
# - ca-certificates, for the HTTPS the execution environment speaks;
# - /usr/local/sbin/ee-apt-get, the package manager the scripts are pointed at (build
#   argument PKGMGR): they call "$PKGMGR install -y PACKAGES" for the bindep file's
#   [platform:dpkg] entries and "$PKGMGR clean all"; it runs apt-get with fresh package
#   lists and without recommended packages, and leaves no lists in the image.
# Built once per machine; the tag carries a digest of this script, so a changed recipe
# builds a new image.
set -euo pipefail

SUITE=bookworm
PACKAGES=python3,python3-pip,python3-venv,ca-certificates
DIGEST=$(sha256sum "$0" | cut -c1-12)
IMAGE="${GPUOPS_EE_BASE_IMAGE:-localhost/gpuops-ee-base:${SUITE}-${DIGEST}}"
PACKAGE_MANAGER=/usr/local/sbin/ee-apt-get

case "${1:-}" in
  --image-name) echo "$IMAGE"; exit 0 ;;
  --package-manager) echo "$PACKAGE_MANAGER"; exit 0 ;;
esac

export CONTAINERS_CONF="${CONTAINERS_CONF:-$(cd "$(dirname "$0")" && pwd)/containers.conf}"

if podman image exists "$IMAGE"; then
  echo "image $IMAGE is present"
  exit 0
fi

# One build per machine at a time; whoever waited finds the image built.
exec 9>/var/tmp/gpuops-ee-base.lock
flock 9
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

rootfs=$(mktemp -d /var/tmp/gpuops-ee-base.XXXXXX)
# An interrupted debootstrap leaves /proc mounted in the root filesystem: unmount it before
# removing, and never remove across a file system boundary.
# (errexit holds in the trap too, hence the || true.)
trap 'umount --recursive --lazy "$rootfs/proc" "$rootfs/sys" 2>/dev/null || true; rm -rf --one-file-system "$rootfs"' EXIT
echo "building $IMAGE from $mirror (a few minutes, once per machine)"
started=$SECONDS
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$mirror" >/dev/null
cat >"$rootfs$PACKAGE_MANAGER" <<'EOF'
#!/bin/sh
# ansible-builder's scripts call "$PKGMGR install -y PACKAGES" and "$PKGMGR clean all".
set -e
case "$1" in
  install)
    shift
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive exec apt-get install --no-install-recommends "$@" ;;
  clean)
    apt-get clean
    rm -rf /var/lib/apt/lists/* ;;
  *)
    exec apt-get "$@" ;;
esac
EOF
chmod 0755 "$rootfs$PACKAGE_MANAGER"
# An image, not a system to upgrade: no package lists, downloaded packages, manuals or locales.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
  "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
  "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*.log "$rootfs"/var/cache/debconf/*-old
tar -C "$rootfs" -c . | podman import --quiet --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
echo "built $IMAGE in $((SECONDS - started)) s"
