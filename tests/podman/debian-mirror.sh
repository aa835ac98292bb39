# shellcheck shell=bash
# Sourced by the image scripts here: print the Debian mirror this machine's apt uses, read
# from its sources (deb822 or one-line format), so that no mirror is written in the project.
debian_mirror() {
  local mirror
  mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n 1 || true)
  if [ -z "$mirror" ]; then
    mirror=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
  fi
  [ -n "$mirror" ] || { echo "cannot find a Debian mirror in /etc/apt sources" >&2; return 1; }
  echo "$mirror"
}
