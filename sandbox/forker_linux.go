package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"golang.org/x/sys/unix"
)

// v1 has no clone3(CLONE_INTO_CGROUP): a child is born in the cgroups of
// the thread that forks it. The forker is one OS thread of this process,
// locked to a goroutine for the process's life, that starts the commands
// which must be born in a run's v1 cgroups: it moves itself into them
// (each hierarchy's tasks file, "0": itself), forks and execs the command
// there, and moves itself back to where it was.
//
// It replaces a shell that did the same from inside the child (a shell's
// start, about half a millisecond of CPU a run, and the tasks files lent to
// the run's uid meanwhile) and the spawners prepared ahead (a Go program's
// start, about 2.5 ms of CPU a run on a busy node, more than they saved; see
// docs/performance.md). Moving the calling thread itself, by writing 0, is
// the kernel's cheap path: it takes no threadgroup lock, where writing
// another process's pid to cgroup.procs takes the global one and waits for
// an RCU grace period (6–7 ms for two hierarchies on an idle machine here,
// against 0.14 ms), and meanwhile every fork and exit on the host waits too.
//
// Why one thread kept for ever:
//   - Go runs a locked goroutine on its thread alone, and never forks a new
//     thread of the runtime from a locked one (it asks its template thread),
//     so nothing but the command is born while the thread is in a run's
//     cgroup;
//   - a child's parent-death signal (Pdeathsig, which bwrap gets) fires
//     when the thread that forked it ends, not the process: the thread must
//     outlive every command it started.
//
// While it is in a run's cgroup the thread counts in that cgroup's pids
// (the run's limit is one higher until the command started, and set back
// by the thread before it moves out, v1Cgroup.start), and
// killAll never signals this process. If it
// cannot move back it stays parked where it is, for ever, and a new forker
// takes its place: the run's cgroup then cannot be removed, and that run
// says so.
//
// It also starts commands in the network namespace the runner made for a
// sandbox (newNetns), on v1 and v2 alike: a child is born in the network
// namespace of the thread that forks it too, so the forker enters it
// (setns) before the fork and returns to its own after, as it does with
// the cgroups. A forker that cannot return is parked like one stuck in a
// cgroup.
type forker struct {
	reqs chan forkRequest
	// home is the forker thread's own network namespace, opened when it
	// starts serving; homeErr says why it could not be.
	home    *os.File
	homeErr error
}

type forkRequest struct {
	tasks map[cgroup1.Name]string // the run's tasks file in each v1 hierarchy
	netns *os.File                // the network namespace to start cmd in, or nil
	cmd   *exec.Cmd
	// started, when set, is called on the thread right after the command
	// started, before the thread moves back: an error kills the command.
	started func() error
	done    chan error
}

var forkers struct {
	sync.Mutex
	current *forker
}

// startOnForker starts cmd born in the v1 cgroups whose tasks files are
// given (none on v2, where clone3 places it) and in the network namespace
// netns (nil: the process's own), and calls started (if set) on the
// forker's thread right after the command started, while it is still there.
func startOnForker(tasks map[cgroup1.Name]string, netns *os.File, cmd *exec.Cmd, started func() error) error {
	forkers.Lock()
	if forkers.current == nil {
		f := &forker{reqs: make(chan forkRequest)}
		go f.loop()
		forkers.current = f
	}
	f := forkers.current
	forkers.Unlock()
	req := forkRequest{tasks: tasks, netns: netns, cmd: cmd, started: started, done: make(chan error, 1)}
	wait := time.NewTimer(forkerBusy)
	defer wait.Stop()
	select {
	case f.reqs <- req:
		return <-req.done
	case <-wait.C:
		// The forker has been on one start that long (an exec held by
		// a hung file system): a new one takes this start and the next
		// ones, while this one finishes its own and is left idle.
		forkers.Lock()
		if forkers.current == f {
			forkers.current = nil
		}
		forkers.Unlock()
		return startOnForker(tasks, netns, cmd, started)
	}
}

// forkerBusy is how long a start waits for a forker busy with another
// before a new one takes it: a start takes about a millisecond, and eight
// slots' starts at once a few.
var forkerBusy = 5 * time.Second

func (f *forker) loop() {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The process's main thread: /proc/self/cgroup says where it is
		// for the whole process (ownCgroupV1 reads it while a run is
		// started), so it never moves. Another thread takes the work;
		// while this one is locked, the other cannot be it. This one
		// has not changed, and is let go.
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			f.serve()
		}()
		<-locked
		runtime.UnlockOSThread()
		return
	}
	f.serve()
}

