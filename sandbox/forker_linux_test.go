package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"golang.org/x/sys/unix"
)

// threadsOfThisProcessIn lists the threads of this process in the cgroup
// of the tasks file.
func threadsOfThisProcessIn(t *testing.T, tasks string) []string {
	t.Helper()
	b, err := os.ReadFile(tasks)
	if err != nil {
		t.Fatal(err)
	}
	var ours []string
	for _, tid := range strings.Fields(string(b)) {
		if _, err := os.Stat(filepath.Join("/proc/self/task", tid)); err == nil {
			ours = append(ours, tid)
		}
	}
	return ours
}

// The forker starts a command born in every hierarchy of the run's cgroup,
// under the run's uid, and leaves no thread of this process there; the
// process's main thread, whose cgroup is the one /proc/self/cgroup names,
// never moves. Eight at once, as a node's slots start them: each in a run
// cgroup of its own (a v1Cgroup is one sandbox's, started by one caller at
// a time; its process limit's room for the forker is set on the forker's
// thread).
func TestForkerStartsTheCommandInTheRunsCgroupsAndLeavesThem(t *testing.T) {
	const slots = 8
	cgs := make([]*v1Cgroup, slots)
	for i := range cgs {
		_, cgs[i] = v1Enter(t)
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, slots)
	errs := make([]error, slots)
	for i, c := range cgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command("cat", "/proc/self/cgroup")
			cmd.Stdout = &outs[i]
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(DefaultUID, DefaultGID), Pdeathsig: syscall.SIGKILL}
			if errs[i] = c.start(cmd, nil); errs[i] == nil {
				errs[i] = cmd.Wait()
			}
		}()
	}
	wg.Wait()
	for i, c := range cgs {
		if errs[i] != nil {
			t.Fatalf("start %d: %v", i, errs[i])
		}
		for n, p := range c.paths {
			rel := strings.TrimPrefix(p, v1MountOf(t, n))
			if !strings.Contains(outs[i].String(), ":"+rel+"\n") {
				t.Errorf("command %d was not born in its run's %s cgroup %s:\n%s", i, n, rel, outs[i].String())
			}
		}
		for _, f := range tasksFiles(c) {
			if ours := threadsOfThisProcessIn(t, f); len(ours) > 0 {
				t.Errorf("threads %v of this process are left in %s", ours, f)
			}
		}
		if err := c.remove(); err != nil {
			t.Errorf("run %d's cgroup cannot be removed after its command: %v", i, err)
		}
	}
	if now, _ := os.ReadFile("/proc/self/cgroup"); !bytes.Equal(now, own) {
		t.Errorf("the main thread moved:\n%s\nwas\n%s", now, own)
	}
}

// v1MountOf is where the v1 hierarchy of n is mounted.
func v1MountOf(t *testing.T, n cgroup1.Name) string {
	t.Helper()
	subs, err := v1Hierarchy()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		if s.Name() == n {
			return strings.TrimSuffix(v1Dir(s, "/"), "/")
		}
	}
	t.Fatalf("no %s hierarchy", n)
	return ""
}

// A thread of this process left in a run's cgroup (a forker that could not
// move back) is never killed with the run: killAll kills the run's
// processes and says the thread is stuck, and this process lives on.
func TestKillAllNeverKillsThisProcess(t *testing.T) {
	_, c := v1Enter(t)
	sleeper := exec.Command("sleep", "60")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(DefaultUID, DefaultGID), Pdeathsig: syscall.SIGKILL}
	if err := c.start(sleeper, nil); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sleeper.Wait() }()

	in, back := make(chan error), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // the thread goes back before it is let go
		defer runtime.UnlockOSThread()
		home, err := threadTasksV1("pids")
		if err == nil {
			err = writeTasks(filepath.Join(c.paths["pids"], "tasks"))
		}
		in <- err
		<-back
		if err == nil {
			if err := writeTasks(home); err != nil {
				panic("cannot move the test's thread back: " + err.Error())
			}
		}
	}()
	if err := <-in; err != nil {
		close(back)
		t.Fatal(err)
	}
	err := c.killAll()
	close(back)
	<-done
	if err == nil || !strings.Contains(err.Error(), "stuck") {
		t.Errorf("killAll with a thread of this process in the cgroup: %v, want it said stuck", err)
	}
	if werr := <-waited; werr == nil || !strings.Contains(werr.Error(), "killed") {
		t.Errorf("the run's process: %v, want killed", werr)
	}
	if err := unix.Kill(os.Getpid(), 0); err != nil {
		t.Fatal(err)
	}
	if ours := threadsOfThisProcessIn(t, filepath.Join(c.paths["pids"], "tasks")); len(ours) > 0 {
		t.Errorf("the test's thread %v is still in the cgroup", ours)
	}
}

