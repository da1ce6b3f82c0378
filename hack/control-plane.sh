#!/usr/bin/env bash
# Builds the control plane the tests run against — kube-apiserver, etcd and
# kubectl — from the Go module proxy at the versions pinned in hack/tools/*/go.mod,
# into a cache outside the clone keyed by those versions, and prints that
# directory (use it as KUBEBUILDER_ASSETS). A cache that is already complete is
# reused as it is; prebuilt downloads cannot work on our machines, so a cold
# build takes several minutes on two cores.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
k8s_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/tools/k8s/go.mod")
etcd_version=$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" {print $3}' "$here/tools/etcd/go.mod")
[ -n "$k8s_version" ] && [ -n "$etcd_version" ] || { echo "control-plane: cannot read the pinned versions from hack/tools" >&2; exit 1; }

root=${HARNESSFACTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/harnessfacts}
dir="$root/k8s/$k8s_version-etcd-$etcd_version"
stamp="$dir/.complete"

if [ -f "$stamp" ]; then
  echo "$dir"
  exit 0
fi

mkdir -p "$root/k8s"
# One builder at a time: a second caller (another make target, a parallel CI
# step) waits for the first and then reuses its result.
exec 9>"$root/k8s/.lock"
flock 9
if [ -f "$stamp" ]; then
  echo "$dir"
  exit 0
fi

tmp=$(mktemp -d "$root/k8s/.build-XXXXXX")
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT

minor=${k8s_version#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

echo "control-plane: building kube-apiserver and kubectl $k8s_version, etcd $etcd_version into $dir (minutes on a cold cache)" >&2
(cd "$here/tools/k8s" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
(cd "$here/tools/k8s" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp/kubectl" k8s.io/kubernetes/cmd/kubectl)
(cd "$here/tools/etcd" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3)

"$tmp/kube-apiserver" --version >&2
"$tmp/etcd" --version | head -1 >&2
touch "$tmp/.complete"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir"
