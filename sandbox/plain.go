package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// PlainRunner runs the command as a plain child process. It is NOT a sandbox:
// the command can read every file its user can read and reach the network.
// What it does restrict: the environment is exactly Spec.Env, stdin is
// closed, on Unix the command runs in its own process group (killed as a group
// on timeout or cancel) and, when the caller is root, as Spec's unprivileged
// uid/gid. A command that leaves its process group (setsid) escapes the kill;
// only a sandbox mode bounds a tree. Every Result carries PlainWarning.
type PlainRunner struct {
	// Reason is why no sandbox was used; it is appended to the warning.
	Reason string
}

var _ Runner = (*PlainRunner)(nil)

// Mode returns ModePlain.
func (*PlainRunner) Mode() Mode { return ModePlain }

// Run runs spec as a plain child process.
func (p *PlainRunner) Run(ctx context.Context, spec Spec) (Result, error) {
	res := Result{Mode: ModePlain, ExitCode: -1, Warning: PlainWarning}
	if p.Reason != "" {
		res.Warning += " (no sandbox: " + p.Reason + ")"
	}
	if spec.Root != "" {
		return res, errRootNeedsBwrap
	}
	if err := spec.validate(); err != nil {
		return res, err
	}
	limits := spec.Limits.WithDefaults()
	path, err := lookPathIn(spec.Argv[0], envValue(spec.Env, "PATH"))
	if err != nil {
		return res, fmt.Errorf("sandbox: plain: %w", err)
	}
	cmd := exec.Command(path, spec.Argv[1:]...)
	cmd.Args[0] = spec.Argv[0]
	cmd.Dir = spec.Dir
	// A non-nil empty slice: a nil Env would make os/exec pass the host's.
	cmd.Env = append([]string{}, spec.Env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = spec.Stdin, spec.Stdout, spec.Stderr
	// Output pipes may be held open by grandchildren that left the group.
	cmd.WaitDelay = 2 * time.Second
	if err := canRunAs(spec.UID, spec.GID); err != nil {
		return res, err
	}
	uid, gid := spec.ids()
	if err := plainSysProcAttr(cmd, uid, gid); err != nil {
		return res, err
	}
	if len(spec.Loopback) > 0 {
		// No network of its own: the caller's loopback.
		ls, err := listenShared(spec.Loopback)
		if err != nil {
			return res, err
		}
		srv := serve(spec.Loopback, ls)
		defer srv.stop()
	}
	if err := prepareWritable(spec.ReadWrite, uid, gid); err != nil {
		return res, err
	}

	runCtx, cancel := withTimeout(ctx, limits.Timeout)
	defer cancel()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("sandbox: plain: start %s: %w", spec.Argv[0], err)
	}
	spec.started()
	stop := watch(runCtx, func() { killPlainTree(cmd) })
	waitErr := cmd.Wait()
	killPlainTree(cmd) // nothing of the group outlives the run
	stop()
	res.Duration = time.Since(start)
	res.TimedOut = errors.Is(runCtx.Err(), context.DeadlineExceeded)
	fillExit(&res, cmd.ProcessState)
	if waitErr != nil && cmd.ProcessState == nil {
		return res, fmt.Errorf("sandbox: plain: wait: %w", waitErr)
	}
	if ctx.Err() != nil && !res.TimedOut {
		return res, fmt.Errorf("sandbox: plain: %w", ctx.Err())
	}
	return res, nil
}

// withTimeout is context.WithTimeout when d > 0.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

// watch calls kill once if ctx is done before the returned stop is called.
// stop waits for the watcher goroutine, so none outlives Run.
func watch(ctx context.Context, kill func()) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-ctx.Done():
			kill()
		case <-done:
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

func fillExit(res *Result, ps *os.ProcessState) {
	if ps == nil {
		res.ExitCode = -1
		return
	}
	res.ExitCode = ps.ExitCode()
	if sig := exitSignal(ps); sig != 0 {
		res.Signal = sig
		res.ExitCode = -1
	}
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// lookPathIn resolves name like a shell would with PATH=pathEnv, so that the
// command found is the one the caller's environment names, not the host's.
func lookPathIn(name, pathEnv string) (string, error) {
	if strings.ContainsAny(name, `/\`) {
		return name, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		if p, err := exec.LookPath(filepath.Join(dir, name)); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in the PATH of the given environment (%q)", name, pathEnv)
}
