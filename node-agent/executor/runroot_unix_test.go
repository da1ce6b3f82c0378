//go:build unix

package executor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunRootAnotherUserCouldReplaceIsRefused: a link another user left
// where a run root's path leads (the local run's default is in the
// temporary folder) had New make its target 0711 and run there. It is
// refused before anything is made or changed (internal/trustedpath's
// TestCheck has the other cases); a run root below a sticky folder, the
// temporary folder's kind, is not.
func TestRunRootAnotherUserCouldReplaceIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make a link of another user's")
	}
	// Short: a run root's sockets' paths must fit the kernel's 107 bytes.
	base, err := os.MkdirTemp("", "hf-rr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil { // the sandbox's uid passes through it
		t.Fatal(err)
	}
	target := filepath.Join(base, "target")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	theirLink := filepath.Join(base, "link")
	if err := os.Symlink(target, theirLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(theirLink, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Sources: inlineSources{}, RunRoot: theirLink, InitBinary: "/bin/true"}); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("a run root at another user's link: %v", err)
	}
	if info, err := os.Stat(target); err != nil {
		t.Errorf("the link's target: %v", err)
	} else if info.Mode().Perm() != 0o755 {
		t.Errorf("the link's target is %v, was 0755 (made 0711 through the link?)", info.Mode().Perm())
	}
	if entries, _ := os.ReadDir(target); len(entries) != 0 {
		t.Errorf("made in the link's target: %v", entries)
	}
	sticky := filepath.Join(base, "sticky")
	if err := os.Mkdir(sticky, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	e, err := New(Options{Sources: inlineSources{}, RunRoot: filepath.Join(sticky, "runs"), InitBinary: "/bin/true"})
	if err != nil {
		t.Fatalf("a run root below a sticky folder: %v", err)
	}
	_ = e.Close()
}
