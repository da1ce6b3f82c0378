package sandbox

import (
	"bytes"
	"context"
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
// places the command (CLONE_INTO_CGROUP), no forker moves itself.
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
		t.Skip("cgroup v2 here: the kernel places the command, no forker moves itself")
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

// The tasks files stay root's while the forker starts the run's command,
// and a process of the run's uid cannot move root's processes in (the
// kernel checks the writer against the process it moves): nothing of the
// run's uid can put a host daemon under the run's limits, where the run's
// end would kill it.
func TestRunsUIDCannotMoveRootsProcessesIntoItsCgroup(t *testing.T) {
	_, c := v1Enter(t)
	victim := exec.Command("sleep", "60")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = victim.Process.Kill(); _ = victim.Wait() }()

	cmd := exec.Command("/bin/sh", "-c", "for f; do echo $0 2>/dev/null > $f && exit 1; done; exit 0", fmt.Sprint(victim.Process.Pid))
	cmd.Args = append(cmd.Args, tasksFiles(c)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: runAs(DefaultUID, DefaultGID)}
	if err := c.start(cmd, nil); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("uid %d moved root's pid %d into the run's cgroup: %v", DefaultUID, victim.Process.Pid, err)
	}
	for _, f := range tasksFiles(c) {
		if owner(t, f) != 0 {
			t.Errorf("%s belongs to uid %d", f, owner(t, f))
		}
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", victim.Process.Pid))
	if strings.Contains(string(b), "/harnessfacts/run-") {
		t.Errorf("root's process is in a run's cgroup: %s", b)
	}
}

// A bwrap the run's uid may not run is the sandbox's failure, said by Run,
// not the command's exit 126.
func TestBwrapTheRunsUIDCannotRunIsTheSandboxsFailure(t *testing.T) {
	requireBwrapHost(t)
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

// A v1 run cgroup is removed by rmdir alone (no walk of its control
// files): never while a process is in it, whether in the run's cgroup or
// in one below it (which nothing in a sandbox can make, but a run's end
// must not leave a process behind if something did); killAll finds and
// kills both, and remove then takes the cgroup below first.
func TestCgroupV1KillAllAndRemoveReachBelow(t *testing.T) {
	_, c := v1Enter(t)
	cmd := exec.Command("/bin/sh", "-c", "sleep 1000 & exec sleep 1000")
	err := c.start(cmd, nil)
	if err != nil {
		t.Fatal(err)
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
