//go:build unix

package executor

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunRootAnotherUserCouldReplaceIsRefused: a link another user left
// where a run root's path leads (the local run's default is in the
// temporary folder) had the executor make its target 0711 and run there;
// a folder of another user's, or one above the run root anyone may write
// to without the sticky bit, would let them move the runs' folders. Each
// is refused before anything is made or changed; the run root's own
// folders, and the temporary folder's sticky kind above it, are not.
func TestRunRootAnotherUserCouldReplaceIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make a folder and a link of another user's")
	}
	const nobody = 65534
	// Short: a run root's sockets' paths must fit the kernel's 107 bytes.
	base, err := os.MkdirTemp("", "hf-rr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	_ = os.Chmod(base, 0o755)
	target := filepath.Join(base, "target")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	theirLink := filepath.Join(base, "their-link")
	if err := os.Symlink(target, theirLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(theirLink, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(base, "theirs")
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	sticky := filepath.Join(base, "sticky")
	if err := os.Mkdir(sticky, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	ownLink := filepath.Join(base, "own-link")
	if err := os.Symlink(target, ownLink); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ root, want string }{
		{theirLink, "belongs to uid 65534"},
		{filepath.Join(theirLink, "runs"), "belongs to uid 65534"},
		{theirs, "belongs to uid 65534"},
		{filepath.Join(theirs, "runs"), "belongs to uid 65534"},
		{filepath.Join(open, "runs"), "may be written by anyone"},
		{filepath.Join(sticky, "runs"), ""},
		{filepath.Join(ownLink, "runs"), ""},
	} {
		e, err := New(Options{Sources: inlineSources{}, RunRoot: c.root, InitBinary: "/bin/true"})
		if err == nil {
			_ = e.Close()
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.root, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error saying %q", c.root, err, c.want)
		}
	}
	if info, err := os.Stat(target); err != nil || info.Mode().Perm() != 0o755 {
		t.Errorf("the other user's link's target: %v, %v (made 0711 through their link?)", info.Mode().Perm(), err)
	}
	if out, err := exec.Command("ls", "-A", target).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "runs" {
		// own-link/runs made "runs" in target; nothing else may be there.
		t.Errorf("in the link's target: %q, %v", out, err)
	}
}
