package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The agent CLIs are hundreds of MB from npm and PyPI, so this test drives
// hack/install-agent-clis.sh with stand-ins for npm, node and python that
// lay out what the real ones do (an npm global prefix with bin/ links, a venv)
// and record each call. It checks what CI and the node-agent image rely on:
// every pinned CLI ends up on PREFIX/bin at its version, a complete version
// is never downloaded again, an interrupted one is redone, and a CLI that
// reports another version fails the install. The real registries are used
// when CI or the Dockerfile run the script.

const fakeNpm = `#!/usr/bin/env bash
echo "npm $*" >> "$FAKE_LOG"
prefix= spec=
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) prefix=$2; shift 2 ;;
    -*|install) shift ;;
    *) spec=$1; shift ;;
  esac
done
pkg=${spec%@*} ver=${spec##*@}
case $pkg in
  @anthropic-ai/claude-code) cmd=claude ;;
  @openai/codex) cmd=codex ;;
  @google/gemini-cli) cmd=gemini ;;
  opencode-ai) cmd=opencode ;;
  *) echo "npm: no such package $pkg" >&2; exit 1 ;;
esac
[ -n "${FAKE_WRONG_VERSION:-}" ] && ver=0.0.1
mkdir -p "$prefix/bin" "$prefix/lib/node_modules/$pkg"
printf '#!/bin/sh\necho "%s %s"\n' "$cmd" "$ver" > "$prefix/lib/node_modules/$pkg/cli"
chmod +x "$prefix/lib/node_modules/$pkg/cli"
ln -s "../lib/node_modules/$pkg/cli" "$prefix/bin/$cmd"
`

const fakeNode = `#!/bin/sh
echo "${FAKE_NODE_MAJOR:-20}"
`

// fakePython is python3.12 and, copied into a venv, that venv's python.
const fakePython = `#!/usr/bin/env bash
case "$1 $2" in
  "-c "*) exit 0 ;;
  "-m venv") mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; echo "python -m venv $3" >> "$FAKE_LOG" ;;
  "-m pip")
    spec=${@: -1}
    echo "pip $*" >> "$FAKE_LOG"
    venv=$(cd "$(dirname "$0")/.." && pwd)
    printf '#!/bin/sh\necho "aider %s"\n' "${spec#*==}" > "$venv/bin/aider"
    chmod +x "$venv/bin/aider" ;;
  *) echo "fake python: $*" >&2; exit 1 ;;
esac
`

type pinnedCLI struct{ name, kind, pkg, version, command string }

// pinned reads the pinned CLIs from the script itself.
func pinned(t *testing.T) []pinnedCLI {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "hack", "install-agent-clis.sh"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^\s+"(\S+)\s+(npm|pip)\s+(\S+)\s+(\S+)\s+(\S+)"$`)
	var out []pinnedCLI
	for _, m := range re.FindAllStringSubmatch(string(data), -1) {
		out = append(out, pinnedCLI{m[1], m[2], m[3], m[4], m[5]})
	}
	if len(out) != 5 {
		t.Fatalf("found %d pinned CLIs in hack/install-agent-clis.sh, want 5: %v", len(out), out)
	}
	return out
}

type fakeRegistries struct {
	dir, log string
	env      []string
}

func newFakeRegistries(t *testing.T) *fakeRegistries {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "fakebin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"npm": fakeNpm, "node": fakeNode, "python3.12": fakePython} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f := &fakeRegistries{dir: dir, log: filepath.Join(dir, "calls.log")}
	f.env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "FAKE_LOG="+f.log, "PYTHON=python3.12")
	return f
}

// install runs the script; extraEnv adds variables.
func (f *fakeRegistries) install(prefix string, extraEnv []string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(root, "hack", "install-agent-clis.sh"), append(args, prefix)...)
	cmd.Env = append(append([]string{}, f.env...), extraEnv...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (f *fakeRegistries) calls(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(f.log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

func TestInstallAgentCLIs(t *testing.T) {
	clis := pinned(t)
	f := newFakeRegistries(t)
	prefix := filepath.Join(f.dir, "agents")

	out, err := f.install(prefix, nil)
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	if last := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]); last != filepath.Join(prefix, "bin") {
		t.Errorf("the script's last line is %q, want the bin directory %s", last, filepath.Join(prefix, "bin"))
	}
	for _, c := range clis {
		got, err := exec.Command(filepath.Join(prefix, "bin", c.command), "--version").Output()
		if err != nil {
			t.Errorf("%s on PREFIX/bin: %v", c.command, err)
			continue
		}
		if !strings.Contains(string(got), c.version) {
			t.Errorf("%s --version = %q, want the pinned %s", c.command, got, c.version)
		}
		if _, err := os.Stat(filepath.Join(prefix, c.name+"-"+c.version, ".complete")); err != nil {
			t.Errorf("%s@%s is not stamped complete: %v", c.pkg, c.version, err)
		}
	}
	calls := f.calls(t)
	for _, c := range clis {
		want := c.pkg + "@" + c.version
		if c.kind == "pip" {
			want = c.pkg + "==" + c.version
		}
		n := 0
		for _, l := range calls {
			if strings.HasSuffix(l, " "+want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s was installed %d times, want once; calls:\n%s", want, n, strings.Join(calls, "\n"))
		}
	}

	t.Run("a complete version is reused", func(t *testing.T) {
		before := len(f.calls(t))
		if out, err := f.install(prefix, nil); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if after := f.calls(t); len(after) != before {
			t.Errorf("a second run downloaded again: %v", after[before:])
		}
	})

	t.Run("an interrupted install is redone", func(t *testing.T) {
		codex := clis[1]
		if err := os.Remove(filepath.Join(prefix, codex.name+"-"+codex.version, ".complete")); err != nil {
			t.Fatal(err)
		}
		before := len(f.calls(t))
		if out, err := f.install(prefix, nil, "--only", "codex"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		after := f.calls(t)[before:]
		if len(after) != 1 || !strings.HasSuffix(after[0], codex.pkg+"@"+codex.version) {
			t.Errorf("calls after removing codex's stamp: %v, want one install of codex", after)
		}
	})

	t.Run("a CLI reporting another version fails the install", func(t *testing.T) {
		p := filepath.Join(f.dir, "wrong")
		out, err := f.install(p, []string{"FAKE_WRONG_VERSION=1"}, "--only", "opencode")
		if err == nil || !strings.Contains(out, "not the pinned "+clis[3].version) {
			t.Errorf("err %v, output:\n%s\nwant a failure naming the pinned version", err, out)
		}
		if _, err := os.Stat(filepath.Join(p, clis[3].name+"-"+clis[3].version, ".complete")); err == nil {
			t.Error("the wrong version was stamped complete")
		}
		if _, err := os.Lstat(filepath.Join(p, "bin", "opencode")); err == nil {
			t.Error("the wrong version was linked into bin")
		}
	})

	t.Run("Node.js older than 20 is refused", func(t *testing.T) {
		out, err := f.install(filepath.Join(f.dir, "old-node"), []string{"FAKE_NODE_MAJOR=18"}, "--only", "gemini")
		if err == nil || !strings.Contains(out, "Gemini CLI needs >= 20") {
			t.Errorf("err %v, output:\n%s", err, out)
		}
	})

	t.Run("an unknown CLI name is refused", func(t *testing.T) {
		out, err := f.install(filepath.Join(f.dir, "unknown"), nil, "--only", "cursor")
		if err == nil || !strings.Contains(out, "unknown CLI 'cursor'") {
			t.Errorf("err %v, output:\n%s", err, out)
		}
	})
}
