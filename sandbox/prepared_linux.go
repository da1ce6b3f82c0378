package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"

	"github.com/harnessfacts/harnessfacts/sandbox/spawn"
)

// Preparer keeps sandboxes made ahead on a cgroup v1 host: a fresh run
// cgroup with a spawner (package spawn) already in it, which forks the
// run's bwrap there. What it saves a run is making the cgroup in each
// hierarchy and starting the shell that moves itself in (v1Cgroup.
// beforeStart), about a millisecond or two of a v1 start; the Preparer does
// it while no run waits. A run that finds none ready starts the usual way.
type Preparer struct {
	spawner string
	opts    Options
	ready   chan *prepared
	refill  chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	err     error
	// report hears of each new failure to prepare, and of the recovery.
	report func(error)
	// closeOnce closes done: Close may be called more than once.
	closeOnce sync.Once
	// taken counts the runs that started in a prepared sandbox.
	taken atomic.Int64
}

// NewPreparer starts keeping n sandboxes prepared with the spawner program
// (a binary that serves spawn.Command, such as harnessfacts-sandbox-init).
// report, when set, is told each time preparing starts failing or fails
// differently (runs then start the usual way) and, with nil, when it works
// again.
// It returns nil when there is nothing to win: n < 1, or a cgroup v2 host,
// where bwrap is started inside its cgroup anyway. Close it when done: the
// spawners die with this process, but their cgroups stay until
// RecoverAbandoned.
func NewPreparer(opts Options, spawner string, n int, report func(error)) *Preparer {
	if n < 1 || spawner == "" || cgroups.Mode() == cgroups.Unified {
		return nil
	}
	opts.Preparer = nil
	// The spawners become the sandboxes: no core dumps (NewBwrapRunner's
	// noCoreDumps, which may come later).
	if err := noCoreDumps(); err != nil {
		if report != nil {
			report(err)
		}
		return nil
	}
	p := &Preparer{spawner: spawner, opts: opts, ready: make(chan *prepared, n), refill: make(chan struct{}, n), done: make(chan struct{}), report: report}
	for range n {
		p.refill <- struct{}{}
	}
	p.wg.Add(1)
	go p.loop()
	return p
}

func (p *Preparer) loop() {
	defer p.wg.Done()
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-p.done:
			return
		case <-p.refill:
		}
		z, err := prepare(p.spawner, p.opts)
		p.mu.Lock()
		changed := (err == nil) != (p.err == nil) || err != nil && err.Error() != p.err.Error()
		p.err = err
		p.mu.Unlock()
		if changed && p.report != nil {
			p.report(err)
		}
		if err != nil {
			// Runs start the usual way meanwhile; Err says why. A cause
			// may pass (RecoverAbandoned removing a cgroup in the moment
			// it is still empty), so try again, less and less often.
			select {
			case <-p.done:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			p.replenish()
			continue
		}
		backoff = 100 * time.Millisecond
		select {
		case p.ready <- z:
		case <-p.done:
			_ = z.discard()
			return
		}
	}
}

// Err says why the last try to prepare a sandbox failed, if it did.
func (p *Preparer) Err() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// take returns a prepared sandbox whose spawner is alive, or nil. The
// caller calls replenish once its run is over.
func (p *Preparer) take() *prepared {
	if p == nil {
		return nil
	}
	for {
		select {
		case z := <-p.ready:
			if z.alive() {
				p.taken.Add(1)
				return z
			}
			_ = z.discard()
			p.replenish()
		default:
			return nil
		}
	}
}

// replenish has another sandbox made, for one taken. Run calls it when its
// run is over: making one starts a Go program, CPU the run's own start
// would share.
func (p *Preparer) replenish() {
	select {
	case p.refill <- struct{}{}:
	default:
	}
}

