package cloexec

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// inherited makes a descriptor as a process inherits one: without
// close-on-exec (dup(2) does not set it), at a number above 3.
func inherited(t *testing.T) int {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	fd, err := unix.Dup(int(w.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if !cloexecCleared(t, fd) {
		t.Fatalf("dup'ed descriptor %d has close-on-exec already: the test proves nothing", fd)
	}
	return fd
}

func cloexecCleared(t *testing.T, fd int) bool {
	t.Helper()
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		t.Fatal(err)
	}
	return flags&unix.FD_CLOEXEC == 0
}

func TestInheritedMarksCloseOnExec(t *testing.T) {
	fd := inherited(t)
	if err := Inherited(); err != nil {
		t.Fatal(err)
	}
	if cloexecCleared(t, fd) {
		t.Fatalf("descriptor %d would still pass to children", fd)
	}
	// Standard input, output and error stay inheritable.
	for _, std := range []int{0, 1, 2} {
		if flags, err := unix.FcntlInt(uintptr(std), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC != 0 {
			t.Errorf("descriptor %d was marked too", std)
		}
	}
}

// The way for kernels without CLOSE_RANGE_CLOEXEC does the same.
func TestMarkEachMarksCloseOnExec(t *testing.T) {
	fd := inherited(t)
	if err := markEach(); err != nil {
		t.Fatal(err)
	}
	if cloexecCleared(t, fd) {
		t.Fatalf("descriptor %d would still pass to children", fd)
	}
}
