package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// v1Enter makes a run cgroup on a v1 host, or skips: on v2 the kernel
// places the command (CLONE_INTO_CGROUP) and no shell moves itself.
func v1Enter(t *testing.T) (*BwrapRunner, *v1Cgroup) {
	t.Helper()
	r := requireBwrapHost(t)
	cg, err := newRunCgroup(r.opts, Limits{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cg.killAll(); _ = cg.remove() })
	c, ok := cg.(*v1Cgroup)
	if !ok {
		t.Skip("cgroup v2 here: the kernel places the command, no shell moves itself")
	}
	return r, c
}

func tasksFiles(c *v1Cgroup) []string {
	var out []string
	for _, p := range c.paths {
		out = append(out, filepath.Join(p, "tasks"))
	}
	return out
}

func owner(t *testing.T, path string) uint32 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid
}

// The tasks files are lent to the command's uid only while its shell moves
// itself in, and even then a process of that uid cannot move root's
// processes in (the kernel checks the writer against the process it
// moves): nothing of the run's uid can put a host daemon under the run's
// limits, where the run's end would kill it. (A descriptor opened by root
// and handed to the shell could: the kernel checks a write against the
// opener, and any process of the uid could take it with pidfd_getfd.)
func TestCgroupEnterLendsTasksOnlyToMoveItself(t *testing.T) {
	_, c := v1Enter(t)
	victim := exec.Command("sleep", "60")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = victim.Process.Kill(); _ = victim.Wait() }()

	cmd := exec.Command("/bin/sh", "-c", "exit 0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(DefaultUID, DefaultGID)}
	if err := c.beforeStart(cmd); err != nil {
		t.Fatal(err)
	}
	for _, f := range tasksFiles(c) {
		if owner(t, f) != uint32(DefaultUID) {
			t.Fatalf("%s is not lent to uid %d while the shell starts", f, DefaultUID)
		}
		// What another process of that uid could do meanwhile.
		try := exec.Command("/bin/sh", "-c", fmt.Sprintf("echo %d > %s", victim.Process.Pid, f))
		try.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(DefaultUID, DefaultGID)}
		if out, err := try.CombinedOutput(); err == nil {
			t.Errorf("uid %d moved root's pid %d into %s: %s", DefaultUID, victim.Process.Pid, f, out)
		}
	}
	err := cmd.Start()
	if aerr := c.afterStart(context.Background()); err != nil || aerr != nil {
		t.Fatalf("start %v, enter %v", err, aerr)
	}
	_ = cmd.Wait()
	for _, f := range tasksFiles(c) {
		if owner(t, f) != 0 {
			t.Errorf("%s is still lent to uid %d after the shell moved itself in", f, owner(t, f))
		}
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", victim.Process.Pid))
	if strings.Contains(string(b), "/harnessfacts/run-") {
		t.Errorf("root's process is in a run's cgroup: %s", b)
	}
}

// A bwrap the run's uid may not run is the sandbox's failure, said by Run,
// not the command's exit 126 with the shell's complaint in its output.
func TestBwrapTheRunsUIDCannotRunIsTheSandboxsFailure(t *testing.T) {
	if !cgroupV1(t, requireBwrapHost(t)) {
		t.Skip("cgroup v2 here: the kernel places the command, no shell moves itself")
	}
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Fatal(err)
	}
	hidden := filepath.Join(testBase(t), "root-only")
	if err := os.Mkdir(hidden, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bwrap)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hidden, "bwrap"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := NewBwrapRunner(Options{Bwrap: filepath.Join(hidden, "bwrap"), CgroupParent: testCgroupParent})
	if err != nil {
		t.Fatal(err)
	}
	spec := runDir(t, testBase(t), "true")
	var out bytes.Buffer
	spec.Stdout, spec.Stderr = &out, &out
	res, err := r.Run(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "may not run") {
		t.Errorf("Run of a bwrap uid %d may not run: %v, exit %d, output %q", DefaultUID, err, res.ExitCode, out.String())
	}
	assertNoRunCgroups(t)
}

