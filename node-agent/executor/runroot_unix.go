//go:build unix

package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// trustedRunRoot refuses a run root that another user could move or
// replace: a component of its path (or of where its links lead) that
// belongs to a user other than this process's or root, or a folder above
// it that anyone may write to without the sticky bit (the temporary
// folder has it). The run root holds every run's folders and credential
// copies, and this process (root, on a node or in `harnessfacts run`)
// changes them by path: a link another user left where the run root's
// default path leads (/tmp/harnessfacts-runs) had it make the link's
// target 0711 and use it. Components that do not exist yet are not
// judged; they are made after, by this process.
func trustedRunRoot(root string) error {
	abs, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	if err := trustedPath(abs); err != nil {
		return err
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if resolved == abs {
		return nil
	}
	return trustedPath(resolved)
}

// trustedPath judges each existing component of the absolute path p, from
// the root folder down, as trustedRunRoot says.
func trustedPath(p string) error {
	euid := uint32(os.Geteuid())
	var parts []string
	for q := p; ; q = filepath.Dir(q) {
		parts = append(parts, q)
		if q == filepath.Dir(q) {
			break
		}
	}
	for i := len(parts) - 1; i >= 0; i-- {
		q := parts[i]
		info, err := os.Lstat(q)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			continue
		}
		if st.Uid != euid && st.Uid != 0 {
			return fmt.Errorf("%s belongs to uid %d, neither this process's user (uid %d) nor root: that user could move or replace the runs' folders in the run root %s; choose another run root", q, st.Uid, euid, p)
		}
		if i > 0 && info.IsDir() && info.Mode().Perm()&0o002 != 0 && info.Mode()&fs.ModeSticky == 0 {
			return fmt.Errorf("%s may be written by anyone (mode %v, not sticky): anyone could move or replace what is in it, the run root %s among it; choose another run root", q, info.Mode().Perm(), p)
		}
	}
	return nil
}