// parkHelperEnv makes the test binary a process whose forker cannot move
// back once (TestAForkerThatCannotLeaveIsParkedAndReplaced).
const parkHelperEnv = "HARNESSFACTS_TEST_PARK_HELPER"

// A forker that cannot leave a run's cgroups says so, kills what it
// started, and stays parked there while a new one serves the next starts;
// the run's killAll then says a thread is stuck and kills nothing of this
// process. In a helper process: the parked thread lives as long as it does.
func TestAForkerThatCannotLeaveIsParkedAndReplaced(t *testing.T) {
	requireBwrapHost(t)
	if cgroups.Mode() == cgroups.Unified {
		t.Skip("cgroup v2 here: the kernel places the command, no forker moves itself")
	}
	parent := fmt.Sprintf("harnessfacts-test-park-%d", os.Getpid())
	t.Cleanup(func() {
		// The helper's cgroups, the one its parked thread held among them.
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + parent)
		for _, d := range dirs {
			if err := removeV1(d); err != nil {
				t.Errorf("the helper's cgroups: %v", err)
			}
		}
	})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), parkHelperEnv+"="+parent)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	for _, want := range []string{"first: refused, parked", "second: started in its cgroup", "killAll: stuck", "alive"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the helper did not say %q:\n%s", want, out)
		}
	}
}

func parkHelper(parent string) int {
	say := func(format string, a ...any) { fmt.Printf(format+"\n", a...) }
	r, err := NewBwrapRunner(Options{CgroupParent: parent})
	if err != nil {
		say("helper-error: %v", err)
		return 1
	}
	first, err := newRunCgroup(r.opts, Limits{}.WithDefaults())
	if err != nil {
		say("helper-error: %v", err)
		return 1
	}
	// Every way back refused for the first start: the thread stays in
	// each of the run's hierarchies.
	var failing atomic.Bool
	failing.Store(true)
	moveBack = func(tasks string) error {
		if failing.Load() {
			return errors.New("refused by the test")
		}
		return writeTasks(tasks)
	}
	sleeper := exec.Command("sleep", "60")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(DefaultUID, DefaultGID), Pdeathsig: syscall.SIGKILL}
	err = first.start(sleeper, nil)
	failing.Store(false)
	if err != nil && strings.Contains(err.Error(), "parked") && sleeper.ProcessState != nil {
		say("first: refused, parked (%v)", err)
	} else {
		say("first: %v", err)
	}
	second, err := newRunCgroup(r.opts, Limits{}.WithDefaults())
	if err != nil {
		say("helper-error: %v", err)
		return 1
	}
	c := exec.Command("cat", "/proc/self/cgroup")
	var out bytes.Buffer
	c.Stdout = &out
	c.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(DefaultUID, DefaultGID)}
	if err := second.start(c, nil); err == nil && c.Wait() == nil && strings.Contains(out.String(), filepath.Base(second.(*v1Cgroup).paths[cgroup1.Pids])) {
		say("second: started in its cgroup")
	} else {
		say("second: %v %s", err, out.String())
	}
	_ = second.killAll()
	_ = second.remove()
	if err := first.killAll(); err != nil && strings.Contains(err.Error(), "stuck") {
		say("killAll: stuck (%v)", err)
	} else {
		say("killAll: %v", err)
	}
	say("alive")
	return 0
}

// lentParentHelperEnv makes the test binary a process of an unprivileged
// uid whose runs' cgroup parent is lent to it, and its own cgroup not.
const lentParentHelperEnv = "HARNESSFACTS_TEST_LENT_PARENT_HELPER"

