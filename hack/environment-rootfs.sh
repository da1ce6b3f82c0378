#!/usr/bin/env bash
# Builds (or reuses) a foreign root file system for the environment-image
# tests and prints its directory: Debian trixie, minbase, with an
# /etc/os-release that says it is the test's image, so a test can tell the
# image's root from the node's. The tests turn it into an OCI image with
# test/oci (no container engine) and serve it from a registry on loopback.
#
# Cached under ~/.cache/harnessfacts/rootfs. Needs root and debootstrap
# (installed from Debian's packages when missing).
set -euo pipefail

suite=trixie
mirror=$("$(dirname "${BASH_SOURCE[0]}")/debian-mirror.sh") # apt's own, or DEBIAN_MIRROR
root=${HARNESSFACTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/harnessfacts}
dir="$root/rootfs/environment-$suite-v1"
if [ -f "$dir/.complete" ]; then
  echo "$dir/rootfs"
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "environment-rootfs: needs root (debootstrap)" >&2; exit 1; }
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
mkdir -p "$root/rootfs"
exec 9>"$root/rootfs/.lock-environment"
flock 9
if [ -f "$dir/.complete" ]; then
  echo "$dir/rootfs"
  exit 0
fi
rm -rf "$dir"
mkdir -p "$dir"
echo "environment-rootfs: debootstrap --variant=minbase $suite (a few minutes)" >&2
debootstrap --variant=minbase "$suite" "$dir/rootfs" "$mirror" >"$dir/debootstrap.log" 2>&1 ||
  { tail -20 "$dir/debootstrap.log" >&2; exit 1; }
rm -rf "$dir/rootfs/var/cache/apt/archives/"*.deb "$dir/rootfs/var/lib/apt/lists/"* \
  "$dir/rootfs/usr/share/doc" "$dir/rootfs/usr/share/man" "$dir/rootfs/usr/share/locale" "$dir/rootfs/usr/share/info"
# os-release is a link into /usr/lib: replace the link with the test's file.
rm -f "$dir/rootfs/etc/os-release"
cat >"$dir/rootfs/etc/os-release" <<'OS'
PRETTY_NAME="HarnessFacts environment test image (Debian trixie)"
NAME="harnessfacts-environment-test"
ID=harnessfacts-env-test
ID_LIKE=debian
VERSION_CODENAME=trixie
OS
touch "$dir/.complete"
echo "$dir/rootfs"
