//go:build windows

package sandbox

import (
	"os"
	"os/exec"
	"syscall"
)

func plainSysProcAttr(cmd *exec.Cmd, _, _ int) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
	return nil
}

// killPlainTree kills the direct child only: Windows has no process groups to
// signal, and the plain mode makes no promise about a tree.
func killPlainTree(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

func exitSignal(*os.ProcessState) int { return 0 }

// prepareWritable has nothing to do on Windows: the AppContainer runner
// grants access by ACL, and a plain child runs as the caller.
func prepareWritable([]string, int, int) error { return nil }

// canRunAs: Windows runs have no uid; the Spec's ids are ignored there.
func canRunAs(int, int) error { return nil }

// Reachable has nothing to check on Windows: the AppContainer is granted
// access to the paths of its Spec themselves.
func Reachable(string, int, int) error { return nil }
