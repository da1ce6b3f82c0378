package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSweepTempRemovesWhatAGoneMakerLeft: a process killed during its
// preflight left its run dir and its sandbox's /dev (a tmpfs mounted on it)
// in the temporary folder, and nothing removed them. The next preflight
// removes those of makers that are gone, mounts first, and leaves a live
// maker's alone.
func TestSweepTempRemovesWhatAGoneMakerLeft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounts a tmpfs")
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	self, ok := selfOwner()
	if !ok {
		t.Skip("this process's start time cannot be read")
	}
	gone := filepath.Join(tmp, fmt.Sprintf("harnessfacts-dev-%d-%d-123", self.pid, self.start+1))
	goneRun := filepath.Join(tmp, fmt.Sprintf("harnessfacts-preflight-%d-%d-456", self.pid, self.start+1))
	for _, d := range []string{gone, goneRun} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("tmpfs", gone, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(gone, unix.MNT_DETACH) })
	live, err := ownedTempDir("", "harnessfacts-dev-")
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(tmp, "harnessfacts-dev-made-by-an-older-version")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	removed := sweepTemp()
	slices.Sort(removed)
	if want := []string{gone, goneRun}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	if len(mountsUnder(gone)) != 0 {
		t.Error("the gone maker's tmpfs is still mounted")
	}
	for _, d := range []string{live, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
}
