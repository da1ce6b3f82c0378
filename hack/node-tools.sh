#!/usr/bin/env bash
# Builds what a real single-node cluster needs beyond the control plane
# (hack/control-plane.sh), from the Go module proxy at the versions pinned in
# hack/tools/*/go.mod, into a cache outside the clone keyed by those versions,
# and prints that directory:
#
#   kubelet, kube-scheduler, kube-controller-manager  the control plane's Kubernetes version (hack/tools/k8s)
#   containerd, ctr, containerd-shim-runc-v2          containerd 2.x, static (hack/tools/containerd)
#   runc                                              cgo with libseccomp (hack/tools/runc)
#
# The CNI plugins come from Debian's containernetworking-plugins
# (hack/node.sh installs it). A complete cache is reused as it is.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
modver() { awk -v m="$2" '$1 == "require" && $2 == m {print $3}' "$here/tools/$1/go.mod"; }
k8s_version=$(modver k8s k8s.io/kubernetes)
containerd_version=$(modver containerd github.com/containerd/containerd/v2)
runc_version=$(modver runc github.com/opencontainers/runc)
[ -n "$k8s_version" ] && [ -n "$containerd_version" ] && [ -n "$runc_version" ] ||
  { echo "node-tools: cannot read the pinned versions from hack/tools" >&2; exit 1; }

root=${HARNESSFACTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/harnessfacts}
dir="$root/node/k8s-$k8s_version-containerd-$containerd_version-runc-$runc_version"
stamp="$dir/.complete"
if [ -f "$stamp" ]; then
  echo "$dir"
  exit 0
fi

mkdir -p "$root/node"
exec 9>"$root/node/.lock"
flock 9
if [ -f "$stamp" ]; then
  echo "$dir"
  exit 0
fi

# runc needs cgo and libseccomp's headers.
if ! dpkg -s libseccomp-dev >/dev/null 2>&1; then
  echo "node-tools: installing Debian's libseccomp-dev (runc's seccomp support)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev >/dev/null
fi

tmp=$(mktemp -d "$root/node/.build-XXXXXX")
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
echo "node-tools: building runc $runc_version, containerd $containerd_version, kubelet, kube-scheduler and kube-controller-manager $k8s_version into $dir (minutes on a cold cache)" >&2

(cd "$here/tools/runc" && CGO_ENABLED=1 go build -mod=readonly -trimpath -tags seccomp \
  -ldflags "-s -w -X main.version=${runc_version#v}" -o "$tmp/runc" github.com/opencontainers/runc)

ctrd_ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version"
for cmd in containerd ctr containerd-shim-runc-v2; do
  (cd "$here/tools/containerd" && CGO_ENABLED=0 go build -mod=readonly -trimpath -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags "$ctrd_ldflags" -o "$tmp/$cmd" "github.com/containerd/containerd/v2/cmd/$cmd")
done

# The Kubernetes commands share most packages with kube-apiserver: build them
# after the control plane, so a parallel control-plane build is waited for
# and its compiled packages are reused.
"$here/control-plane.sh" >/dev/null
minor=${k8s_version#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
for cmd in kubelet kube-scheduler kube-controller-manager; do
  (cd "$here/tools/k8s" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp/$cmd" "k8s.io/kubernetes/cmd/$cmd")
done

"$tmp/runc" --version >&2
"$tmp/containerd" --version >&2
"$tmp/kubelet" --version >&2
touch "$tmp/.complete"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir"