// A caller that is not root, with a runs' parent lent to it but not its
// own cgroup, could move its forker into a run's cgroup and never back:
// it starts nothing there, says why, and leaves no thread behind.
func TestForkerOfAUserThatCannotMoveBackStartsNothing(t *testing.T) {
	requireBwrapHost(t)
	if cgroups.Mode() == cgroups.Unified {
		t.Skip("cgroup v2 here: the kernel places the command, no forker moves itself")
	}
	parent := fmt.Sprintf("harnessfacts-test-lent-%d", os.Getpid())
	var dirs []string
	t.Cleanup(func() {
		for _, d := range dirs {
			if err := removeV1(d); err != nil {
				t.Errorf("the helper's cgroups: %v", err)
			}
		}
	})
	for _, c := range v1Controllers() {
		d := filepath.Join("/sys/fs/cgroup", c, parent)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
		// Lent as cgroup v1 delegation lends: the folder and its files.
		for _, f := range []string{"", "tasks", "cgroup.procs"} {
			if err := os.Chown(filepath.Join(d, f), DefaultUID, DefaultGID); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The test binary, where the helper's uid may run it.
	exe := filepath.Join(testBase(t), "sandbox.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), lentParentHelperEnv+"="+parent)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(DefaultUID, DefaultGID)}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "refused: ") || !strings.Contains(string(out), "may not move back") {
		t.Errorf("the helper's start:\n%s", out)
	}
	left, _ := filepath.Glob("/sys/fs/cgroup/*/" + parent + "/" + cgroupPrefix + "/run-*/tasks")
	for _, f := range left {
		if b, _ := os.ReadFile(f); len(bytes.TrimSpace(b)) > 0 {
			t.Errorf("%s holds %s", f, b)
		}
	}
}

func lentParentHelper(parent string) int {
	cg, err := newRunCgroup(Options{CgroupParent: parent}, Limits{}.WithDefaults())
	if err != nil {
		fmt.Println("helper-error:", err)
		return 1
	}
	defer func() { _ = cg.remove() }()
	cmd := exec.Command("true")
	if err := cg.start(cmd, nil); err != nil {
		fmt.Println("refused:", err)
		return 0
	}
	_ = cmd.Wait()
	fmt.Println("started")
	return 0
}

// A start the forker is held on (an exec a hung file system holds) holds
// no other: after forkerBusy the next start goes to a new forker, in its
// own run's cgroup, and the held one finishes its own when let go.
func TestAForkerHeldByOneStartHoldsNoOther(t *testing.T) {
	_, held := v1Enter(t)
	_, next := v1Enter(t)
	release, holding := make(chan struct{}), make(chan struct{})
	var once sync.Once
	start, busy := startCmd, forkerBusy
	startCmd = func(cmd *exec.Cmd) error {
		first := false
		once.Do(func() { first = true })
		if first {
			close(holding)
			<-release
		}
		return start(cmd)
	}
	forkerBusy = 100 * time.Millisecond
	defer func() { startCmd, forkerBusy = start, busy }()

	first := exec.Command("true")
	first.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(DefaultUID, DefaultGID)}
	firstErr := make(chan error, 1)
	go func() { firstErr <- held.start(first, nil) }()
	<-holding

	second := exec.Command("cat", "/proc/self/cgroup")
	var out bytes.Buffer
	second.Stdout = &out
	second.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(DefaultUID, DefaultGID)}
	began := time.Now()
	err := next.start(second, nil)
	took := time.Since(began)
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	_ = second.Wait()
	if took > 5*time.Second {
		t.Errorf("the second start waited %s for the held one", took)
	}
	if p := next.paths[cgroup1.Pids]; !strings.Contains(out.String(), ":"+strings.TrimPrefix(p, v1MountOf(t, cgroup1.Pids))+"\n") {
		t.Errorf("the second command was not born in its cgroup %s:\n%s", p, out.String())
	}
	if err := <-firstErr; err != nil {
		t.Fatalf("the held start, let go: %v", err)
	}
	_ = first.Wait()
	for _, c := range []*v1Cgroup{held, next} {
		for _, f := range tasksFiles(c) {
			if ours := threadsOfThisProcessIn(t, f); len(ours) > 0 {
				t.Errorf("threads %v of this process are left in %s", ours, f)
			}
		}
	}
}
