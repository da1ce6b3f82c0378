package sandbox

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

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
// never moves. Eight at once, as a node's slots start them.
func TestForkerStartsTheCommandInTheRunsCgroupsAndLeavesThem(t *testing.T) {
	_, c := v1Enter(t)
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, 8)
	errs := make([]error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command("cat", "/proc/self/cgroup")
			cmd.Stdout = &outs[i]
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(DefaultUID, DefaultGID), Pdeathsig: syscall.SIGKILL}
			if errs[i] = c.start(cmd); errs[i] == nil {
				errs[i] = cmd.Wait()
			}
		}()
	}
	wg.Wait()
	for i := range 8 {
		if errs[i] != nil {
			t.Fatalf("start %d: %v", i, errs[i])
		}
		for n, p := range c.paths {
			rel := strings.TrimPrefix(p, v1MountOf(t, n))
			if !strings.Contains(outs[i].String(), ":"+rel+"\n") {
				t.Errorf("command %d was not born in the run's %s cgroup %s:\n%s", i, n, rel, outs[i].String())
			}
		}
	}
	for _, f := range tasksFiles(c) {
		if ours := threadsOfThisProcessIn(t, f); len(ours) > 0 {
			t.Errorf("threads %v of this process are left in %s", ours, f)
		}
	}
	if now, _ := os.ReadFile("/proc/self/cgroup"); !bytes.Equal(now, own) {
		t.Errorf("the main thread moved:\n%s\nwas\n%s", now, own)
	}
	if err := c.remove(); err != nil {
		t.Errorf("the run's cgroup cannot be removed after its commands: %v", err)
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
	if err := c.start(sleeper); err != nil {
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
