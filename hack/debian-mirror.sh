#!/usr/bin/env bash
# Prints the Debian mirror this machine's apt uses (the first URI of a
# "debian" archive in its sources), for debootstrap: the rootfs scripts use
# whatever mirror or proxy the machine is set up with, and name none.
# DEBIAN_MIRROR overrides it.
set -euo pipefail
if [ -n "${DEBIAN_MIRROR:-}" ]; then
  echo "$DEBIAN_MIRROR"
  exit 0
fi
uri=$(
  {
    # deb822 (.sources): "URIs: <uri> ..."
    grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' || true
    # one-line (.list): "deb [opts] <uri> <suite> ..."
    grep -hE '^deb[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      sed -E 's/\[[^]]*\]//' | awk '{print $2}' || true
  } | grep -E '/debian/?$' | head -1 || true
)
if [ -z "$uri" ]; then
  echo "debian-mirror: no Debian archive in apt's sources; set DEBIAN_MIRROR" >&2
  exit 1
fi
echo "${uri%/}"
