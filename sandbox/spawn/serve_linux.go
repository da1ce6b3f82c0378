package spawn

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Serve waits for the runner's one Request on ControlFd, starts the program
// it names as a child (born in this process's cgroup), and ends as that
// child ends, with its exit code: the runner waits for this process as it
// would for the program. It returns early only when it cannot start it, or
// when the runner closed the socket because the spawner is not needed.
//
// The program is started by fork and exec rather than by this process's
// own execve: execve must first end every other thread of this Go process,
// each of which has to be scheduled for that, and on a busy node that cost
// more than the cgroup move it saves.
func Serve() int {
	ctl, err := unix.FcntlInt(ControlFd, unix.F_DUPFD_CLOEXEC, 100)
	if err != nil {
		return 127
	}
	_ = unix.Close(ControlFd)
	buf := make([]byte, MaxRequest)
	oob := make([]byte, unix.CmsgSpace(MaxFds*4))
	// The first decode of a Request builds encoding/json's decoder for the
	// type (reflection, once per process) and touches code not run yet:
	// done here, before Ready, it is no run's wait. Measured with perf's
	// events over BenchmarkSandboxStart: the request's receipt to bwrap's
	// fork 0.37-0.39 ms before, 0.22 ms after.
	var warm Request
	_ = json.Unmarshal([]byte(`{"path":"/","argv":["a"],"env":["a=b"],"uid":1,"gid":1,"fds":[0]}`), &warm)
	// So is the first fork and exec: a child that execs "/" (a directory,
	// which no one can execute: EACCES) runs the same code as bwrap's
	// start, credentials included, and exits at once. The request's
	// receipt to bwrap's exec: 0.75-0.83 ms before, 0.68-0.74 ms after
	// (BenchmarkSandboxStart, 3 x 100 alternated).
	_ = (&exec.Cmd{Path: "/", Args: []string{"/"}, Env: []string{}, Dir: "/", SysProcAttr: &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: overflowID, Gid: overflowID, Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
	}}).Run()
	if _, err := unix.Write(ctl, []byte(Ready)); err != nil {
		return 127
	}
	n, oobn, flags, _, err := unix.Recvmsg(ctl, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return 127
	}
	if n == 0 && oobn == 0 {
		return 0 // the runner let this spawner go unused
	}
	reply := func(msg string) { _, _ = unix.Write(ctl, []byte(msg)) }
	fail := func(format string, a ...any) int {
		reply(Failed + fmt.Sprintf(format, a...))
		return 127
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		return fail("the request was truncated")
	}
	fds, err := rights(oob[:oobn])
	if err != nil {
		return fail("%v", err)
	}
	var req Request
	if err := json.Unmarshal(buf[:n], &req); err != nil {
		return fail("reading the request: %v", err)
	}
	if err := req.check(len(fds)); err != nil {
		return fail("%v", err)
	}
	files := map[int]*os.File{}
	top := 2
	for i, t := range req.Fds {
		files[t] = os.NewFile(uintptr(fds[i]), fmt.Sprintf("fd%d", t))
		top = max(top, t)
	}
	cmd := &exec.Cmd{Path: req.Path, Args: req.Argv, Env: req.Env, Dir: "/"}
	// exec.Cmd's nil means /dev/null for 0–2 and closed beyond.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = files[0], files[1], files[2]
	for t := 3; t <= top; t++ {
		cmd.ExtraFiles = append(cmd.ExtraFiles, files[t])
	}
	// The run's unprivileged uid for the program and everything it starts;
	// killed if this process dies (and this one if the runner dies).
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(req.UID), Gid: uint32(req.GID), Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return fail("start %s: %v", req.Path, err)
	}
	for _, f := range files {
		_ = f.Close()
	}
	reply(Started)
	_ = unix.Close(ctl)
	err = cmd.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return 127
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		if ws.Signal() == syscall.SIGKILL {
			_ = unix.Kill(unix.Getpid(), unix.SIGKILL)
		}
		return 128 + int(ws.Signal()) // bwrap's own way to report a signal
	}
	return ws.ExitStatus()
}

// overflowID is the kernel's overflow uid and gid (nobody): the warm-up
// child's, which never runs a program.
const overflowID = 65534

func (r *Request) check(nfiles int) error {
	switch {
	case r.UID <= 0 || r.GID <= 0:
		return fmt.Errorf("refusing uid %d gid %d: a sandbox never runs as root", r.UID, r.GID)
	case !filepath.IsAbs(r.Path) || len(r.Argv) == 0:
		return fmt.Errorf("no absolute program path and argv")
	case len(r.Fds) != nfiles:
		return fmt.Errorf("%d descriptor numbers for %d descriptors", len(r.Fds), nfiles)
	}
	seen := map[int]bool{}
	for _, t := range r.Fds {
		if t < 0 || t > MaxFds+2 || seen[t] {
			return fmt.Errorf("descriptor number %d out of range or repeated", t)
		}
		seen[t] = true
	}
	return nil
}

// rights are the descriptors of the request's SCM_RIGHTS messages.
func rights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("reading the descriptors: %w", err)
	}
	var fds []int
	for i := range msgs {
		f, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			return nil, fmt.Errorf("reading the descriptors: %w", err)
		}
		fds = append(fds, f...)
	}
	return fds, nil
}
