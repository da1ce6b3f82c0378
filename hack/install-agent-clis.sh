#!/usr/bin/env bash
# Installs the agent CLIs HarnessFacts drives, at pinned versions, into PREFIX:
#
#   PREFIX/<cli>-<version>/   one directory per CLI and version (npm global
#                             prefix, or a Python venv for Aider), reused as it
#                             is once its .complete stamp exists
#   PREFIX/bin/<command>      a link to the pinned version's command
#
# and prints PREFIX/bin. The node-agent image (Dockerfile) and CI run this same
# script, so a green CI shows that the image's install step works. Bumping a
# version below installs the new one beside the old; nothing is downloaded for
# a version already complete.
#
#   hack/install-agent-clis.sh [--only claude-code,codex,...] PREFIX
#
# Needs npm with Node.js >= 20 (Gemini CLI's minimum) for the npm CLIs and
# Python 3.10-3.12 (aider-chat's range) for Aider: PYTHON picks the
# interpreter, else the first of python3.12, python3.11, python3.10, python3
# that fits. Versions are those checked in shared AGENT-CLIS.md; re-check the
# flags there when you bump one.
set -euo pipefail

# name  kind  package                    version   command
clis=(
  "claude-code npm @anthropic-ai/claude-code 2.1.197 claude"
  "codex       npm @openai/codex             0.171.0 codex"
  "gemini      npm @google/gemini-cli        0.61.0  gemini"
  "opencode    npm opencode-ai               1.18.33 opencode"
  "aider       pip aider-chat                0.86.2  aider"
)

usage() { echo "usage: $0 [--only NAME[,NAME...]] PREFIX   (names: claude-code codex gemini opencode aider)" >&2; exit 2; }
die() { echo "install-agent-clis: $*" >&2; exit 1; }

only=""
while [ $# -gt 0 ]; do
  case $1 in
    --only) [ $# -ge 2 ] || usage; only=$2; shift 2 ;;
    --only=*) only=${1#--only=}; shift ;;
    -h|--help) usage ;;
    -*) usage ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || usage
prefix=$1

selected=()
for row in "${clis[@]}"; do
  read -r name _ <<<"$row"
  if [ -z "$only" ] || [[ ",$only," == *",$name,"* ]]; then selected+=("$row"); fi
done
if [ -n "$only" ]; then
  IFS=, read -r -a wanted <<<"$only"
  for w in "${wanted[@]}"; do
    printf '%s\n' "${clis[@]}" | awk '{print $1}' | grep -qx -- "$w" || die "unknown CLI '$w' (names: claude-code codex gemini opencode aider)"
  done
fi

mkdir -p "$prefix/bin"
prefix=$(cd "$prefix" && pwd)
# One installer at a time per prefix: a second caller (a parallel CI step)
# waits and then finds the versions already complete.
exec 9>"$prefix/.lock"
flock 9

need_node() {
  command -v npm >/dev/null 2>&1 || die "npm is not installed (Debian: apt-get install nodejs npm)"
  local major
  major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null) || die "node is not installed (Debian: apt-get install nodejs)"
  [ "$major" -ge 20 ] || die "Node.js $(node --version) is too old: Gemini CLI needs >= 20"
}

# python_for_aider prefers the system's interpreters: a venv links to its
# interpreter, which bwrap, running as the agent's uid, must reach (a pyenv
# under a private /root is not reachable).
python_for_aider() {
  local c
  for c in ${PYTHON:-/usr/bin/python3.12 /usr/bin/python3.11 /usr/bin/python3.10 python3.12 python3.11 python3.10 python3}; do
    command -v "$c" >/dev/null 2>&1 || continue
    if "$c" -c 'import sys, venv; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 12) else 1)' 2>/dev/null; then
      echo "$c"; return 0
    fi
  done
  die "aider-chat needs Python 3.10-3.12 with venv; set PYTHON to one (found: $(python3 --version 2>&1 || echo none))"
}

# check_version runs the installed command and insists that it reports the
# pinned version: a registry that served something else, or a launcher whose
# native binary did not install, fails here rather than at the first run.
check_version() {
  local cmd=$1 version=$2 out home
  home=$(mktemp -d)
  # A scratch HOME: the CLIs may write config or caches on first start.
  out=$(cd "$home" && HOME=$home XDG_CONFIG_HOME=$home/.config XDG_DATA_HOME=$home/.local/share XDG_CACHE_HOME=$home/.cache \
    DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 OPENCODE_DISABLE_AUTOUPDATE=1 LITELLM_LOCAL_MODEL_COST_MAP=True \
    timeout 120 "$cmd" --version </dev/null 2>&1) || { rm -rf "$home"; die "$cmd --version failed: $out"; }
  rm -rf "$home"
  [[ $out == *"$version"* ]] || die "$cmd --version printed '$out', not the pinned $version"
  echo "install-agent-clis: $(basename "$cmd") $version ok" >&2
}

for row in "${selected[@]}"; do
  read -r name kind pkg version cmd <<<"$row"
  dir="$prefix/$name-$version"
  if [ ! -f "$dir/.complete" ]; then
    # A directory without the stamp is what an interrupted install left.
    rm -rf "$dir"
    echo "install-agent-clis: installing $pkg@$version into $dir" >&2
    case $kind in
      npm)
        need_node
        # Scripts and optional dependencies stay on: Claude Code's
        # postinstall copies its native binary from an optional dependency,
        # and Codex and OpenCode ship theirs the same way.
        npm install --global --prefix "$dir" --no-audit --no-fund --loglevel=error "$pkg@$version" >&2
        ;;
      pip)
        py=$(python_for_aider)
        "$py" -m venv "$dir"
        "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "$pkg==$version" >&2
        ;;
    esac
    [ -x "$dir/bin/$cmd" ] || die "$pkg@$version installed no $dir/bin/$cmd"
    check_version "$dir/bin/$cmd" "$version"
    touch "$dir/.complete"
  fi
  ln -sfn "../$name-$version/bin/$cmd" "$prefix/bin/$cmd"
done
echo "$prefix/bin"
