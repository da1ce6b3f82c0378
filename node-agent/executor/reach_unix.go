//go:build unix

package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// checkReachable fails when the unprivileged uid/gid the agent runs as
// cannot traverse every folder above path: bubblewrap, running as that
// user, could then not bind the run's folders, and every run would fail
// with a message about bwrap instead of one about the node's setup.
func checkReachable(path string, uid, gid int) error {
	if os.Geteuid() != 0 {
		return nil // the agent runs as this user; nothing to check
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		mode := fi.Mode().Perm()
		reachable := mode&0o001 != 0 ||
			(int(st.Uid) == uid && mode&0o100 != 0) ||
			(int(st.Gid) == gid && mode&0o010 != 0)
		if !reachable {
			return fmt.Errorf("%s is not reachable by uid %d, which the agent runs as: %s has mode %#o; "+
				"choose a folder whose parents others may traverse (o+x), or chmod o+x %s", path, uid, dir, mode, dir)
		}
		if dir == filepath.Dir(dir) {
			return nil
		}
	}
}
