#!/usr/bin/env bash
# Builds (or reuses) Helm at a pinned version from the Go module proxy into a
# cache outside the clone, keyed by version, and prints the path of the helm
# binary. Prebuilt downloads do not work on our machines, so the first build
# takes a couple of minutes; afterwards the cached binary is reused as it is.
#
#   helm=$(hack/helm.sh) && "$helm" lint charts/harnessfacts
set -euo pipefail

# Helm 4 is the maintained major version; the chart (apiVersion v2) also
# renders with Helm 3.
version=${HELM_VERSION:-v4.3.1}
root=${HARNESSFACTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/harnessfacts}
dir="$root/tools/helm-$version"
bin="$dir/helm"

if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$root/tools"
# One builder at a time: parallel test packages or CI steps wait for the
# first and then reuse its result.
exec 9>"$root/tools/.helm-$version.lock"
flock 9
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

case $version in
  v3.*) module=helm.sh/helm/v3 ;;
  v4.*) module=helm.sh/helm/v4 ;;
  *) echo "helm.sh: unsupported HELM_VERSION $version" >&2; exit 1 ;;
esac

tmp=$(mktemp -d "$root/tools/.helm-build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "helm.sh: building $module/cmd/helm@$version into $dir (a few minutes on a cold cache)" >&2
# -X sets what `helm version` prints; GOFLAGS=-mod=mod keeps the caller's
# module settings (e.g. a vendor directory) out of this build.
(cd "$tmp" && GOBIN="$tmp/bin" GOFLAGS=-mod=mod CGO_ENABLED=0 \
  go install -trimpath -ldflags "-s -w -X $module/internal/version.version=$version" "$module/cmd/helm@$version")
"$tmp/bin/helm" version >&2
mkdir -p "$dir"
mv "$tmp/bin/helm" "$bin"
echo "$bin"