// The command the shell becomes (bwrap, whose environment its sandbox's
// init keeps as /proc/1/environ) has an empty environment whether /bin/sh
// is dash (which exports PWD) or bash (whose exec adds SHLVL).
func TestCgroupEnterLeavesNoEnvironment(t *testing.T) {
	for _, shell := range []string{"/bin/sh", "/bin/dash", "/bin/bash"} {
		if _, err := os.Stat(shell); err != nil {
			continue
		}
		_, c := v1Enter(t)
		cmd := exec.Command("/usr/bin/env")
		cmd.Env = []string{}
		cmd.Dir = "/"
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(DefaultUID, DefaultGID)}
		if err := c.beforeStart(cmd); err != nil {
			t.Fatal(err)
		}
		cmd.Path = shell
		err := cmd.Start()
		if aerr := c.afterStart(context.Background()); err != nil || aerr != nil {
			t.Fatalf("%s: start %v, enter %v", shell, err, aerr)
		}
		_ = cmd.Wait()
		if out.Len() != 0 {
			t.Errorf("with %s, the command has an environment: %q", shell, out.String())
		}
	}
}

// A v1 run cgroup is removed by rmdir alone (no walk of its control
// files): never while a process is in it, whether in the run's cgroup or
// in one below it (which nothing in a sandbox can make, but a run's end
// must not leave a process behind if something did); killAll finds and
// kills both, and remove then takes the cgroup below first.
func TestCgroupV1KillAllAndRemoveReachBelow(t *testing.T) {
	_, c := v1Enter(t)
	cmd := exec.Command("/bin/sh", "-c", "sleep 1000 & exec sleep 1000")
	if err := c.beforeStart(cmd); err != nil {
		t.Fatal(err)
	}
	err := cmd.Start()
	if aerr := c.afterStart(context.Background()); err != nil || aerr != nil {
		t.Fatal(err, aerr)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// A second process, moved into a cgroup below the run's in every
	// hierarchy.
	other := exec.Command("sleep", "1000")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	for _, p := range c.paths {
		below := filepath.Join(p, "below")
		if err := os.Mkdir(below, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(below, "cgroup.procs"), []byte(fmt.Sprint(other.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	// The shell starts its first sleep in the background: wait for it.
	var pids []int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if pids, err = v1Procs(c.paths["pids"]); err != nil || len(pids) == 3 || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || len(pids) != 3 {
		t.Fatalf("v1Procs found %v (%v), want the shell's two sleeps and the one below", pids, err)
	}
	if err := c.remove(); err == nil || !strings.Contains(err.Error(), "holds") {
		t.Fatalf("remove with processes inside: %v, want a refusal that says the cgroup holds processes", err)
	}
	for _, p := range c.paths {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the refused remove took %s away: %v", p, err)
		}
	}
	if err := c.killAll(); err != nil {
		t.Fatal(err)
	}
	_ = other.Wait()
	if err := c.remove(); err != nil {
		t.Fatal(err)
	}
	for _, p := range c.paths {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s is still there after remove: %v", p, err)
		}
	}
	if err := c.remove(); err != nil {
		t.Fatalf("removing it again: %v", err)
	}
}

// A process of the run's uid can stop the enter shell before it answers
// (it may signal or trace its own uid's processes). The wait for the answer
// ends with the run's context, not 30 s later: here the shell is held at
// its exec by ptrace, as such a process would hold it.
func TestCgroupEnterWaitEndsWithTheContext(t *testing.T) {
	_, c := v1Enter(t)
	cmd := exec.Command("/bin/sh", "-c", "exit 0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(DefaultUID, DefaultGID)}
	if err := c.beforeStart(cmd); err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr.Ptrace = true // stops at its exec, before its first line
	err := cmd.Start()
	if err != nil {
		c.giveBack()
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("this host does not let a child be traced (%v): the stopped shell cannot be made here", err)
		}
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	aerr := c.afterStart(ctx)
	if took := time.Since(start); aerr == nil || !errors.Is(aerr, context.DeadlineExceeded) || took > 5*time.Second {
		t.Fatalf("afterStart with a stopped shell: %v after %s, want the context's end within seconds", aerr, took)
	}
	for _, f := range tasksFiles(c) {
		if owner(t, f) == uint32(DefaultUID) {
			t.Errorf("%s is still lent to uid %d after the wait ended", f, DefaultUID)
		}
	}
}