func (f *forker) serve() {
	// Never unlocked: the thread ends only with the process (see forker).
	f.home, f.homeErr = os.Open("/proc/thread-self/ns/net")
	for req := range f.reqs {
		stuck, err := f.start(req)
		if stuck {
			forkers.Lock()
			if forkers.current == f {
				forkers.current = nil
			}
			forkers.Unlock()
			req.done <- err
			// Parked for ever: its children's parent-death signal is
			// this thread. A request sent to it meanwhile goes to the
			// forker that takes its place.
			for late := range f.reqs {
				late.done <- startOnForker(late.tasks, late.netns, late.cmd, late.started)
			}
		}
		req.done <- err
	}
}

// start moves the calling thread into req's network namespace and cgroups,
// starts the command and moves the thread back. stuck: the thread could
// not move back.
func (f *forker) start(req forkRequest) (stuck bool, err error) {
	var back []string // the thread's own tasks files, to return to
	for n := range req.tasks {
		h, err := threadTasksV1(n)
		if err != nil {
			return false, err
		}
		// A caller that is not root may have a run cgroup's parent lent
		// to it, and not its own cgroup: it could move in, never back.
		if err := unix.Access(h, unix.W_OK); err != nil {
			return false, fmt.Errorf("cgroup v1: uid %d may not move back into its own cgroup (%s: %w), so it starts no command in another: run as root, or in a cgroup of its own", os.Getuid(), h, err)
		}
		back = append(back, h)
	}
	if req.netns != nil {
		if f.homeErr != nil {
			return false, fmt.Errorf("the thread that starts sandboxes cannot come back from a network namespace: its own: %w", f.homeErr)
		}
		if err := unix.Setns(int(req.netns.Fd()), unix.CLONE_NEWNET); err != nil {
			return false, fmt.Errorf("entering the sandbox's network namespace: %w", err)
		}
	}
	for _, t := range req.tasks {
		if err = writeTasks(t); err != nil {
			break
		}
	}
	if err == nil {
		if err = startCmd(req.cmd); err != nil {
			err = fmt.Errorf("start %s: %w", req.cmd.Path, err)
		} else if req.started != nil {
			if serr := req.started(); serr != nil {
				_ = req.cmd.Process.Kill()
				_ = req.cmd.Wait()
				err = serr
			}
		}
	}
	var errs []error
	for _, h := range back {
		if berr := moveBack(h); berr != nil {
			errs = append(errs, berr)
		}
	}
	if req.netns != nil {
		if berr := setnsBack(int(f.home.Fd())); berr != nil {
			errs = append(errs, fmt.Errorf("back to its own network namespace: %w", berr))
		}
	}
	if berr := errors.Join(errs...); berr != nil {
		if req.cmd.Process != nil {
			_ = req.cmd.Process.Kill()
			_ = req.cmd.Wait()
		}
		return true, errors.Join(err, fmt.Errorf("the thread that starts sandboxes could not leave the run's cgroups or network namespace (it stays there, parked, and another takes its place): %w", berr))
	}
	return false, err
}

// startCmd starts a command: a test makes it hang.
var startCmd = (*exec.Cmd).Start

// moveBack is writeTasks, for the way home: a test makes it fail.
var moveBack = writeTasks

// setnsBack returns the thread to its network namespace: a test makes it
// fail.
var setnsBack = func(fd int) error { return unix.Setns(fd, unix.CLONE_NEWNET) }

// writeTasks moves the calling thread into the cgroup of the tasks file.
func writeTasks(tasks string) error {
	fd, err := unix.Open(tasks, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cgroup v1: %w", &os.PathError{Op: "open", Path: tasks, Err: err})
	}
	defer func() { _ = unix.Close(fd) }()
	if _, err := unix.Write(fd, []byte("0")); err != nil {
		return fmt.Errorf("cgroup v1: move this thread into %s: %w", tasks, err)
	}
	return nil
}

// threadTasksV1 is the tasks file of the calling thread's cgroup in the v1
// hierarchy of n, read now: the node-agent's placement may have moved the
// process since the last start.
func threadTasksV1(n cgroup1.Name) (string, error) {
	rel, err := cgroupV1In("/proc/thread-self/cgroup", n)
	if err != nil {
		return "", fmt.Errorf("cgroup v1: %w", err)
	}
	subs, err := v1Hierarchy()
	if err != nil {
		return "", err
	}
	for _, s := range subs {
		if s.Name() == n {
			return filepath.Join(v1Dir(s, rel), "tasks"), nil
		}
	}
	return "", fmt.Errorf("cgroup v1: no %s hierarchy in use", n)
}
