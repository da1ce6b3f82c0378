package executor

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// deepFolder makes, below the folder dirfd opens, 16 folders of 200
// characters each (about 3.2 KB: with any run root above it, deeper than
// PATH_MAX from /), step by step as an agent's shell does with cd, and
// returns the deepest one open and the path to it from dirfd.
func deepFolder(t *testing.T, dirfd int) (int, string) {
	t.Helper()
	comp := strings.Repeat("d", 200)
	fd, rel := dirfd, []string{}
	for range 16 {
		if err := unix.Mkdirat(fd, comp, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, comp, unix.O_DIRECTORY|unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if fd != dirfd {
			_ = unix.Close(fd)
		}
		fd, rel = next, append(rel, comp)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	return fd, strings.Join(rel, "/")
}

// TestLinksThroughFoldersDeeperThanPathMaxAreRefused: a link whose way
// goes through folders deeper than PATH_MAX from / cannot be followed by
// path from the root (ENAMETOOLONG), yet a check's kernel follows it
// from the workspace, each link's text well under PATH_MAX. The scan
// took what it could not follow for missing, and an agent that never saw
// the expected answer passed `cmp answer.txt $HARNESSFACTS_TESTS/expected.txt`
// through answer.txt -> deep/y, y -> deeper/x, x -> the verifier's file.
// Not judged is now refused, and so is a folder the walk cannot enter.
func TestLinksThroughFoldersDeeperThanPathMaxAreRefused(t *testing.T) {
	newRun := func(t *testing.T) (run, ws, expected string, wsfd int) {
		run = t.TempDir()
		ws = filepath.Join(run, "workspace")
		for _, d := range []string{"workspace", "fixture/tests", "home", "tmp"} {
			if err := os.MkdirAll(filepath.Join(run, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		expected = filepath.Join(run, "fixture/tests/expected.txt")
		if err := os.WriteFile(expected, []byte("the hidden answer\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(ws, unix.O_DIRECTORY|unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Close(fd) })
		return run, ws, expected, fd
	}
	allowed := func(run string) []string { return []string{filepath.Join(run, "home"), filepath.Join(run, "tmp")} }

	t.Run("a chain of links through them", func(t *testing.T) {
		run, ws, expected, wsfd := newRun(t)
		fd2, rel := deepFolder(t, wsfd)
		if err := unix.Symlinkat(rel+"/y", wsfd, "answer.txt"); err != nil {
			t.Fatal(err)
		}
		fd3, rel := deepFolder(t, fd2)
		if err := unix.Symlinkat(rel+"/x", fd2, "y"); err != nil {
			t.Fatal(err)
		}
		if err := unix.Symlinkat(expected, fd3, "x"); err != nil {
			t.Fatal(err)
		}
		// What the check would do: the kernel follows the chain.
		cmd := exec.Command("cmp", "answer.txt", expected)
		cmd.Dir = ws
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the chain does not lead to the verifier's file, the test shows nothing: %v %s", err, out)
		}
		// The link itself, as a check would follow it: not judged.
		if _, why := resolveAsCheck(filepath.Join(ws, "answer.txt"), run, ws, allowed(run)); !strings.Contains(why, "could not follow") {
			t.Errorf("answer.txt was judged harmless (%q)", why)
		}
		// The scan (whose walk cannot enter the deepest folder either).
		if err := refuseLinksOutOfReach(run, ws, allowed(run)); err == nil {
			t.Fatal("the chain was not refused")
		}
	})
	t.Run("a link in a folder the walk cannot enter", func(t *testing.T) {
		run, ws, expected, wsfd := newRun(t)
		fd, _ := deepFolder(t, wsfd)
		fd, _ = deepFolder(t, fd)
		if err := unix.Symlinkat(expected, fd, "answer.txt"); err != nil {
			t.Fatal(err)
		}
		err := refuseLinksOutOfReach(run, ws, allowed(run))
		if err == nil || !strings.Contains(err.Error(), "could not be searched") {
			t.Fatalf("a link the walk never saw was not refused: %v", err)
		}
	})
	t.Run("deep folders without a link out are fine", func(t *testing.T) {
		run, ws, _, wsfd := newRun(t)
		fd, rel := deepFolder(t, wsfd)
		if err := unix.Symlinkat(rel, wsfd, "short"); err != nil {
			t.Fatal(err)
		}
		if err := unix.Symlinkat("../../other", fd, "inside"); err != nil {
			t.Fatal(err)
		}
		if err := refuseLinksOutOfReach(run, ws, allowed(run)); err != nil {
			t.Fatalf("links within reach were refused: %v", err)
		}
	})
}

// TestLinkScanWorkIsBounded: 40 links of 4 KiB of "a/../" each, chained,
// and thousands of links to the chain's start (hours of lstat(2) before
// each check, with the run dir's inodes) spend the scan's steps: the
// checks do not run, and the scan ends within its bound.
func TestLinkScanWorkIsBounded(t *testing.T) {
	run := t.TempDir()
	ws := filepath.Join(run, "workspace")
	if err := os.MkdirAll(filepath.Join(ws, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("a/../", 810)
	for i := 1; i <= maxLinkHops; i++ {
		next := fmt.Sprintf("c%02d", i+1)
		if i == maxLinkHops {
			next = "a"
		}
		if err := os.Symlink(body+next, filepath.Join(ws, fmt.Sprintf("c%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// Each costs some 32,000 steps: a few hundred spend them all.
	for i := range 400 {
		if err := os.Symlink("c01", filepath.Join(ws, fmt.Sprintf("x%06d", i))); err != nil {
			t.Fatal(err)
		}
	}
	err := refuseLinksOutOfReach(run, ws, nil)
	if err == nil || !strings.Contains(err.Error(), "steps to follow") {
		t.Fatalf("the scan did not stop at its bound: %v", err)
	}
}
