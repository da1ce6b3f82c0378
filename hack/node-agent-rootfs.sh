#!/usr/bin/env bash
# Builds (or reuses) the root file system of the node-agent image for the
# real-node tests, without a container engine, and prints its directory:
#
#   1. debootstrap Debian trixie (minbase) with the packages the Dockerfile's
#      node-agent stage installs (bubblewrap nodejs npm ca-certificates git);
#   2. run hack/install-agent-clis.sh, the Dockerfile's install step, inside
#      it (bwrap with the rootfs as /), link the CLIs into /usr/local/bin and
#      drop the npm cache, as the Dockerfile does.
#
# The base differs from the Dockerfile's python:3.12-slim-trixie: that image
# cannot be pulled here, and trixie's own Python is 3.13, which aider-chat
# refuses. So step 2 installs the CLIs in IMAGE_AGENT_CLIS (default gemini: one npm
# CLI, small, to prove the script works in the image); the real-node tests
# mount the host's full /opt/harnessfacts/agents over them through the
# chart's agentRuntimes.hostPath. docs/install.md says this.
#
# Cached under ~/.cache/harnessfacts/rootfs by a hash of the package list,
# the install script and IMAGE_AGENT_CLIS. Needs root, debootstrap and bwrap.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suite=trixie
mirror=$("$(dirname "${BASH_SOURCE[0]}")/debian-mirror.sh") # apt's own, or DEBIAN_MIRROR
# slirp4netns as in the Dockerfile: egress Unrestricted needs it.
packages=bubblewrap,slirp4netns,nodejs,npm,ca-certificates,git
clis=${IMAGE_AGENT_CLIS:-gemini}
root=${HARNESSFACTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/harnessfacts}

key=$( { echo "v1 $suite $packages $clis"; cat "$here/install-agent-clis.sh"; } | sha256sum | cut -c1-16)
dir="$root/rootfs/node-agent-$suite-$key"
if [ -f "$dir/.complete" ]; then
  echo "$dir/rootfs"
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "node-agent-rootfs: needs root (debootstrap)" >&2; exit 1; }
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
mkdir -p "$root/rootfs"
exec 9>"$root/rootfs/.lock"
flock 9
if [ -f "$dir/.complete" ]; then
  echo "$dir/rootfs"
  exit 0
fi

# Stage 1, shared by every IMAGE_AGENT_CLIS: Debian's minimal base, then the
# Dockerfile's apt-get line run inside it (debootstrap's own --include
# resolves deep dependency trees such as npm's badly).
base="$root/rootfs/debian-$suite-$(echo "$packages" | sha256sum | cut -c1-12)"
inroot() { # run a command as root inside the rootfs, with the host's DNS
  bwrap --bind "$1" / --proc /proc --dev /dev --ro-bind /etc/resolv.conf /etc/resolv.conf \
    --setenv HOME /root --setenv PATH /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --setenv DEBIAN_FRONTEND noninteractive "${@:2}"
}
if [ ! -f "$base/.complete" ]; then
  if [ ! -f "$base/.debootstrapped" ]; then
    rm -rf "$base"
    mkdir -p "$base"
    echo "node-agent-rootfs: debootstrap $suite, then apt-get install $packages (a few minutes)" >&2
    debootstrap --variant=minbase "$suite" "$base/rootfs" "$mirror" >"$base/debootstrap.log" 2>&1 ||
      { tail -20 "$base/debootstrap.log" >&2; exit 1; }
    touch "$base/.debootstrapped"
  fi
  inroot "$base/rootfs" /bin/sh -ec "apt-get update -qq && apt-get install -y -qq --no-install-recommends ${packages//,/ } >/dev/null &&
    rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb" >>"$base/debootstrap.log" 2>&1 ||
    { tail -20 "$base/debootstrap.log" >&2; exit 1; }
  touch "$base/.complete"
fi

# Stage 2: the Dockerfile's RUN step, in a copy.
tmp=$(mktemp -d "$root/rootfs/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp -a "$base/rootfs" "$tmp/rootfs"
mkdir -p "$tmp/rootfs/usr/local/lib/harnessfacts"
install -m 0755 "$here/install-agent-clis.sh" "$tmp/rootfs/usr/local/lib/harnessfacts/install-agent-clis.sh"
echo "node-agent-rootfs: hack/install-agent-clis.sh --only $clis inside the rootfs" >&2
# The build sees the host's npm settings and, when the host names extra CA
# certificates (a TLS-inspecting proxy), those as the CA bundle: for this
# step only, as a build machine's trust, never baked into the image.
extra=()
[ -f "$HOME/.npmrc" ] && extra+=(--ro-bind "$HOME/.npmrc" /root/.npmrc)
if [ -n "${NODE_EXTRA_CA_CERTS:-}" ] && [ -f "$NODE_EXTRA_CA_CERTS" ]; then
  extra+=(--ro-bind "$NODE_EXTRA_CA_CERTS" /etc/ssl/certs/ca-certificates.crt --setenv NODE_EXTRA_CA_CERTS /etc/ssl/certs/ca-certificates.crt)
fi
inroot "$tmp/rootfs" "${extra[@]}" \
  /bin/sh -ec "/usr/local/lib/harnessfacts/install-agent-clis.sh --only $clis /opt/harnessfacts/agents >/dev/null &&
    ln -s /opt/harnessfacts/agents/bin/* /usr/local/bin/ &&
    npm cache clean --force 2>/dev/null && rm -rf /root/.cache /root/.npm"
rm -rf "$dir"
mkdir -p "$dir"
mv "$tmp/rootfs" "$dir/rootfs"
touch "$dir/.complete"
echo "$dir/rootfs"
