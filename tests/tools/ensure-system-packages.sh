#!/usr/bin/env bash
# Install the Debian packages the test suites need when they are missing:
# podman, runc and debootstrap for the Molecule node scenarios and the trainer image, skopeo
# for the trainer_image role's push, shellcheck for ansible-test sanity, openssl for the
# Kubernetes harness's certificates and the test registry's, sshd and ip for the two-node SSH
# launcher test (network namespaces).
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
)
missing=()
for command in "${!package_for[@]}"; do
  command -v "$command" >/dev/null 2>&1 || missing+=("${package_for[$command]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "missing packages: ${missing[*]}; install them (Debian/Ubuntu: apt-get install -y ${missing[*]})" >&2
  exit 1
fi
echo "installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
