package executor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Links an agent leaves in the workspace to what only the checks have
// (the verifier part, a check's descriptors) are found; the links honest
// work leaves (a virtualenv's interpreter, links inside the workspace,
// into the agent's own home, dangling ones) are not.
func TestLinksOutOfTheWorkspaceAreFound(t *testing.T) {
	run := t.TempDir()
	ws := filepath.Join(run, "workspace")
	for _, d := range []string{"workspace/sub", "fixture/tests", "home/.cache", "tmp", "check-0/verifier"} {
		if err := os.MkdirAll(filepath.Join(run, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(run, "fixture/tests/expected.txt"), []byte("42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused := map[string]string{
		"answer.txt":     "../fixture/tests/expected.txt",
		"sub/abs.txt":    filepath.Join(run, "fixture/tests/expected.txt"),
		"via-root.txt":   "rootlink" + filepath.Join(run, "fixture/tests/expected.txt"),
		"fd3.txt":        "/dev/fd/3",
		"proc.txt":       "/proc/self/fd/3",
		"stdin.txt":      "/dev/stdin",
		"tests":          "../fixture/tests",
		"into-tests.txt": "tests/expected.txt",
		"rundir":         "..",
		"reward":         "../check-0/verifier",
		"dotdot.txt":     "sub/../../fixture/tests/expected.txt",
	}
	allowed := map[string]string{
		"rootlink":          "/",
		"python3":           "/usr/bin/python3",
		"inside.txt":        "sub",
		"sub/up.txt":        "../python3",
		"cache":             "../home/.cache",
		"scratch":           filepath.Join(run, "tmp"),
		"dangling":          "/nonexistent/answer.txt",
		"null":              "/dev/null",
		"loop":              "loop",
		"missing-in-ws.txt": "sub/none/../x",
	}
	for name, to := range refused {
		if err := os.Symlink(to, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	for name, to := range allowed {
		if err := os.Symlink(to, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	allow := []string{filepath.Join(run, "home"), filepath.Join(run, "tmp")}
	for name := range refused {
		p := filepath.Join(ws, name)
		if _, why := resolveAsCheck(p, run, ws, allow); why == "" {
			t.Errorf("%s -> %s: not found", name, refused[name])
		}
	}
	for name := range allowed {
		p := filepath.Join(ws, name)
		if to, why := resolveAsCheck(p, run, ws, allow); why != "" {
			t.Errorf("%s -> %s: refused as %s (%s)", name, allowed[name], to, why)
		}
	}
	found, n, err := linksOutOfReach(run, ws, allow)
	if err != nil || n != len(refused) || len(found) != maxLinksNamed {
		t.Fatalf("linksOutOfReach: %d found, %d named, err %v; want %d, %d", n, len(found), err, len(refused), maxLinksNamed)
	}
	if err := refuseLinksOutOfReach(run, ws, allow); err == nil || !strings.Contains(err.Error(), "more") {
		t.Errorf("refusal: %v", err)
	}
	// The run dir behind a link of the node is judged where it leads.
	alias := filepath.Join(t.TempDir(), "runs")
	if err := os.Symlink(run, alias); err != nil {
		t.Fatal(err)
	}
	if _, n, _ := linksOutOfReach(alias, filepath.Join(alias, "workspace"), nil); n < len(refused) {
		t.Errorf("through a linked run dir: %d found, want at least %d", n, len(refused))
	}
	empty := t.TempDir()
	if err := refuseLinksOutOfReach(filepath.Dir(empty), empty, nil); err != nil {
		t.Errorf("a workspace without links: %v", err)
	}
}
