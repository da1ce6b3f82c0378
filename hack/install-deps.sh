#!/usr/bin/env bash
# Installs the system packages the tests need on a fresh Debian machine:
# bubblewrap (the Linux sandbox), slirp4netns (the user-mode network stack of
# egress Unrestricted runs), iproute2 (the tests put a stand-in for the
# outside network in a namespace of its own), and curl for the sample agent
# scripts.
# It does nothing for a package already installed, and only asks apt when run
# as root.
set -euo pipefail

need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v slirp4netns >/dev/null 2>&1 || need+=(slirp4netns)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v flock >/dev/null 2>&1 || need+=(util-linux)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: missing ${need[*]}; install them with your package manager (Debian: apt-get install -y ${need[*]})" >&2
  exit 1
fi
echo "install-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${need[@]}" >/dev/null
