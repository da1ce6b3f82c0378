//go:build unix

package sandbox

import (
	"fmt"
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

// canRunAs refuses a uid this process cannot switch to, instead of
// silently running the command as itself: only root can run it as another
// uid. uid 0 in a Spec means "the default" (DefaultUID as root, else this
// process's own uid).
func canRunAs(uid, gid int) error {
	euid := os.Geteuid()
	if euid == 0 || ((uid == 0 || uid == euid) && (gid == 0 || gid == os.Getegid())) {
		return nil
	}
	return fmt.Errorf("sandbox: cannot run the command as uid %d gid %d: this process is uid %d, not root (run as root, or leave the ids unset to run as uid %d)", uid, gid, euid, euid)
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

// Reachable reports, for a path the command's uid/gid must open, the first
// ancestor directory that uid/gid cannot search. bwrap runs as that uid and
// resolves its bind sources itself, so a private parent (mode 0700, owned by
// root) would fail every run with a less helpful message; a caller checks
// its run root once, up front. Only root switches to another uid, so as any
// other user there is nothing to check.
func Reachable(path string, uid, gid int) error {
	if os.Geteuid() != 0 || uid == os.Geteuid() {
		return nil
	}
	for dir := filepath.Dir(filepath.Clean(path)); ; dir = filepath.Dir(dir) {
		info, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("sandbox: %s: %w", dir, err)
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if ok {
			mode := info.Mode().Perm()
			can := mode&0o001 != 0 ||
				(int(st.Uid) == uid && mode&0o100 != 0) ||
				(int(st.Gid) == gid && mode&0o010 != 0)
			if !can {
				return fmt.Errorf("sandbox: %s is not searchable by uid %d (mode %#o, owner %d:%d), so %s cannot be reached from the sandbox: chmod o+x it or move the run directory",
					dir, uid, mode, st.Uid, st.Gid, path)
			}
		}
		if dir == "/" || dir == "." {
			return nil
		}
	}
}
