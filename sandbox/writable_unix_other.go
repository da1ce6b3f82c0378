//go:build unix && !linux

package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// prepareWritable (not Linux: paths, not descriptors; no sandbox runs
// here but the plain one, for development) makes the read-write paths owned by uid/gid so that the
// unprivileged user the command runs as can write them. It never follows a
// symbolic link, and it leaves files with more than one hard link alone: such
// a link could point at a file outside the run directory.
func prepareWritable(paths []string, uid, gid int) error {
	if os.Geteuid() != 0 {
		return nil
	}
	for _, root := range paths {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := os.Lstat(p)
			if err != nil {
				return err
			}
			st, ok := info.Sys().(*syscall.Stat_t)
			if !ok || (int(st.Uid) == uid && int(st.Gid) == gid) {
				return nil
			}
			if !info.IsDir() && st.Nlink > 1 {
				return nil
			}
			return os.Lchown(p, uid, gid)
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("sandbox: make %s writable for uid %d: %w", root, uid, err)
		}
	}
	return nil
}
