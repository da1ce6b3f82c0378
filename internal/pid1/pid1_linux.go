package pid1

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// IsPID1 says whether this process is PID 1 of its pid namespace.
func IsPID1() bool { return os.Getpid() == 1 }

// forwarded are the signals a container runtime, a kubelet or a user with
// kubectl sends to a container's PID 1; the child gets them.
var forwarded = []os.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2}

// Run starts argv (argv[0] resolved like exec does; this binary as
// /proc/self/exe) with env as its child, forwards the container's signals
// to it, reaps every process that exits (its child and any orphan), and
// returns the exit code to end with: the child's, or 128 plus the signal
// that killed it. Call it first thing in main, before other goroutines
// start processes of their own: every child of this process is reaped here.
func Run(path string, argv, env []string) (int, error) {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, append([]os.Signal{unix.SIGCHLD}, forwarded...)...)
	defer signal.Stop(sigs)
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{0, 1, 2},
		// Its own session would take the child out of the container's
		// foreground; it stays in the init's process group.
	})
	if err != nil {
		return 1, fmt.Errorf("pid1: start %s: %w", path, err)
	}
	for sig := range sigs {
		if sig != unix.SIGCHLD {
			_ = unix.Kill(pid, sig.(syscall.Signal))
			continue
		}
		if code, done := reap(pid); done {
			return code, nil
		}
	}
	return 1, errors.New("pid1: signal channel closed")
}

// reap collects every child that has exited; done when one was pid, with
// the exit code to end with.
func reap(pid int) (code int, done bool) {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || got <= 0 {
			return code, done
		}
		if got != pid {
			continue // an orphan: reaped, nothing else to do
		}
		done = true
		switch {
		case ws.Exited():
			code = ws.ExitStatus()
		case ws.Signaled():
			code = 128 + int(ws.Signal())
		default:
			done = false // stopped or continued: still running
		}
	}
}
