package sandbox

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPrepareWritableNeverFollowsASwappedFolder: a process of the agent's
// left running (the plain fallback cannot stop one that called setsid)
// swaps a folder of the workspace with a link to a folder outside, over
// and over, while root makes the workspace the run's uid's before each
// command. Walking by path, one listing's file was chowned through the
// swapped-in link: root's file outside became the run's uid's within a
// few hundred tries. By descriptors, nothing outside is ever changed, and
// what is inside still becomes the uid's.
func TestPrepareWritableNeverFollowsASwappedFolder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("prepareWritable changes owners only as root")
	}
	base := t.TempDir()
	outside, ws := filepath.Join(base, "outside"), filepath.Join(base, "workspace")
	for _, d := range []string{outside, filepath.Join(ws, "d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(outside, "shadow")
	if err := os.WriteFile(secret, []byte("root:secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const uid, gid = 65534, 65534
	if err := os.WriteFile(filepath.Join(ws, "d", "shadow"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "e")); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			_ = unix.Renameat2(unix.AT_FDCWD, filepath.Join(ws, "d"), unix.AT_FDCWD, filepath.Join(ws, "e"), unix.RENAME_EXCHANGE)
		}
	}()
	defer func() { stop.Store(true); <-done }()
	for i := range 3000 {
		if err := prepareWritable([]string{ws}, uid, gid); err != nil {
			t.Fatalf("try %d: %v", i, err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(secret, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 0 {
			t.Fatalf("after %d tries, %s outside the workspace is owned by uid %d", i+1, secret, st.Uid)
		}
		// The decoy inside goes back to root, to be given again.
		for _, d := range []string{"d", "e"} {
			_ = os.Lchown(filepath.Join(ws, d, "shadow"), 0, 0)
		}
	}
	stop.Store(true)
	<-done
	// Not racing, the workspace is the uid's, but the link's target.
	if err := prepareWritable([]string{ws}, uid, gid); err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(ws, "d", "shadow")
	if fi, err := os.Lstat(filepath.Join(ws, "d")); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		inside = filepath.Join(ws, "e", "shadow")
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(inside, &st); err != nil || st.Uid != uid {
		t.Errorf("%s inside the workspace: uid %d (%v), want %d", inside, st.Uid, err, uid)
	}
	if err := syscall.Stat(secret, &st); err != nil || st.Uid != 0 {
		t.Errorf("%s outside: uid %d (%v), want root's", secret, st.Uid, err)
	}
}