// Close stops preparing and removes the prepared sandboxes.
func (p *Preparer) Close() error {
	if p == nil {
		return nil
	}
	first := false
	p.closeOnce.Do(func() { first = true; close(p.done) })
	if !first {
		return nil
	}
	p.wg.Wait()
	var errs []error
	for {
		select {
		case z := <-p.ready:
			errs = append(errs, z.discard())
		default:
			return errors.Join(errs...)
		}
	}
}

// prepared is one sandbox made ahead: a run cgroup (default limits until a
// run sets its own) holding a spawner, the spawner's process and control
// socket.
type prepared struct {
	cg    runCgroup
	cmd   *exec.Cmd
	ctl   *net.UnixConn
	pidfd int
}

func prepare(spawner string, opts Options) (z *prepared, err error) {
	// Its shell would start and then fail to become it: said here instead.
	if _, err := exec.LookPath(spawner); err != nil {
		return nil, fmt.Errorf("sandbox: the spawner: %w", err)
	}
	cg, err := newRunCgroup(opts, Limits{}.WithDefaults())
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = cg.remove()
		}
	}()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: spawner socket pair: %w", err)
	}
	child := os.NewFile(uintptr(fds[0]), "spawn-control")
	defer child.Close()
	own := os.NewFile(uintptr(fds[1]), "spawn-control")
	c, err := net.FileConn(own)
	own.Close()
	if err != nil {
		return nil, fmt.Errorf("sandbox: spawner socket: %w", err)
	}
	ctl := c.(*net.UnixConn)
	cmd := exec.Command(spawner, spawn.Command)
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{child} // spawn.ControlFd
	// As bwrap itself: its own process group, killed if this process dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Born in the cgroup (its shell moves itself in first): no move of a
	// running process, which would hold the kernel's threadgroup lock.
	if err := cg.beforeStart(cmd); err != nil {
		ctl.Close()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	err = cmd.Start()
	// The spawner's shell runs as root: nothing of a run can stop it.
	entered := cg.afterStart(context.Background())
	child.Close() // the spawner's copy is what matters: its end is seen at once
	if err != nil {
		ctl.Close()
		return nil, fmt.Errorf("sandbox: start the spawner %s: %w", spawner, err)
	}
	z = &prepared{cg: cg, cmd: cmd, ctl: ctl, pidfd: -1}
	if z.pidfd, err = unix.PidfdOpen(cmd.Process.Pid, 0); err != nil {
		z.pidfd = -1
	}
	if entered != nil {
		z.kill()
		return nil, fmt.Errorf("sandbox: %w", entered)
	}
	_ = ctl.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 64)
	if n, err := ctl.Read(buf); err != nil || string(buf[:n]) != spawn.Ready {
		z.kill()
		return nil, fmt.Errorf("sandbox: the spawner %s did not get ready (%q): %w", spawner, buf[:n], err)
	}
	return z, nil
}

