//go:build linux

package e2e

import (
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// peakMu serialises peakRSS: this process is a child subreaper only while
// one runs.
var peakMu sync.Mutex

// peakRSS runs argv once in dir, its standard output and error to the
// files stdout and stderr, and returns its peak resident set size (its
// own, or that of the largest child it waited for) as the kernel counts
// it, and how it ended.
//
// Not from an exec.Cmd's ProcessState: os/exec starts a child that shares
// this process's memory until its execve (CLONE_VM), and at the execve the
// kernel keeps the peak of the memory the child leaves, this test
// process's own (80 MiB and more), as the child's maxrss: every peak read
// that way was at least this process's, whatever the command used. So a
// shell, a small process of its own, starts the command in the background
// and exits, and this process, a child subreaper meanwhile, inherits the
// command and waits for it itself.
func peakRSS(tb testing.TB, dir, stdout, stderr string, argv ...string) (int64, unix.WaitStatus) {
	tb.Helper()
	peakMu.Lock()
	defer peakMu.Unlock()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		tb.Fatalf("becoming a child subreaper: %v", err)
	}
	defer func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) }()
	script := `o=$1 e=$2; shift 2; "$@" >"$o" 2>"$e" </dev/null & echo $!`
	sh := exec.Command("sh", append([]string{"-c", script, "sh", stdout, stderr}, argv...)...)
	sh.Dir = dir
	out, err := sh.Output()
	if err != nil {
		tb.Fatalf("%s: %v", sh.Args, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		tb.Fatalf("%s said %q, not a pid", sh.Args, out)
	}
	var ws unix.WaitStatus
	var ru unix.Rusage
	for {
		if _, err = unix.Wait4(pid, &ws, 0, &ru); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		tb.Fatalf("waiting for %s: %v", argv, err)
	}
	return ru.Maxrss << 10, ws
}

// mustPeakRSS is peakRSS of a command that must succeed; its output is
// dropped.
func mustPeakRSS(tb testing.TB, dir string, argv ...string) int64 {
	tb.Helper()
	peak, ws := peakRSS(tb, dir, "/dev/null", "/dev/null", argv...)
	if !ws.Exited() || ws.ExitStatus() != 0 {
		tb.Fatalf("%s: %v", argv, ws)
	}
	return peak
}
