package executor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/harnessfacts/harnessfacts/sandbox"
)

// openToDigest opens the file p names (its links followed) to digest it:
// first without reading it (O_PATH, which neither waits on a FIFO nor
// opens a device), and reads it only when it is a regular file that ok
// accepts, given where it is now (its path resolved, from its descriptor)
// and what it is. The read is of that same file, opened again through its
// descriptor, whatever replaced a folder or link of p meanwhile: checking
// p and then opening p again read a file no check had seen (a FIFO, or a
// link to one only root reads, swapped in by a user who owns a folder on
// its way). key names the file's version for the cache of digests: its
// device, inode and change time, which no user sets.
func openToDigest(p string, ok func(resolved string, info os.FileInfo) bool) (f *os.File, info os.FileInfo, key string, err error) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, "", err
	}
	pf := os.NewFile(uintptr(fd), p)
	defer func() { _ = pf.Close() }()
	if info, err = pf.Stat(); err != nil {
		return nil, nil, "", err
	}
	if !info.Mode().IsRegular() {
		return nil, nil, "", errors.New("not a regular file")
	}
	self := "/proc/self/fd/" + strconv.Itoa(fd)
	resolved, err := os.Readlink(self)
	if err != nil || !filepath.IsAbs(resolved) || !ok(resolved, info) {
		return nil, nil, "", errors.New("not a file to digest")
	}
	if f, err = os.OpenFile(self, os.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK, 0); err != nil {
		return nil, nil, "", err
	}
	again, err := f.Stat()
	if err != nil || !os.SameFile(info, again) {
		_ = f.Close()
		return nil, nil, "", errors.New("the file changed as it was opened")
	}
	st, _ := info.Sys().(*syscall.Stat_t)
	if st == nil {
		_ = f.Close()
		return nil, nil, "", errors.New("no file status")
	}
	key = fmt.Sprintf("%s\x00%d\x00%d\x00%d\x00%d.%d\x00%d", resolved, st.Dev, st.Ino, info.Size(), st.Ctim.Sec, st.Ctim.Nsec, info.ModTime().UnixNano())
	return f, info, key, nil
}

// sandboxMasks are the node's folders every sandbox covers with an empty
// tmpfs, whatever its Spec binds below them.
func sandboxMasks() []string {
	return slices.Concat(sandbox.SocketDirs, sandbox.NodeDirs)
}