// alive says whether the spawner still waits (its pidfd is not readable).
func (z *prepared) alive() bool {
	if z.pidfd < 0 {
		return true
	}
	fds := []unix.PollFd{{Fd: int32(z.pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 0
}

// kill ends the spawner and reaps it.
func (z *prepared) kill() {
	_ = z.cmd.Process.Kill()
	_ = z.cmd.Wait()
	z.release()
}

func (z *prepared) release() {
	_ = z.ctl.Close()
	if z.pidfd >= 0 {
		_ = unix.Close(z.pidfd)
		z.pidfd = -1
	}
}

// discard ends an unused prepared sandbox and removes its cgroup.
func (z *prepared) discard() error {
	z.kill()
	return z.cg.remove()
}

// spawn has the spawner start path with argv, as uid/gid, with files as
// its descriptors 0, 1, … (a nil entry stays closed), and returns once it
// runs. The spawner then ends as the program ends, with its exit code (a
// signal N as 128+N, as bwrap reports its payload's), so z.cmd stands for
// the program.
func (z *prepared) spawn(path string, argv []string, uid, gid int, files []*os.File) error {
	req := spawn.Request{Path: path, Argv: argv, Env: []string{}, UID: uid, GID: gid}
	var fds []int
	for i, f := range files {
		if f != nil {
			req.Fds = append(req.Fds, i)
			fds = append(fds, int(f.Fd()))
		}
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if len(b) > spawn.MaxRequest || len(fds) > spawn.MaxFds {
		return fmt.Errorf("sandbox: a spawn request of %d bytes and %d descriptors is over the bounds", len(b), len(fds))
	}
	_, _, err = z.ctl.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
	runtime.KeepAlive(files)
	if err != nil {
		return fmt.Errorf("sandbox: send the spawner its request: %w", err)
	}
	_ = z.ctl.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 4096)
	n, err := z.ctl.Read(buf)
	msg := string(buf[:n])
	switch {
	case n > 0 && msg == spawn.Started:
		z.release()
		return nil
	case n > 0:
		return fmt.Errorf("sandbox: the spawner: %s", msg)
	case errors.Is(err, io.EOF):
		return errors.New("sandbox: the spawner ended before it started bwrap")
	}
	return fmt.Errorf("sandbox: waiting for the spawner: %w", err)
}

// childStdio are a spawned bwrap's descriptors 0–2, made from a Spec the
// way exec.Cmd makes them: /dev/null for nil, an *os.File as it is, else a
// pipe copied by a goroutine (one pipe when stdout and stderr are the same
// writer, so that their order is kept).
type childStdio struct {
	child     [3]*os.File
	ownChild  []*os.File // the child's ends this process opened: closed once spawned
	ownParent []*os.File // this side's pipe ends: closed when the copies end
	copies    sync.WaitGroup
}

func openStdio(spec Spec) (s *childStdio, err error) {
	s = &childStdio{}
	defer func() {
		if err != nil {
			s.afterStart()
			s.wait(0)
		}
	}()
	switch in := spec.Stdin.(type) {
	case nil:
		if s.child[0], err = os.Open(os.DevNull); err != nil {
			return s, err
		}
		s.ownChild = append(s.ownChild, s.child[0])
	case *os.File:
		s.child[0] = in
	default:
		pr, pw, err := os.Pipe()
		if err != nil {
			return s, err
		}
		s.child[0] = pr
		s.ownChild = append(s.ownChild, pr)
		s.ownParent = append(s.ownParent, pw)
		s.copies.Go(func() {
			_, _ = io.Copy(pw, in) // a payload that stops reading makes this fail: as exec.Cmd, ignored
			_ = pw.Close()
		})
	}
	out := func(w io.Writer) (*os.File, error) {
		switch w := w.(type) {
		case nil:
			f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err == nil {
				s.ownChild = append(s.ownChild, f)
			}
			return f, err
		case *os.File:
			return w, nil
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		s.ownChild = append(s.ownChild, pw)
		s.ownParent = append(s.ownParent, pr)
		s.copies.Go(func() {
			_, _ = io.Copy(w, pr)
			_ = pr.Close()
		})
		return pw, nil
	}
	if s.child[1], err = out(spec.Stdout); err != nil {
		return s, err
	}
	if sameWriter(spec.Stdout, spec.Stderr) {
		s.child[2] = s.child[1]
	} else if s.child[2], err = out(spec.Stderr); err != nil {
		return s, err
	}
	return s, nil
}

// sameWriter is exec.Cmd's test for one pipe serving both outputs.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false // not comparable
		}
	}()
	return a == b
}

// afterStart closes this process's copies of the child's ends.
func (s *childStdio) afterStart() {
	for _, f := range s.ownChild {
		_ = f.Close()
	}
	s.ownChild = nil
}

// wait waits for the copies once the sandbox's processes are gone (its
// pipes then close), at most d; then it closes this side's ends, which
// ends any copy still blocked.
func (s *childStdio) wait(d time.Duration) {
	done := make(chan struct{})
	go func() {
		s.copies.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		for _, f := range s.ownParent {
			_ = f.Close()
		}
		<-done
	}
}
