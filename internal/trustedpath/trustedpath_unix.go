//go:build unix

// Package trustedpath says whether another user of the machine could move
// or replace what is at a path: the folders where this process keeps what
// only it may change (the runs' folders and credential copies, the
// evidence signing key), which sit at default paths another user may
// reach first (the temporary folder).
package trustedpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Check refuses p, said as what in its errors, when a component of its path
// (or of where its links lead) belongs to a user other than this process's
// or root, or a folder above it may be written by anyone without the
// sticky bit (the temporary folder has it): that user could move it or put
// a link in its place. Components that do not exist yet are not judged:
// the caller makes them after, and should check again once they exist.
func Check(p, what string) error {
	abs, err := filepath.Abs(p)
	if err != nil {
		return err
	}
	if err := checkPath(abs, what); err != nil {
		return err
	}
	// Where the links lead: the longest part of the path that exists,
	// resolved (what does not exist yet is made below it).
	for q := abs; ; q = filepath.Dir(q) {
		resolved, err := filepath.EvalSymlinks(q)
		switch {
		case err == nil && resolved == q:
			return nil
		case err == nil:
			return checkPath(resolved, what)
		case !errors.Is(err, fs.ErrNotExist):
			return err
		case q == filepath.Dir(q):
			return nil
		}
	}
}

// checkPath judges each existing component of the absolute path p, from
// the root folder down.
func checkPath(p, what string) error {
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
			return fmt.Errorf("%s belongs to uid %d, neither this process's user (uid %d) nor root: that user could move or replace %s %s", q, st.Uid, euid, what, p)
		}
		if i > 0 && info.IsDir() && info.Mode().Perm()&0o002 != 0 && info.Mode()&fs.ModeSticky == 0 {
			return fmt.Errorf("%s may be written by anyone (mode %v, not sticky): anyone could move or replace what is in it, %s %s among it", q, info.Mode().Perm(), what, p)
		}
	}
	return nil
}
