#!/usr/bin/env bash
# Install the Debian packages the test suites need when they are missing:
# podman, runc and debootstrap for the Molecule node scenarios and the trainer image, skopeo
# for the trainer_image role's push, shellcheck for ansible-test sanity, openssl for the
# Kubernetes harness's certificates and the test registry's, sshd and ip for the two-node SSH
# launcher test (network namespaces), and for the harness's real node: conmon, the CNI
# plugins, busybox (its init-container image), libseccomp-dev,
# libsqlite3-dev and pkg-config (CRI-O is built with cgo, seccomp and Debian's SQLite).
set -euo pipefail

declare -A package_for=(
  [podman]=podman
  [runc]=runc
  [debootstrap]=debootstrap
  [skopeo]=skopeo
  [shellcheck]=shellcheck
  [openssl]=openssl
  [sshd]=openssh-server
  [ip]=iproute2
  [unshare]=util-linux
  [conmon]=conmon
  [/usr/lib/cni/bridge]=containernetworking-plugins
  [/bin/busybox]=busybox-static
  [/usr/include/seccomp.h]=libseccomp-dev
  [/usr/include/sqlite3.h]=libsqlite3-dev
  [pkg-config]=pkg-config
  [gcc]=gcc
)
missing=()
for command in "${!package_for[@]}"; do
  if [[ $command == /* ]]; then
    [ -e "$command" ] || missing+=("${package_for[$command]}")
  else
    command -v "$command" >/dev/null 2>&1 || missing+=("${package_for[$command]}")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "missing packages: ${missing[*]}; install them (Debian/Ubuntu: apt-get install -y ${missing[*]})" >&2
  exit 1
fi
echo "installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
