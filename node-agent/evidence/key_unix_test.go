//go:build unix

package evidence

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKeyPathThatIsNoKeyFileIsRefusedAtOnce: what another user may leave at
// a key's path (harnessfacts dev's default is in the temporary folder) is
// refused, and nothing waits or reads without end: a FIFO, a link to a
// device, a file larger than any key.
func TestKeyPathThatIsNoKeyFileIsRefusedAtOnce(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.pem")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.pem")
	if err := os.WriteFile(big, make([]byte, maxKeyFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{fifo: "not a regular file", zero: "not a regular file", big: "larger than"} {
		done := make(chan error, 1)
		go func() { _, err := LoadOrCreateKey(path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want an error saying %q", filepath.Base(path), err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: LoadOrCreateKey still waiting after 10 s", filepath.Base(path))
		}
	}
}

// TestKeyIsNotMadeInAFolderOthersMayWrite: a key made where others may
// replace it would vouch for nothing; a sticky folder (the temporary
// folder's kind) keeps others from renaming or removing it, and is used.
func TestKeyIsNotMadeInAFolderOthersMayWrite(t *testing.T) {
	open := filepath.Join(t.TempDir(), "keys")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil { // the umask would drop it from Mkdir's mode
		t.Fatal(err)
	}
	path := filepath.Join(open, "evidence-key.pem")
	if _, err := LoadOrCreateKey(path); err == nil || !strings.Contains(err.Error(), "may be written by anyone") {
		t.Fatalf("a key made in a folder of mode 0777: %v", err)
	}
	if err := os.Chmod(open, 0o770); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path); err == nil || !strings.Contains(err.Error(), "may be written by its group") {
		t.Fatalf("a key made in a folder of mode 0770: %v", err)
	}
	if entries, _ := os.ReadDir(open); len(entries) != 0 {
		t.Errorf("left in the refused folder: %v", entries)
	}
	if err := os.Chmod(open, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path); err != nil {
		t.Fatalf("a key made in a sticky folder: %v", err)
	}
	if _, err := LoadOrCreateKey(path); err != nil {
		t.Fatalf("the key made in a sticky folder, read again: %v", err)
	}
}

// TestKeyOfAFolderAnotherUserOwnsIsRefused: another user who made the key's
// folder first (harnessfacts dev's is in the temporary folder) could put
// their own key in place of the one made there, or a link to another.
func TestKeyOfAFolderAnotherUserOwnsIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make a folder of another user's")
	}
	dir := filepath.Join(t.TempDir(), "keys")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "evidence-key.pem")
	if _, err := LoadOrCreateKey(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Fatalf("the key in a folder of uid 65534's: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Fatalf("a key made in a folder of uid 65534's: %v", err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("a key was made in the other user's folder")
	}
}
