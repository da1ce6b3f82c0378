#!/usr/bin/env bash
# Installs (or reuses) what `make bench` compares HarnessFacts with, into a
# cache outside the clone keyed by version, and prints the srt command's path:
# Anthropic's sandbox-runtime (`srt`, bubblewrap plus proxies) from npm, at
# the version issue #18 measured. The benchmarks look for it there (or at
# $HARNESSFACTS_SRT) and say so loudly when it is absent.
#
#   srt=$(hack/bench-deps.sh) && "$srt" true
set -euo pipefail

version=${SRT_VERSION:-0.0.83}
root=${HARNESSFACTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/harnessfacts}
dir="$root/tools/srt-$version"
bin="$dir/node_modules/.bin/srt"

# srt refuses to start without ripgrep and socat.
missing=()
command -v rg >/dev/null || missing+=(ripgrep)
command -v socat >/dev/null || missing+=(socat)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bench-deps.sh: installing Debian's ${missing[*]} (sandbox-runtime needs them)" >&2
    apt-get install -y --no-install-recommends "${missing[@]}" >&2 ||
      { apt-get update >&2 && apt-get install -y --no-install-recommends "${missing[@]}" >&2; }
  else
    echo "bench-deps.sh: sandbox-runtime needs ${missing[*]}: install them (as root: apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi

if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
command -v npm >/dev/null || { echo "bench-deps.sh: npm is needed to install sandbox-runtime (apt-get install npm)" >&2; exit 1; }
mkdir -p "$root/tools"
exec 9>"$root/tools/.srt-$version.lock"
flock 9
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
tmp=$(mktemp -d "$root/tools/.srt-install-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "bench-deps.sh: installing @anthropic-ai/sandbox-runtime@$version into $dir" >&2
npm install --prefix "$tmp" --no-audit --no-fund --no-save --no-package-lock --loglevel=error \
  "@anthropic-ai/sandbox-runtime@$version" >&2
got=$(node -p "require('$tmp/node_modules/@anthropic-ai/sandbox-runtime/package.json').version")
if [ "$got" != "$version" ]; then
  echo "bench-deps.sh: npm installed sandbox-runtime $got, not the pinned $version" >&2
  exit 1
fi
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$bin"
