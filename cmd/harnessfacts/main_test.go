package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// TestLinksNoKubernetesClient: what harnessfacts leaves out is why it
// exists apart from harnessfacts-full. Each of these would come back with
// one import, and with them the pages every local run maps and initialises
// before its first line: client-go (its typed clientset and scheme register
// every API group at init), controller-runtime's client, cache and
// manager, the controller, the node's commands, kubectl's libraries.
func TestLinksNoKubernetesClient(t *testing.T) {
	deps := testenv.Forbid(t, "github.com/harnessfacts/harnessfacts/cmd/harnessfacts", []string{
		"k8s.io/client-go",
		"sigs.k8s.io/controller-runtime/pkg/client",
		"sigs.k8s.io/controller-runtime/pkg/cache",
		"sigs.k8s.io/controller-runtime/pkg/manager",
		"k8s.io/api/apps",
		"github.com/harnessfacts/harnessfacts/controllers",
		"github.com/harnessfacts/harnessfacts/internal/nodecmd",
		"github.com/harnessfacts/harnessfacts/internal/testing",
		"github.com/harnessfacts/harnessfacts/test/",
		"plugin",
		"sigs.k8s.io/kustomize",
	})
	if len(deps) > 900 {
		t.Errorf("harnessfacts links %d packages; it linked 826 when this test was written: see what came in with go list -deps", len(deps))
	}
}

// buildBoth builds harnessfacts and harnessfacts-full into a folder of
// the test's, side by side as make build puts them.
func buildBoth(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/harnessfacts/harnessfacts/cmd/harnessfacts", "github.com/harnessfacts/harnessfacts/cmd/harnessfacts-full")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

func TestServedHere(t *testing.T) {
	for _, tc := range []struct {
		args []string
		here bool
	}{
		{[]string{"run", "-f", "run.yaml"}, true},
		{[]string{"version"}, true},
		{nil, false},
		{[]string{"--help"}, false},
		{[]string{"help", "run"}, false},
		{[]string{"controller"}, false},
		{[]string{"get", "runs"}, false},
		{[]string{"evidence", "verify", "dir"}, false},
		{[]string{"sandbox-init", "--", "true"}, false},
		{[]string{"-f", "run.yaml", "run"}, false},
	} {
		if got := servedHere(tc.args); got != tc.here {
			t.Errorf("servedHere(%q) = %v, want %v", tc.args, got, tc.here)
		}
	}
}

// harnessfacts hands every command but run and version to the
// harnessfacts-full beside it, with its arguments, output and exit code;
// a link to harnessfacts finds the one beside the file it names; without
// harnessfacts-full beside it, it says so, and still serves run's help and
// version.
func TestHandsOverEveryOtherCommand(t *testing.T) {
	dir := buildBoth(t)
	front := filepath.Join(dir, "harnessfacts")
	type result struct {
		stdout, stderr string
		code           int
	}
	call := func(bin string, args ...string) result {
		cmd := exec.Command(bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		code := 0
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Fatalf("%s %q: %v", bin, args, err)
		}
		return result{stdout.String(), stderr.String(), code}
	}

	if r := call(front); r.code != 0 || !strings.Contains(r.stdout, "controller") || !strings.Contains(r.stdout, "run ") || !strings.Contains(r.stdout, "harnessfacts [command]") {
		t.Errorf("harnessfacts alone: %d, want harnessfacts-full's help (every command, run among them):\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := call(front, "get", "--help"); r.code != 0 || !strings.Contains(r.stdout, "harnessfacts get") {
		t.Errorf("harnessfacts get --help: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := call(front, "get", "--no-such-flag"); r.code != 1 || !strings.Contains(r.stderr, "unknown flag: --no-such-flag") {
		t.Errorf("harnessfacts get --no-such-flag: exit %d, want 1 with harnessfacts-full's complaint:\n%s%s", r.code, r.stdout, r.stderr)
	}
	v := call(front, "version")
	if v.code != 0 || strings.TrimSpace(v.stdout) == "" {
		t.Errorf("harnessfacts version: %d\n%s%s", v.code, v.stdout, v.stderr)
	}
	if r := call(filepath.Join(dir, "harnessfacts-full"), "version"); r.stdout != v.stdout {
		t.Errorf("harnessfacts-full version says %q, harnessfacts %q", r.stdout, v.stdout)
	}

	// A link elsewhere to harnessfacts (as an install into /usr/local/bin
	// may make) finds harnessfacts-full beside the file itself.
	linked := filepath.Join(t.TempDir(), "harnessfacts")
	if err := os.Symlink(front, linked); err != nil {
		t.Fatal(err)
	}
	if r := call(linked, "get", "--help"); r.code != 0 || !strings.Contains(r.stdout, "harnessfacts get") {
		t.Errorf("a link to harnessfacts, get --help: %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Alone.
	alone := filepath.Join(t.TempDir(), "harnessfacts")
	data, err := os.ReadFile(front)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if r := call(alone, "get", "runs"); r.code != 1 || !strings.Contains(r.stderr, "harnessfacts-full is not beside "+alone) {
		t.Errorf("harnessfacts get alone: exit %d, want 1 saying harnessfacts-full is missing:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := call(alone, "version"); r.code != 0 || r.stdout != v.stdout {
		t.Errorf("harnessfacts version alone: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := call(alone, "run", "--help"); r.code != 0 || !strings.Contains(r.stdout, "harnessfacts run") || !strings.Contains(r.stdout, "--fixtures") {
		t.Errorf("harnessfacts run --help alone: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
