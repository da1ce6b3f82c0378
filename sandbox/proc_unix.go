//go:build unix

package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// runAs returns the credential the command runs with. As root we switch to
// the Spec's unprivileged ids; as any other user we cannot, and that user is
// already not root.
func runAs(uid, gid int) *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
}

func plainSysProcAttr(cmd *exec.Cmd, uid, gid int) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: runAs(uid, gid)}
	return nil
}

// killPlainTree kills the process group of cmd. Processes that called setsid
// are out of reach: the plain mode cannot bound a tree.
func killPlainTree(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

func exitSignal(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return int(ws.Signal())
	}
	return 0
}

// prepareWritable makes the read-write paths owned by uid/gid so that the
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
