package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
)

// testPreparer, while TestPreparedSandboxes runs, gives requireBwrapHost's
// runners sandboxes made ahead.
var testPreparer *Preparer

const preparedParentSuffix = "-prepared"

// startPreparer keeps one sandbox prepared, with this test binary as the
// spawner (TestMain serves spawn.Command), below a parent of its own.
func startPreparer(t *testing.T) *Preparer {
	t.Helper()
	requireBwrapHost(t)
	if cgroups.Mode() == cgroups.Unified {
		t.Skip("a cgroup v2 host starts bwrap inside its cgroup (CLONE_INTO_CGROUP): there is nothing to prepare, and NewPreparer returns nil")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := NewPreparer(Options{CgroupParent: testCgroupParent + preparedParentSuffix}, exe, 1, nil)
	if p == nil {
		t.Fatal("NewPreparer returned nil on a cgroup v1 host")
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		left, _ := filepath.Glob("/sys/fs/cgroup/*/" + testCgroupParent + preparedParentSuffix + "/" + cgroupPrefix + "/run-*")
		if len(left) > 0 {
			t.Errorf("prepared cgroups left after Close: %v", left)
		}
		if n := spawners(); n != 0 {
			t.Errorf("%d spawners left after Close", n)
		}
	})
	return p
}

// waitReady waits until p has a sandbox ready.
func waitReady(t *testing.T, p *Preparer) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); len(p.ready) == 0; time.Sleep(5 * time.Millisecond) {
		if err := p.Err(); err != nil {
			t.Fatalf("the Preparer stopped: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no sandbox prepared after 20s")
		}
	}
}

// spawners counts this process's children that are still spawners.
func spawners() int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), "\x00sandbox-spawn") && strings.HasPrefix(string(b), os.Args[0]) {
			n++
		}
	}
	return n
}

// The sandbox's contract holds the same when bwrap is born in a prepared
// cgroup by a spawner: the same tests, each of which must have used a
// prepared sandbox (so that none passes by starting the usual way).
func TestPreparedSandboxes(t *testing.T) {
	p := startPreparer(t)
	testPreparer = p
	t.Cleanup(func() { testPreparer = nil })
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"RunsAsUnprivilegedUserInRunDir", TestBwrapRunsAsUnprivilegedUserInRunDir},
		{"ExitCodeAndSignal", TestBwrapExitCodeAndSignal},
		{"HidesSecretsAndHostEnvironment", TestBwrapHidesSecretsAndHostEnvironment},
		{"EnvironmentNeverOnACommandLine", TestBwrapEnvironmentNeverOnACommandLine},
		{"WritesOutsideRunDirRefused", TestBwrapWritesOutsideRunDirRefused},
		{"ForkBombStoppedByProcessLimit", TestBwrapForkBombStoppedByProcessLimit},
		{"MemoryHogIsOOMKilled", TestBwrapMemoryHogIsOOMKilled},
		{"SocketBuffersCountInTheMemoryLimit", TestBwrapSocketBuffersCountInTheMemoryLimit},
		{"TimeoutKillsEscapedTree", TestBwrapTimeoutKillsEscapedTree},
		{"CancelKillsTree", TestBwrapCancelKillsTree},
		{"HugeOutputIsBounded", TestBwrapHugeOutputIsBounded},
		{"StdinReachesTheCommand", TestBwrapStdinReachesTheCommand},
		{"RunHasACPUShareOfItsOwn", TestBwrapRunHasACPUShareOfItsOwn},
		{"StartedIsCalledOnceBeforeTheEnd", TestBwrapStartedIsCalledOnceBeforeTheEnd},
		{"UserModeNetworkReachesOutsideNotLoopback", TestBwrapUserModeNetworkReachesOutsideNotLoopback},
		{"SeccompDeniesCallsInSandbox", TestSeccompDeniesCallsInSandbox},
		{"SetupFailureIsStartedAgain", TestBwrapSetupFailureIsStartedAgain},
		{"CommandThatFailsIsNotStartedAgain", TestBwrapCommandThatFailsIsNotStartedAgain},
		{"CrashDumpsNoCore", TestBwrapCrashDumpsNoCore},
		{"PtysAreBounded", TestBwrapPtysAreBounded},
	} {
		waitReady(t, p)
		before := p.taken.Load()
		t.Run(tc.name, tc.f)
		if p.taken.Load() == before {
			t.Errorf("%s started no run in a prepared sandbox: it proves nothing here", tc.name)
		}
	}
}

