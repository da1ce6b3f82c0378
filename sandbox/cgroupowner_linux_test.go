package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestRunNameSaysItsMaker: a run cgroup's name carries this process's pid
// and start time, which read back as a live maker; a maker with this pid
// and another start time (the pid reused) or a pid that is gone is not
// alive, and names without a maker (an earlier version's run-<random>, a
// stray folder) read as none.
func TestRunNameSaysItsMaker(t *testing.T) {
	name := newRunName()
	o, ok := runOwner(name)
	if !ok || o.pid != os.Getpid() {
		t.Fatalf("runOwner(%q) = %+v, %v; want this process (%d)", name, o, ok, os.Getpid())
	}
	if !o.alive() {
		t.Errorf("this process, from %q, is not alive", name)
	}
	if (cgroupOwner{pid: o.pid, start: o.start + 1}).alive() {
		t.Error("this pid with another start time (a reused pid) reads as alive")
	}
	if gone, _ := runOwner(deadOwnerName(t)); gone.alive() {
		t.Errorf("a killed process (%+v) reads as alive", gone)
	}
	if again := newRunName(); again == name {
		t.Errorf("two run names alike: %q", name)
	}
	for _, n := range []string{"run-0123456789abcdef", "run-old", "run-x-1-ab", "run-12-y-ab", "run--1-ab", "run-0-5-ab", "evacuate-run-1-2-ab", fmt.Sprintf("run-%d", os.Getpid())} {
		if o, ok := runOwner(n); ok {
			t.Errorf("runOwner(%q) = %+v, want no maker", n, o)
		}
	}
}

// TestProcStartReadsPastTheCommandName: the start time is found after the
// command name however it is spelled (it may hold spaces and parentheses),
// here for a process named "x) 1 2 (y": it started after this process and
// before now (the kernel counts 100 ticks a second for user space), which
// no other field of its stat file would be.
func TestProcStartReadsPastTheCommandName(t *testing.T) {
	self, err := procStart(os.Getpid())
	if err != nil || self == 0 {
		t.Fatalf("procStart(self) = %d, %v", self, err)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	odd := filepath.Join(t.TempDir(), "x) 1 2 (y")
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(odd, b, 0o755); err != nil {
		t.Fatal(err)
	}
	p := exec.Command(odd, "30")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Process.Kill(); _ = p.Wait() }()
	start, err := procStart(p.Process.Pid)
	up, _ := os.ReadFile("/proc/uptime")
	var seconds float64
	_, _ = fmt.Sscan(string(up), &seconds)
	if err != nil || start < self || float64(start) > seconds*100+1 {
		t.Errorf("procStart of %q = %d, %v; want between this process's %d and now's %.0f", odd, start, err, self, seconds*100)
	}
	if _, err := procStart(1 << 30); err == nil {
		t.Error("procStart of a pid that is no process: no error")
	}
}
