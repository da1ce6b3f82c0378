//go:build unix

package executor

import (
	"io/fs"
	"os"
	"syscall"
)

// sameOwner gives f the owner of st.
func sameOwner(f *os.File, st fs.FileInfo) error {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return f.Chown(int(s.Uid), int(s.Gid))
	}
	return nil
}