// A spawner that died while it waited is not used: the run starts the
// usual way, and the dead one's cgroup is removed.
func TestPreparedSpawnerThatDiedIsNotUsed(t *testing.T) {
	p := startPreparer(t)
	waitReady(t, p)
	z := <-p.ready
	_ = z.cmd.Process.Kill()
	for deadline := time.Now().Add(10 * time.Second); z.alive(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the killed spawner still looks alive")
		}
	}
	p.ready <- z
	r, err := NewBwrapRunner(Options{CgroupParent: testCgroupParent, Preparer: p})
	if err != nil {
		t.Fatal(err)
	}
	before := p.taken.Load()
	res, out := run(t, r, runDir(t, testBase(t), "sh", "-c", "echo ran"))
	if res.ExitCode != 0 || afterSetupRetries(out) != "ran\n" {
		t.Fatalf("%+v %q", res, out)
	}
	if p.taken.Load() != before {
		t.Error("the dead spawner was used")
	}
	if _, err := os.Stat(z.cg.(*v1Cgroup).paths["memory"]); !os.IsNotExist(err) {
		t.Errorf("the dead spawner's cgroup is still there: %v", err)
	}
}

// A spawner takes no uid 0 (nor a request without one): a sandbox never
// runs as host root, whatever the runner sends.
func TestSpawnerRefusesRoot(t *testing.T) {
	p := startPreparer(t)
	waitReady(t, p)
	z := p.take()
	defer func() { _ = z.discard() }()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	err = z.spawn("/bin/true", []string{"true"}, 0, 0, []*os.File{devnull})
	if err == nil || !strings.Contains(err.Error(), "refusing uid 0") {
		t.Fatalf("spawn as root: %v, want a refusal", err)
	}
}

// A spawner that cannot start leaves runs starting the usual way; Err
// says why, and the report hears of it once, not at every retry.
func TestPreparerWithoutSpawnerSaysWhy(t *testing.T) {
	r := requireBwrapHost(t)
	if cgroups.Mode() == cgroups.Unified {
		t.Skip("a cgroup v2 host prepares nothing")
	}
	var mu sync.Mutex
	var reports []error
	p := NewPreparer(Options{CgroupParent: testCgroupParent + preparedParentSuffix}, "/nonexistent/harnessfacts-sandbox-init", 1, func(err error) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, err)
	})
	defer func() { _ = p.Close() }()
	for deadline := time.Now().Add(10 * time.Second); p.Err() == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no error from a Preparer whose spawner does not exist")
		}
	}
	if !strings.Contains(p.Err().Error(), "/nonexistent/harnessfacts-sandbox-init") {
		t.Errorf("Err does not name the spawner: %v", p.Err())
	}
	time.Sleep(500 * time.Millisecond) // retries at 100, 200 ms: no new report
	mu.Lock()
	if len(reports) != 1 || reports[0] == nil || !strings.Contains(reports[0].Error(), "/nonexistent/harnessfacts-sandbox-init") {
		t.Errorf("reports %v, want the one failure, once", reports)
	}
	mu.Unlock()
	r.opts.Preparer = p
	if res, out := run(t, r, runDir(t, testBase(t), "sh", "-c", "echo ran")); res.ExitCode != 0 || afterSetupRetries(out) != "ran\n" {
		t.Fatalf("%+v %q", res, out)
	}
	left, _ := filepath.Glob("/sys/fs/cgroup/*/" + testCgroupParent + preparedParentSuffix + "/" + cgroupPrefix + "/run-*")
	if len(left) > 0 {
		t.Errorf("a failed preparation left cgroups: %v", left)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil { // a second Close (the deferred one is a third) does nothing
		t.Fatal(err)
	}
}

// TestPreparedSandboxGivesTheCommandItsProcessLimit: as
// TestCommandGetsItsProcessLimit, in a prepared sandbox. bwrap's own
// process (the spawner's child) was not counted on top: the command got one
// process less than its MaxProcesses, and under a limit of 1 could not start
// at all (sandbox-init's "resource temporarily unavailable", the agent's
// exit code 127).
func TestPreparedSandboxGivesTheCommandItsProcessLimit(t *testing.T) {
	requireBwrapHost(t)
	p := startPreparer(t)
	warm, err := NewBwrapRunner(Options{CgroupParent: testCgroupParent, Preparer: p})
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int64{1, 3, 8} {
		waitReady(t, p)
		before := p.taken.Load()
		started, ok := startedUnder(t, warm, limit)
		if p.taken.Load() == before {
			t.Fatalf("limit %d: the run did not start in a prepared sandbox", limit)
		}
		if ok && started != int(limit)-1 {
			t.Errorf("under a limit of %d processes the shell started %d more in a prepared sandbox, want %d", limit, started, limit-1)
		}
	}
}
