package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
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

// requireBwrapHost fails (never skips) when the host cannot run the bwrap
// tests, saying what is missing: CI installs bubblewrap and runs as root.
func requireBwrapHost(t testing.TB) *BwrapRunner {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("these tests need root: they create cgroups and run bwrap as an unprivileged uid (run `go test` as root, as CI does)")
	}
	r, err := NewBwrapRunner(Options{CgroupParent: testCgroupParent})
	if err != nil {
		t.Fatalf("%v (CI installs it with apt-get install bubblewrap)", err)
	}
	return r
}

// testBase is a directory outside /tmp (which the sandbox masks with its own
// tmpfs), so that a write that escapes a run dir would land on the host
// where the test can see it.
func testBase(t testing.TB) string {
	t.Helper()
	base, err := os.MkdirTemp("/var/tmp", "hf-sandbox-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	return base
}

// runDir makes base/run (with a home inside) and a Spec for it.
func runDir(t testing.TB, base string, argv ...string) Spec {
	t.Helper()
	dir := filepath.Join(base, "run")
	if err := os.MkdirAll(filepath.Join(dir, "home"), 0o755); err != nil {
		t.Fatal(err)
	}
	return Spec{
		Argv:      argv,
		Dir:       dir,
		Env:       []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + filepath.Join(dir, "home"), "LANG=C.UTF-8", "TMPDIR=" + dir},
		ReadWrite: []string{dir},
		Limits:    Limits{Timeout: 60 * time.Second},
	}
}

// run runs spec and returns its result and combined output.
func run(t testing.TB, r Runner, spec Spec) (Result, string) {
	t.Helper()
	var out bytes.Buffer
	w := &lockedWriter{w: &out}
	spec.Stdout, spec.Stderr = w, w
	res, err := r.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("Run: %v (output %q)", err, out.String())
	}
	assertNoRunCgroups(t)
	return res, out.String()
}

// afterSetupRetries is out without what failed sandbox setups wrote before
// the start that ran the command: bwrap's message and the runner's note of
// each retry. A host mount that changes under bwrap (another package's
// test mounting a run dir at that moment, bubblewrap issue 650) makes the
// runner start the sandbox again, which a test of the command's exact
// output must not hold against it.
func afterSetupRetries(out string) string {
	const note = "starting the sandbox again ("
	if i := strings.LastIndex(out, note); i >= 0 {
		if j := strings.IndexByte(out[i:], '\n'); j >= 0 {
			return out[i+j+1:]
		}
	}
	return out
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// assertNoRunCgroups checks that every per-run cgroup was removed.
func assertNoRunCgroups(t testing.TB) {
	t.Helper()
	for _, pattern := range []string{
		"/sys/fs/cgroup/*/" + testCgroupParent + "/" + cgroupPrefix + "/run-*",
		"/sys/fs/cgroup/" + testCgroupParent + "/" + cgroupPrefix + "/run-*",
	} {
		left, _ := filepath.Glob(pattern)
		if len(left) > 0 {
			t.Errorf("per-run cgroups left behind: %v", left)
		}
	}
}

func TestBwrapRunsAsUnprivilegedUserInRunDir(t *testing.T) {
	r := requireBwrapHost(t)
	spec := runDir(t, testBase(t), "sh", "-c", `id -u; id -g; pwd; echo "$GREETING"; echo made > made.txt`)
	spec.Env = append(spec.Env, "GREETING=hello from the sandbox")
	res, out := run(t, r, spec)
	if res.ExitCode != 0 || res.Mode != ModeBwrap || res.Warning != "" {
		t.Fatalf("result %+v, output %q", res, out)
	}
	want := fmt.Sprintf("%d\n%d\n%s\nhello from the sandbox\n", DefaultUID, DefaultGID, spec.Dir)
	if afterSetupRetries(out) != want {
		t.Fatalf("output %q, want %q", out, want)
	}
	st, err := os.Stat(filepath.Join(spec.Dir, "made.txt"))
	if err != nil {
		t.Fatalf("the write inside the run dir did not reach it: %v", err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; uid != DefaultUID {
		t.Fatalf("file made in the sandbox is owned by host uid %d, want %d", uid, DefaultUID)
	}
	if res.PeakMemory <= 0 {
		t.Errorf("PeakMemory %d, want the cgroup's figure", res.PeakMemory)
	}
}

func TestBwrapExitCodeAndSignal(t *testing.T) {
	r := requireBwrapHost(t)
	base := testBase(t)
	res, _ := run(t, r, runDir(t, base, "sh", "-c", "exit 7"))
	if res.ExitCode != 7 || res.Signal != 0 {
		t.Fatalf("exit 7: %+v", res)
	}
	res, out := run(t, r, runDir(t, base, "sh", "-c", "cat; echo stdin-closed"))
	if res.ExitCode != 0 || afterSetupRetries(out) != "stdin-closed\n" {
		t.Fatalf("stdin: %+v %q", res, out)
	}
	res, _ = run(t, r, runDir(t, base, "sh", "-c", "kill -TERM $$"))
	if res.Signal != int(unix.SIGTERM) {
		t.Fatalf("killed by SIGTERM: %+v", res)
	}
}

func TestBwrapHidesSecretsAndHostEnvironment(t *testing.T) {
	r := requireBwrapHost(t)
	base := testBase(t)
	secretDir := filepath.Join(base, "agent-state")
	if err := os.MkdirAll(secretDir, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := "secret-" + randomToken(t)
	secretFile := filepath.Join(secretDir, "key")
	if err := os.WriteFile(secretFile, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	// The host token file is world-readable on purpose: only the mask
	// stands between it and the sandbox.
	tokenFile := filepath.Join(base, "token")
	if err := os.WriteFile(tokenFile, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	canary := "canary-" + randomToken(t)
	t.Setenv("HF_TEST_CANARY", canary)

	script := fmt.Sprintf(`
cat %[1]s/key 2>/dev/null
cat %[2]s 2>/dev/null
ls -A %[1]s
cat /proc/1/environ 2>/dev/null
cat /proc/%[3]d/environ 2>/dev/null
cat /proc/[0-9]*/environ 2>/dev/null
env
echo done`, secretDir, tokenFile, os.Getpid())
	spec := runDir(t, base, "sh", "-c", script)
	spec.Hidden = []string{secretDir, tokenFile, filepath.Join(base, "does-not-exist")}
	res, out := run(t, r, spec)
	if res.ExitCode != 0 || !strings.HasSuffix(out, "done\n") {
		t.Fatalf("result %+v, output %q", res, out)
	}
	if strings.Contains(out, secret) {
		t.Errorf("the planted secret was readable in the sandbox: %q", out)
	}
	if strings.Contains(out, canary) {
		t.Errorf("the host environment leaked into the sandbox: %q", out)
	}
	if b, err := os.ReadFile(secretFile); err != nil || string(b) != secret {
		t.Errorf("host secret changed: %q, %v", b, err)
	}
	if b, err := os.ReadFile(tokenFile); err != nil || string(b) != secret {
		t.Errorf("host token changed: %q, %v", b, err)
	}
}

// The run dir lives inside the node-agent's hidden state, and a credential
// copy inside the run dir is hidden too: both masks must hold.
func TestBwrapNestedHiddenAndRunDirs(t *testing.T) {
	r := requireBwrapHost(t)
	base := testBase(t)
	state := filepath.Join(base, "state")
	runD := filepath.Join(state, "runs", "r1")
	creds := filepath.Join(runD, ".creds")
	for _, d := range []string{runD, creds} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := "secret-" + randomToken(t)
	for _, f := range []string{filepath.Join(state, "node.key"), filepath.Join(creds, "token")} {
		if err := os.WriteFile(f, []byte(secret), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	spec := Spec{
		Argv:      []string{"sh", "-c", "cat ../../node.key .creds/token 2>/dev/null; ls -A ../.. .creds; echo ok > out.txt && echo wrote"},
		Dir:       runD,
		Env:       []string{"PATH=/usr/bin:/bin"},
		ReadWrite: []string{runD},
		Hidden:    []string{state, creds},
	}
	res, out := run(t, r, spec)
	if res.ExitCode != 0 || !strings.Contains(out, "wrote") || strings.Contains(out, secret) || strings.Contains(out, "node.key") || strings.Contains(out, "token") {
		t.Fatalf("result %+v, output %q", res, out)
	}
	for _, f := range []string{filepath.Join(state, "node.key"), filepath.Join(creds, "token")} {
		if b, err := os.ReadFile(f); err != nil || string(b) != secret {
			t.Errorf("%s changed on the host: %q %v", f, b, err)
		}
	}
}

// TestBwrapRunDirBelowAReadOnlyPrefix: a read-only bind that holds the
// hidden state and the run dir inside it (an agent CLI's install prefix
// above the run root, `--agent-clis DIR/bin` with the run root in DIR)
// uncovers the state, which is masked again; the run dir is then bound
// again over that mask, and the credential folder inside it masked again.
// The run used to fail at bwrap's chdir to its run dir, blamed on the
// agent.
func TestBwrapRunDirBelowAReadOnlyPrefix(t *testing.T) {
	r := requireBwrapHost(t)
	base := testBase(t)
	state := filepath.Join(base, "state")
	runD := filepath.Join(state, "runs", "r1")
	other := filepath.Join(state, "runs", "r2")
	creds := filepath.Join(runD, ".creds")
	for _, d := range []string{runD, creds, other, filepath.Join(base, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := "secret-" + randomToken(t)
	for _, f := range []string{filepath.Join(state, "node.key"), filepath.Join(creds, "token"), filepath.Join(other, "theirs")} {
		if err := os.WriteFile(f, []byte(secret), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "bin", "tool"), []byte("#!/bin/sh\necho tool-ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := Spec{
		Argv:      []string{"sh", "-c", "tool; cat ../../node.key .creds/token ../r2/theirs 2>/dev/null; ls -A ../.. .creds; echo ok > out.txt && echo wrote"},
		Dir:       runD,
		Env:       []string{"PATH=" + filepath.Join(base, "bin") + ":/usr/bin:/bin"},
		ReadOnly:  []string{base},
		ReadWrite: []string{runD},
		Hidden:    []string{state, creds},
	}
	res, out := run(t, r, spec)
	if res.ExitCode != 0 || !strings.Contains(out, "tool-ran") || !strings.Contains(out, "wrote") ||
		strings.Contains(out, secret) || strings.Contains(out, "node.key") || strings.Contains(out, "token") || strings.Contains(out, "r2") {
		t.Fatalf("result %+v, output %q", res, out)
	}
	if b, err := os.ReadFile(filepath.Join(runD, "out.txt")); err != nil || string(b) != "ok\n" {
		t.Errorf("the run dir's write did not reach the host: %q %v", b, err)
	}
}

func TestBwrapSaysWhichParentBlocksTheRunDir(t *testing.T) {
	r := requireBwrapHost(t)
	base := testBase(t)
	private := filepath.Join(base, "private")
	if err := os.MkdirAll(filepath.Join(private, "run"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(private, "run")
	_, err := r.Run(context.Background(), Spec{Argv: []string{"true"}, Dir: dir, ReadWrite: []string{dir}, Env: []string{"PATH=/usr/bin:/bin"}})
	if err == nil || !strings.Contains(err.Error(), private+" is not searchable by uid 65534") {
		t.Fatalf("Run below a private directory: %v", err)
	}
}

// No environment value may appear on any command line on the host while the
// command runs, and the command must still see it.
func TestBwrapEnvironmentNeverOnACommandLine(t *testing.T) {
	r := requireBwrapHost(t)
	base := testBase(t)
	secret := "cred-" + randomToken(t)
	spec := runDir(t, base, "sh", "-c", `printf %s "$API_KEY" > seen; touch started; exec sleep 60`)
	spec.Env = append(spec.Env, "API_KEY="+secret)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(ctx, spec)
		done <- err
	}()
	started := filepath.Join(spec.Dir, "started")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the command did not start: %v", <-done)
		}
	}
	var lines, bwraps int
	pids, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range pids {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		lines++
		if argv0, rest, ok := bytes.Cut(b, []byte{0}); ok && filepath.Base(string(argv0)) == "bwrap" && bytes.HasPrefix(rest, []byte("--args\x00")) {
			bwraps++
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s shows the secret: %q", p, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run after cancel: %v, want context.Canceled", err)
	}
	if b, _ := os.ReadFile(filepath.Join(spec.Dir, "seen")); string(b) != secret {
		t.Errorf("the command saw API_KEY=%q, want the secret", b)
	}
	if lines < 3 || bwraps == 0 {
		t.Errorf("read %d command lines, %d of bwrap: the check saw nothing", lines, bwraps)
	}
	assertNoRunCgroups(t)
}

func TestBwrapWritesOutsideRunDirRefused(t *testing.T) {
	r := requireBwrapHost(t)
	base := testBase(t)
	hostHome, err := os.UserHomeDir()
	if err != nil || hostHome == "" {
		hostHome = "/root"
	}
	name := "hf-escape-" + randomToken(t)
	targets := []string{
		"/etc/" + name,
		hostHome + "/../" + name,    // the host's $HOME/..
		"/proc/self/cwd/../" + name, // the run dir's parent, via proc
		"$HOME/../../" + name,       // the run dir's parent, via the sandbox HOME
		"/" + name,                  // the root
		"/usr/" + name,              // somewhere else read-only
		"/sys/fs/cgroup/" + name,    // cgroupfs
		"/proc/sys/kernel/" + name,  // procfs
		hostHome + "/" + name,       // the host home itself
		"/var/tmp/" + name,          // a world-writable host dir
		filepath.Dir(base) + "/" + name,
	}
	var script strings.Builder
	for _, p := range targets {
		fmt.Fprintf(&script, "if (echo x > %s) 2>/dev/null; then echo WROTE %s; else echo refused; fi\n", p, p)
	}
	// /tmp and /dev/shm are the sandbox's own tmpfs: writable, never the host's.
	script.WriteString("echo x > /tmp/" + name + " && echo x > /dev/shm/" + name + " && echo inside > inside.txt && echo control-ok\n")
	res, out := run(t, r, runDir(t, base, "sh", "-c", script.String()))
	if res.ExitCode != 0 || !strings.Contains(out, "control-ok") {
		t.Fatalf("result %+v, output %q", res, out)
	}
	if strings.Contains(out, "WROTE") {
		t.Errorf("writes outside the run dir succeeded:\n%s", out)
	}
	if got := strings.Count(out, "refused"); got != len(targets) {
		t.Errorf("%d refusals, want %d:\n%s", got, len(targets), out)
	}
	for _, p := range []string{"/etc/" + name, "/" + name, "/usr/" + name, hostHome + "/" + name, filepath.Join(base, name), "/var/tmp/" + name, "/dev/shm/" + name, "/tmp/" + name, filepath.Join(filepath.Dir(hostHome), name)} {
		if _, err := os.Lstat(p); err == nil {
			os.Remove(p)
			t.Errorf("%s appeared on the host", p)
		}
	}
}

// TestCommandGetsItsProcessLimit: MaxProcesses is the command's own. bwrap's
// process and its pid 1 share the cgroup and come on top: a limit of 1 is
// the command alone (it used to fail bwrap's fork for pid 1), and under a
// limit of 8 a shell starts 7 background processes, no fewer and no more.
func TestCommandGetsItsProcessLimit(t *testing.T) {
	r := requireBwrapHost(t)
	for _, limit := range []int64{1, 3, 8} {
		if started, ok := startedUnder(t, r, limit); ok && started != int(limit)-1 {
			t.Errorf("under a limit of %d processes the shell started %d more, want %d", limit, started, limit-1)
		}
	}
}

// TestProcessLimitWhileTheForkerIsSlowToLeave: on v1 the forker's thread
// starts bwrap from inside the run's cgroup and counts in its pids until
// it moves back. A thread kept from running after the exec (a busy node)
// cost the run a process: under a limit of 8 the shell started 6 (seen in
// CI under load). The thread held here in the run's cgroups for 300 ms
// after bwrap's exec, long after the shell has started its processes:
// still 7, and never more.
func TestProcessLimitWhileTheForkerIsSlowToLeave(t *testing.T) {
	r := requireBwrapHost(t)
	if !cgroupV1(t, r) {
		t.Skip("cgroup v2 here: the kernel places the command (CLONE_INTO_CGROUP), no forker moves itself")
	}
	var once sync.Once
	startCmd = func(c *exec.Cmd) error {
		err := c.Start()
		once.Do(func() { time.Sleep(300 * time.Millisecond) })
		return err
	}
	t.Cleanup(func() { startCmd = (*exec.Cmd).Start })
	if started, ok := startedUnder(t, r, 8); ok && started != 7 {
		t.Errorf("under a limit of 8 processes, the forker slow to leave, the shell started %d more, want 7", started)
	}
}

// startedUnder runs a shell under a limit of limit processes that starts
// up to 40 background processes, and returns how many it started; false
// (said) when bwrap itself failed.
func startedUnder(t *testing.T, r *BwrapRunner, limit int64) (int, bool) {
	t.Helper()
	spec := runDir(t, testBase(t), "sh", "-c", `n=0; while [ $n -lt 40 ]; do sleep 5 & n=$((n+1)); echo $n > count; done`)
	spec.Limits = Limits{MaxProcesses: limit, Timeout: 30 * time.Second}
	_, out := run(t, r, spec)
	if strings.Contains(out, "bwrap:") {
		t.Errorf("limit %d: bwrap failed: %s", limit, truncate(out))
		return 0, false
	}
	started := 0
	if b, err := os.ReadFile(filepath.Join(spec.Dir, "count")); err == nil {
		started, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	return started, true
}

func TestBwrapForkBombStoppedByProcessLimit(t *testing.T) {
	r := requireBwrapHost(t)
	marker := "HF_MARKER=bomb-" + randomToken(t)
	const limit = 64
	spec := runDir(t, testBase(t), "sh", "-c", `f(){ f | f & }; f; sleep 3; echo parent-alive`)
	spec.Env = append(spec.Env, marker)
	spec.Limits = Limits{MaxProcesses: limit, Timeout: 30 * time.Second}

	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if n := int64(processesWithMarker(marker)); n > peak.Load() {
				peak.Store(n)
			}
		}
	}()
	res, out := run(t, r, spec)
	close(stop)
	wg.Wait()
	if !strings.Contains(out, "Cannot fork") && !strings.Contains(out, "Resource temporarily unavailable") {
		t.Errorf("no fork failure in the output: the limit was not hit? %q", truncate(out))
	}
	if peak.Load() > limit {
		t.Errorf("saw %d processes of the bomb at once, limit %d", peak.Load(), limit)
	}
	// The fork failure above proves the bomb ran into the limit. How many
	// of its processes the 20 ms sampler sees is luck (the whole bomb can be
	// over in 40 ms), so the sample only bounds it from above.
	if n := processesWithMarker(marker); n != 0 {
		t.Errorf("%d processes of the bomb survived the run", n)
	}
	if res.TimedOut {
		t.Errorf("the bomb ran into the timeout: %+v", res)
	}
	if err := exec.Command("true").Run(); err != nil {
		t.Errorf("the host cannot fork after the bomb: %v", err)
	}
}

func truncate(s string) string {
	if len(s) > 400 {
		return s[:200] + " … " + s[len(s)-200:]
	}
	return s
}

func TestBwrapMemoryHogIsOOMKilled(t *testing.T) {
	r := requireBwrapHost(t)
	const limit = 128 << 20
	// tail buffers a whole "line", and /dev/zero has no newline.
	spec := runDir(t, testBase(t), "tail", "/dev/zero")
	spec.Limits = Limits{MemoryBytes: limit, Timeout: 60 * time.Second}
	res, out := run(t, r, spec)
	if !res.OOMKilled {
		t.Fatalf("not reported as OOM-killed: %+v, output %q", res, out)
	}
	if res.Signal != int(unix.SIGKILL) || res.TimedOut {
		t.Errorf("want killed by SIGKILL before the timeout: %+v", res)
	}
	if res.PeakMemory < limit*9/10 || res.PeakMemory > limit {
		t.Errorf("peak memory %d, want close to the limit %d", res.PeakMemory, limit)
	}
}

func TestBwrapTimeoutKillsEscapedTree(t *testing.T) {
	r := requireBwrapHost(t)
	marker := "HF_MARKER=escape-" + randomToken(t)
	// A daemon that leaves the session twice over and ignores SIGTERM, a
	// grandchild doing the same, and a parent that ignores SIGTERM too.
	script := `
trap '' TERM
setsid sh -c 'trap "" TERM; (trap "" TERM; setsid sleep 1000 & sleep 1000) & sleep 1000' &
(setsid sh -c 'trap "" TERM; sleep 1000' &) &
touch started
sleep 1000`
	spec := runDir(t, testBase(t), "sh", "-c", script)
	spec.Env = append(spec.Env, marker)
	spec.Limits.Timeout = 3 * time.Second
	// The most processes of the tree seen at once while it ran: on a busy
	// machine the last of them may start well after "started" (the run's
	// processes share one CPU weight), so it is counted until the timeout.
	var during atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for deadline := time.Now().Add(spec.Limits.Timeout); time.Now().Before(deadline) && during.Load() < 6; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(spec.Dir, "started")); err == nil {
				during.Store(max(during.Load(), int64(processesWithMarker(marker))))
			}
		}
	}()
	res, out := run(t, r, spec)
	<-done
	if !res.TimedOut || res.Signal != int(unix.SIGKILL) {
		t.Fatalf("want timed out and killed: %+v, output %q", res, out)
	}
	if n := processesWithMarker(marker); n != 0 {
		t.Fatalf("%d processes survived the timeout", n)
	}
	if n := during.Load(); n < 6 {
		t.Errorf("saw only %d processes of the tree while it ran; the test proves nothing", n)
	}
}

func TestBwrapCancelKillsTree(t *testing.T) {
	r := requireBwrapHost(t)
	marker := "HF_MARKER=cancel-" + randomToken(t)
	spec := runDir(t, testBase(t), "sh", "-c", `setsid sh -c 'trap "" TERM; sleep 1000' & sleep 1000`)
	spec.Env = append(spec.Env, marker)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res, err := r.Run(ctx, spec)
	if !errors.Is(err, context.DeadlineExceeded) && !res.TimedOut {
		t.Fatalf("Run: %+v, %v", res, err)
	}
	if n := processesWithMarker(marker); n != 0 {
		t.Fatalf("%d processes survived the cancel", n)
	}
	assertNoRunCgroups(t)
}

func TestBwrapHugeOutputIsBounded(t *testing.T) {
	r := requireBwrapHost(t)
	const size = 1 << 30
	const keep = 64 << 10
	spec := runDir(t, testBase(t), "head", "-c", fmt.Sprint(size), "/dev/zero")
	capture := NewCapture(keep)
	spec.Stdout = capture
	var stderr bytes.Buffer
	spec.Stderr = &stderr

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
		}
	}()
	res, err := r.Run(context.Background(), spec)
	close(stop)
	wg.Wait()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run: %+v, %v, stderr %q", res, err, stderr.String())
	}
	if capture.Total() != size || capture.Dropped() != size-keep || !capture.Truncated() {
		t.Fatalf("total %d dropped %d, want %d and %d", capture.Total(), capture.Dropped(), size, size-keep)
	}
	if grew := int64(peak.Load()) - int64(before.HeapInuse); grew > 16<<20 {
		t.Fatalf("heap grew by %d bytes while 1 GiB streamed through", grew)
	}
}

// openPTY returns a pseudo-terminal's master and slave.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

func TestBwrapTIOCSTIUnshareMountRefused(t *testing.T) {
	r := requireBwrapHost(t)
	base := testBase(t)
	// Give the sandbox a real terminal as stdout: TIOCSTI on it would push
	// input into whatever reads the terminal on the host.
	master, slave := openPTY(t)
	script := `
perl -e 'my $c = "x"; ioctl(STDOUT, 0x5412, $c) ? print STDERR "TIOCSTI stdout worked\n" : print STDERR "TIOCSTI stdout refused: $!\n"'
perl -e 'open(my $t, "+<", "/dev/tty") or do { print STDERR "TIOCSTI tty refused: $!\n"; exit }; my $c = "x"; ioctl($t, 0x5412, $c) ? print STDERR "TIOCSTI tty worked\n" : print STDERR "TIOCSTI tty refused: $!\n"'
for c in "unshare -U true" "unshare -r true" "unshare -m true" "unshare -n true" "unshare -p -f true" "mount -t tmpfs none /mnt" "mount --bind /run /mnt" "mount -o remount,rw /"; do
  if $c 2>/dev/null; then echo "$c worked" >&2; else echo "$c refused" >&2; fi
done`
	spec := runDir(t, base, "sh", "-c", script)
	var stderr bytes.Buffer
	spec.Stdout, spec.Stderr = slave, &stderr
	res, err := r.Run(context.Background(), spec)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run: %+v, %v, %q", res, err, stderr.String())
	}
	out := stderr.String()
	if strings.Contains(out, "worked") || strings.Count(out, "refused") != 10 {
		t.Fatalf("escapes inside the sandbox:\n%s", out)
	}
	// Nothing was pushed into the terminal's input queue.
	if err := unix.SetNonblock(int(master.Fd()), true); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.IoctlGetInt(int(slave.Fd()), unix.TIOCINQ); err != nil || n != 0 {
		t.Fatalf("terminal input queue holds %d bytes (%v)", n, err)
	}
	assertNoRunCgroups(t)
}

func TestBwrapNetworkNoneCannotReachHostLoopback(t *testing.T) {
	r := requireBwrapHost(t)
	// A listener on the host's 127.0.0.1 (local only, nothing leaves the host).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	defer wg.Wait()
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	connect := fmt.Sprintf(`require("net").connect(%d, "127.0.0.1").on("connect", () => { console.log("CONNECTED"); process.exit(0) }).on("error", e => { console.log("REFUSED " + e.code); process.exit(3) })`, port)
	base := testBase(t)

	res, out := run(t, r, runDir(t, base, "node", "-e", connect))
	if res.ExitCode != 3 || !strings.Contains(out, "REFUSED") || accepted.Load() != 0 {
		t.Fatalf("network None reached the host: %+v %q, accepted %d", res, out, accepted.Load())
	}
	// The same program with the host network connects: the refusal above
	// came from the namespace, not from a broken test.
	spec := runDir(t, base, "node", "-e", connect)
	spec.Network = NetworkShared
	res, out = run(t, r, spec)
	awaitCount(&accepted, 1)
	if res.ExitCode != 0 || !strings.Contains(out, "CONNECTED") || accepted.Load() != 1 {
		t.Fatalf("network Shared: %+v %q, accepted %d", res, out, accepted.Load())
	}
}

// TestBwrapNulCannotAddAnOption: bwrap's options travel NUL-separated
// (--args), so a value holding a NUL would add an option of its own:
// "x\x00--share-net" in a prompt or a Secret put the agent on the host's
// network (a review found it). Such a spec is refused before bwrap starts
// (the payload, which would report the host's loopback as reachable, never
// runs), and argsFile refuses it as well.
func TestBwrapNulCannotAddAnOption(t *testing.T) {
	r := requireBwrapHost(t)
	base := testBase(t)
	for _, inject := range []func(*Spec){
		func(s *Spec) { s.Env = append(s.Env, "HARNESSFACTS_PROMPT=x\x00--share-net") },
		func(s *Spec) { s.Argv = append(s.Argv, "x\x00--share-net") },
	} {
		spec := runDir(t, base, "sh", "-c", "echo RAN; cat /proc/net/dev")
		inject(&spec)
		var out bytes.Buffer
		spec.Stdout, spec.Stderr = &out, &out
		res, err := r.Run(context.Background(), spec)
		if err == nil || !strings.Contains(err.Error(), "NUL") || strings.Contains(out.String(), "RAN") {
			t.Errorf("a NUL in %v / %v: %+v, %v, output %q", spec.Argv, spec.Env, res, err, out.String())
		}
	}
	if f, err := argsFile([]string{"--setenv", "K", "x\x00--share-net"}); err == nil {
		f.Close()
		t.Error("argsFile took an argument holding a NUL")
	}
}

// awaitCount waits up to five seconds for an accept loop's count to reach
// want: a connection is made once it is in the listener's backlog, so the
// client may have printed and exited before the loop counted it (seen
// under load in CI).
func awaitCount(n *atomic.Int32, want int32) {
	for deadline := time.Now().Add(5 * time.Second); n.Load() < want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBwrapNodeRunsUnderDefaultLimits(t *testing.T) {
	r := requireBwrapHost(t)
	prog := `const big = Buffer.alloc(256 << 20, 1); const a = new Array(5e6).fill(7);
require("child_process").execFileSync("true");
console.log("node", process.version, big.length, a.length)`
	res, out := run(t, r, runDir(t, testBase(t), "node", "-e", prog))
	if res.ExitCode != 0 || !strings.HasPrefix(out, "node v") || res.OOMKilled {
		t.Fatalf("node under default limits: %+v %q", res, out)
	}
	if res.PeakMemory < 256<<20 || res.PeakMemory > DefaultMemoryBytes {
		t.Errorf("peak memory %d, want between 256 MiB and the default limit", res.PeakMemory)
	}
}

func TestBwrapArgsCarryNoValuesOnTheCommandLine(t *testing.T) {
	spec := Spec{Argv: []string{"agent", "--flag"}, Dir: "/run/x", Env: []string{"K=v1", "EMPTY=", "EQ=a=b"}, ReadWrite: []string{"/run/x"}}
	args := bwrapArgs(spec, false)
	joined := strings.Join(args, "\x00")
	for _, want := range []string{"--clearenv\x00--setenv\x00K\x00v1", "--setenv\x00EMPTY\x00\x00", "--setenv\x00EQ\x00a=b", "--bind\x00/run/x\x00/run/x", "--chdir\x00/run/x"} {
		if !strings.Contains(joined, want) {
			t.Errorf("args lack %q: %q", want, args)
		}
	}
	if strings.Contains(joined, "--share-net") {
		t.Errorf("network None shares the network: %q", args)
	}
	spec.Network = NetworkShared
	if !strings.Contains(strings.Join(bwrapArgs(spec, false), " "), "--share-net") {
		t.Errorf("network Shared lacks --share-net")
	}
}

func TestPreflightReportsBwrap(t *testing.T) {
	requireBwrapHost(t)
	got := Preflight(context.Background(), Options{})
	if len(got) != 2 || got[0].Mode != ModeBwrap || !got[0].Available {
		t.Fatalf("Preflight = %+v", got)
	}
	// As root: each sandbox has a /dev of its own, its ptys bounded.
	if want := fmt.Sprintf("a /dev of its own with at most %d ptys per sandbox", MaxPtys); !strings.Contains(got[0].Reason, want) {
		t.Errorf("the preflight's verdict %q does not say %q", got[0].Reason, want)
	}
	// Where no device node can be made, a devpts over --dev's, said so.
	mknodRefused.Store(true)
	got = Preflight(context.Background(), Options{})
	mknodRefused.Store(false)
	if want := fmt.Sprintf("at most %d ptys per sandbox (a devpts over bwrap's --dev", MaxPtys); len(got) == 0 || !strings.Contains(got[0].Reason, want) {
		t.Errorf("the preflight's verdict without mknod %+v does not say %q", got, want)
	}
	bad := Preflight(context.Background(), Options{Bwrap: "/nonexistent/bwrap"})
	if bad[0].Available || !strings.Contains(bad[0].Reason, "install Debian's bubblewrap package") {
		t.Fatalf("Preflight with a missing bwrap = %+v", bad)
	}
	if _, _, err := New(context.Background(), PolicyRequired, Options{Bwrap: "/nonexistent/bwrap"}); !errors.Is(err, ErrNoSandbox) {
		t.Fatalf("New(Required) without bwrap: %v", err)
	}
	rn, _, err := New(context.Background(), PolicyAllowFallback, Options{Bwrap: "/nonexistent/bwrap"})
	if err != nil || rn.Mode() != ModePlain {
		t.Fatalf("New(AllowFallback) without bwrap: %v, %v", rn, err)
	}
	rn, _, err = New(context.Background(), PolicyRequired, Options{})
	if err != nil || rn.Mode() != ModeBwrap {
		t.Fatalf("New(Required) with bwrap: %v, %v", rn, err)
	}
}

// The v2 code path cannot set limits on this kind of host (its memory and
// pids controllers are bound to v1), but the unified hierarchy is mounted
// without controllers: birth in the cgroup and cgroup.kill still work there.
func TestCgroupV2PlacementAndKill(t *testing.T) {
	requireBwrapHost(t)
	mount := "/sys/fs/cgroup"
	if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.procs"); err == nil {
		mount = "/sys/fs/cgroup/unified"
	} else if _, err := os.Stat("/sys/fs/cgroup/cgroup.procs"); err != nil {
		t.Fatal("no cgroup v2 hierarchy mounted at /sys/fs/cgroup or /sys/fs/cgroup/unified")
	}
	own, err := ownCgroupV2(mount)
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(cgroupPrefix, newRunName())
	cg, err := newV2Cgroup(mount, own, name, Limits{}.WithDefaults(), mount == "/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	defer removeRunParent(filepath.Dir(cg.dir)) // made here, not by newRunCgroup
	defer cg.remove()
	cmd := exec.Command("sh", "-c", "setsid sleep 1000 & sleep 1000")
	if err := cg.start(cmd, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
	if !strings.Contains(string(b), "0::"+filepath.Join("/", own, name)+"\n") {
		t.Fatalf("child not born in the cgroup: %q", b)
	}
	time.Sleep(100 * time.Millisecond)
	if err := cg.killAll(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if procs, _ := cg.m.Procs(true); len(procs) != 0 {
		t.Fatalf("processes left: %v", procs)
	}
	if err := cg.remove(); err != nil {
		t.Fatal(err)
	}
}

// evacuateToLeaf empties a v2 cgroup into a leaf; done here on a test
// cgroup of the unified hierarchy with a process of the test's own.
func TestCgroupV2EvacuateToLeaf(t *testing.T) {
	requireBwrapHost(t)
	mount := "/sys/fs/cgroup"
	if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.procs"); err == nil {
		mount = "/sys/fs/cgroup/unified"
	}
	own, err := ownCgroupV2(mount)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mount, own, cgroupPrefix, "evacuate-"+newRunName())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.Remove(filepath.Join(dir, "agent"))
		os.Remove(dir)
		// The "harnessfacts" folder MkdirAll made, when no other
		// test's cgroup is in it: nothing left in the host's tree.
		os.Remove(filepath.Dir(dir))
	}()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprint(cmd.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	if err := evacuateToLeaf(dir, "agent"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); len(bytes.TrimSpace(b)) != 0 {
		t.Errorf("processes left in the parent: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "agent", "cgroup.procs")); strings.TrimSpace(string(b)) != fmt.Sprint(cmd.Process.Pid) {
		t.Errorf("leaf holds %q, want the moved pid", b)
	}
}

// The payload of a user-mode network's sandbox (whose stack is attached
// before bwrap starts, in the runner's namespace) sees its own argv and no
// descriptor but its three: nothing bwrap was given for its options, the
// stack or the namespace is left to it.
func TestBwrapUserModePayloadSeesOnlyItsOwn(t *testing.T) {
	r := requireBwrapHost(t)
	spec := runDir(t, testBase(t), "sh", "-c", `echo "$0 $1" > ran.txt; ls /proc/self/fd | tr '\n' ' ' >> ran.txt`, "arg0", "arg1")
	spec.Network = NetworkUserMode
	if res, out := run(t, r, spec); res.ExitCode != 0 {
		t.Fatalf("exit %d: %q", res.ExitCode, out)
	}
	got, err := os.ReadFile(filepath.Join(spec.Dir, "ran.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// ls's own directory descriptor is the one past the three.
	if string(got) != "arg0 arg1\n0 1 2 3 " {
		t.Errorf("the payload saw %q: want its own argv and descriptors 0, 1, 2 (and ls's 3)", got)
	}
}

// bwrap is born in its run's cgroup, on cgroup v1 too (its shell moved
// itself in before it became bwrap), so the sandbox's cgroup namespace is
// rooted there: the payload sees its own cgroup as "/" in every hierarchy
// that bounds it, nothing of the host's cgroup paths, and no descriptor of
// the shell's. (A child moved in after bwrap made the namespace sees the
// path from where it was made.)
func TestBwrapIsBornInItsCgroup(t *testing.T) {
	r := requireBwrapHost(t)
	spec := runDir(t, testBase(t), "sh", "-c", `cat /proc/self/cgroup; echo fds $(ls /proc/self/fd | tr '\n' ' ')`)
	res, out := run(t, r, spec)
	if res.ExitCode != 0 {
		t.Fatalf("%+v %q", res, out)
	}
	hierarchies := 0
	for _, line := range strings.Split(out, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" || slices.Contains(strings.Split(parts[1], ","), "memory") || slices.Contains(strings.Split(parts[1], ","), "pids") {
			hierarchies++
			if parts[2] != "/" {
				t.Errorf("the payload is at %q in %q: not born in the run's cgroup", parts[2], parts[1])
			}
		}
	}
	if hierarchies == 0 {
		t.Fatalf("no memory, pids or unified line in /proc/self/cgroup: %q", out)
	}
	if !strings.Contains(out, "fds 0 1 2 3\n") {
		t.Errorf("the payload has descriptors beyond its stdio (3 is ls's own): %q", out)
	}
}

// A v1 cgroup the command cannot be born in (removed under it) fails the
// start with an error that says so, and nothing runs: never a command
// started outside its cgroup.
func TestCommandThatCannotEnterItsCgroupSaysSo(t *testing.T) {
	r := requireBwrapHost(t)
	if !cgroupV1(t, r) {
		t.Skip("cgroup v2 here: the kernel places the command (CLONE_INTO_CGROUP), no forker moves itself")
	}
	cg, err := newRunCgroup(r.opts, Limits{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := cg.remove(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", "touch ran")
	cmd.Dir = dir
	err = cg.start(cmd, nil)
	if err == nil {
		_ = cmd.Wait()
	}
	if err == nil || !strings.Contains(err.Error(), "cgroup v1") || !strings.Contains(err.Error(), "tasks") {
		t.Errorf("start in a removed cgroup: %v, want the failure to enter it", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("the command ran outside its cgroup")
	}
}

// A daemon's world-writable socket under /run (the system D-Bus, journald
// and any 0666 daemon socket live there) is out of the sandbox's sight; the
// same socket in a folder the run binds is reachable, so the refusal is the
// mask's. An abstract socket on the host is out of reach too: it belongs to
// the host's network namespace.
func TestBwrapHostSocketsUnreachable(t *testing.T) {
	r := requireBwrapHost(t)
	base := testBase(t)
	hostDir, err := os.MkdirTemp("/run", "hf-socket-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostDir) })
	if err := os.Chmod(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	listen := func(network, addr string) net.Listener {
		ln, err := net.Listen(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		if network == "unix" && addr[0] != '@' {
			if err := os.Chmod(addr, 0o666); err != nil {
				t.Fatal(err)
			}
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				c.Close()
			}
		}()
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	runSock := filepath.Join(hostDir, "daemon.sock")
	listen("unix", runSock)
	abstract := "@hf-socket-test-" + randomToken(t)
	listen("unix", abstract)
	spec := runDir(t, base)
	bound := filepath.Join(spec.Dir, "bound.sock")
	listen("unix", bound)

	connect := func(path string) string {
		return fmt.Sprintf(`require("net").connect({path: %q}).on("connect", () => { console.log("CONNECTED"); process.exit(0) }).on("error", e => { console.log("REFUSED " + e.code); process.exit(3) })`, path)
	}
	for _, tc := range []struct{ name, path string }{
		{"a 0666 socket under /run", runSock},
		{"the same socket by /var/run", strings.Replace(runSock, "/run/", "/var/run/", 1)},
		{"an abstract socket", "\x00" + abstract[1:]},
	} {
		spec.Argv = []string{"node", "-e", connect(tc.path)}
		res, out := run(t, r, spec)
		if res.ExitCode != 3 || !strings.Contains(out, "REFUSED") {
			t.Errorf("%s: the sandbox reached it: %+v %q", tc.name, res, out)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("host sockets accepted %d connections from the sandbox", n)
	}
	spec.Argv = []string{"node", "-e", connect(bound)}
	res, out := run(t, r, spec)
	awaitCount(&accepted, 1)
	if res.ExitCode != 0 || !strings.Contains(out, "CONNECTED") || accepted.Load() != 1 {
		t.Fatalf("a socket in the run dir: %+v %q, accepted %d (the refusals above prove nothing)", res, out, accepted.Load())
	}
	// The host itself reaches both: the sockets worked.
	for _, addr := range []string{runSock, abstract} {
		c, err := net.Dial("unix", addr)
		if err != nil {
			t.Fatalf("host connect %s: %v", addr, err)
		}
		c.Close()
	}
}

// The host's cgroup tree (every pod's and container's cgroup on a
// Kubernetes node, with their memory and CPU figures, and the other runs')
// is out of the sandbox's sight: /sys/fs/cgroup is an empty folder there.
func TestBwrapHostCgroupTreeHidden(t *testing.T) {
	r := requireBwrapHost(t)
	host, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil || len(host) == 0 {
		t.Fatalf("the host's /sys/fs/cgroup: %d entries, %v (the check below would prove nothing)", len(host), err)
	}
	spec := runDir(t, testBase(t), "sh", "-c", `ls -A /sys/fs/cgroup; echo "entries:$(ls -A /sys/fs/cgroup | wc -l)"; ls -A /sys | grep -qx kernel && echo sys-kept`)
	res, out := run(t, r, spec)
	if res.ExitCode != 0 || !strings.Contains(out, "entries:0\n") {
		t.Fatalf("the sandbox sees the host's cgroups: %+v %q", res, out)
	}
	// The rest of /sys stays as it was: only what describes the node is
	// masked.
	if !strings.Contains(out, "sys-kept") {
		t.Fatalf("/sys itself went missing: %q", out)
	}
}

// The node's network interfaces (their names, hardware addresses and live
// traffic counters: every pod's veth on a Kubernetes node) are out of the
// sandbox's sight, by /sys/class/net and by each interface's own folder,
// while the CPU folders tools read for the processor count stay.
func TestBwrapHostNetworkDevicesHidden(t *testing.T) {
	r := requireBwrapHost(t)
	host, err := os.ReadDir("/sys/class/net")
	if err != nil || len(host) == 0 {
		t.Fatalf("the host's /sys/class/net: %d entries, %v (the check below would prove nothing)", len(host), err)
	}
	var dirs []string
	for _, e := range host {
		dev, err := filepath.EvalSymlinks(filepath.Join("/sys/class/net", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dev)
	}
	script := `n=$(ls -A /sys/class/net | wc -l); echo "class:$n"`
	for _, d := range dirs {
		script += fmt.Sprintf(`; [ -e %q ] && echo "seen %s"`, filepath.Join(d, "statistics", "rx_bytes"), d)
	}
	script += `; ls /sys/devices/system/cpu | grep -qx online && echo cpu-kept; true`
	spec := runDir(t, testBase(t), "sh", "-c", script)
	res, out := run(t, r, spec)
	if res.ExitCode != 0 || !strings.Contains(out, "class:0\n") || strings.Contains(out, "seen ") {
		t.Fatalf("the sandbox sees the host's interfaces %v: %+v %q", dirs, res, out)
	}
	if !strings.Contains(out, "cpu-kept") {
		t.Fatalf("/sys/devices/system/cpu went missing: %q", out)
	}
}

// nodeNetDirs finds each interface's folder from its link alone: the
// folders it names are the real ones (what EvalSymlinks says), and every
// interface outside /sys/devices/virtual/net (masked whole) has one.
func TestNodeNetDirsAreTheRealFolders(t *testing.T) {
	host, err := os.ReadDir("/sys/class/net")
	if err != nil || len(host) == 0 {
		t.Skipf("no /sys/class/net here (%v)", err)
	}
	got := map[string]bool{}
	for _, d := range nodeNetDirs() {
		resolved, err := filepath.EvalSymlinks(d)
		if err != nil || resolved != d {
			t.Errorf("nodeNetDirs gave %s, whose real path is %s (%v)", d, resolved, err)
		}
		got[d] = true
	}
	for _, e := range host {
		dev, err := filepath.EvalSymlinks(filepath.Join("/sys/class/net", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if !within(dev, "/sys/devices/virtual/net") && !got[filepath.Dir(dev)] {
			t.Errorf("interface %s (%s) has no masked folder in %v", e.Name(), dev, got)
		}
	}
}

// The sandbox has a name of its own: the host's (the node's, or the
// node-agent pod's) does not reach the agent, and the name resolves without
// DNS (the sandbox has none).
func TestBwrapHostnameIsNotTheHosts(t *testing.T) {
	r := requireBwrapHost(t)
	host, err := os.Hostname()
	if err != nil || host == SandboxHostname {
		t.Fatalf("the host's name %q (%v): the check below would prove nothing", host, err)
	}
	// /etc/hostname too, where the host has one: it holds the host's name.
	etc := "cat /etc/hostname; "
	if _, err := os.Stat("/etc/hostname"); err != nil {
		etc = "echo " + SandboxHostname + "; "
	}
	spec := runDir(t, testBase(t), "sh", "-c", etc+`cat /proc/sys/kernel/hostname; uname -n; getent hosts "$(uname -n)" >/dev/null && echo resolves`)
	res, out := run(t, r, spec)
	want := SandboxHostname + "\n" + SandboxHostname + "\n" + SandboxHostname + "\nresolves\n"
	if res.ExitCode != 0 || afterSetupRetries(out) != want {
		t.Fatalf("the sandbox's name: %+v %q, want %q (the host is %q)", res, out, want, host)
	}
}

// A run's processes share one CPU weight of their own, however many they
// are: the run's cgroup is made in the cpu hierarchy too (v1) or has the cpu
// controller (v2), and every process of the run is in it, so a run that
// keeps many processes busy takes one share of a contended node, not the
// node-agent's and the other runs'.
func TestBwrapRunHasACPUShareOfItsOwn(t *testing.T) {
	r := requireBwrapHost(t)
	if !cpuMounted() {
		t.Skip("this host's kernel has no cpu controller (/proc/cgroups)")
	}
	spec := runDir(t, testBase(t), "sh", "-c", `sleep 30 & a=$!; sleep 30 & b=$!; i=0; while [ ! -e go ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; kill $a $b`)
	// "controller run-name" of each cgroup that holds one of the two sleeps,
	// and the cgroups that do.
	scan := func() (seen, dirs []string) {
		v1, _ := filepath.Glob("/sys/fs/cgroup/*/" + testCgroupParent + "*/" + cgroupPrefix + "/run-*")
		v2, _ := filepath.Glob("/sys/fs/cgroup/" + testCgroupParent + "*/" + cgroupPrefix + "/run-*")
		for _, run := range append(v1, v2...) {
			if isLink(filepath.Join("/sys/fs/cgroup", cgroupController(filepath.Dir(run)))) {
				continue // cpu -> cpu,cpuacct: the same hierarchy, counted once
			}
			b, _ := os.ReadFile(filepath.Join(run, "cgroup.procs"))
			for _, pid := range strings.Fields(string(b)) {
				if cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline"); string(cmd) != "sleep\x0030\x00" {
					continue
				}
				ctrl := cgroupController(filepath.Dir(run))
				if slices.Contains(strings.Split(ctrl, ","), "cpu") {
					ctrl = "cpu"
				}
				seen = append(seen, ctrl+" "+filepath.Base(run))
				dirs = append(dirs, run)
			}
		}
		return seen, dirs
	}
	var seen, dirs []string
	spec.Started = func() {
		defer func() { _ = os.WriteFile(filepath.Join(spec.Dir, "go"), nil, 0o644) }()
		// While the run lasts, its cgroups' weight files.
		defer func() {
			for i, d := range dirs {
				ctrl, _, _ := strings.Cut(seen[i], " ")
				if w := cpuWeightFile(ctrl); w != "" {
					if _, err := os.Stat(filepath.Join(d, w)); err != nil {
						t.Errorf("the run's cgroup %s has no %s: %v", d, w, err)
					}
				}
			}
		}()
		// Until both sleeps have started (later on a busy machine).
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			seen, dirs = scan()
			n := func(ctrl string) int {
				return len(slices.DeleteFunc(slices.Clone(seen), func(s string) bool { return !strings.HasPrefix(s, ctrl+" ") }))
			}
			if n("memory") >= 2 && n("cpu") >= 2 || n("") >= 2 {
				return
			}
		}
	}
	res, _ := run(t, r, spec)
	if res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	slices.Sort(seen)
	want := func(ctrl string) []string {
		var w []string
		for _, s := range seen {
			if c, _, _ := strings.Cut(s, " "); c == ctrl {
				w = append(w, s)
			}
		}
		return w
	}
	cpu, mem := want("cpu"), want("memory")
	if cgroups.Mode() == cgroups.Unified {
		cpu, mem = want(""), want("") // one cgroup; its cpu.weight was checked
	}
	run := func(l []string) string {
		if len(l) == 0 {
			return ""
		}
		_, name, _ := strings.Cut(l[0], " ")
		return name
	}
	if len(cpu) != 2 || len(mem) != 2 || run(cpu) != run(mem) || cpu[0] != cpu[1] {
		t.Errorf("the run's two busy processes are in %v: want both in one run's cgroup of the cpu hierarchy and the memory one", seen)
	}
}

// Where the kernel has no TCP accounting for v1 memory cgroups, a run's
// socket buffers are outside its memory limit, and the preflight's verdict
// says so in capitals (the node-agent logs it as a warning, `harnessfacts
// run` prints it); where it has (this host), the verdict says nothing.
func TestPreflightSaysWhenSocketBuffersAreUnbounded(t *testing.T) {
	mem := t.TempDir()
	cg := &v1Cgroup{paths: map[cgroup1.Name]string{cgroup1.Memory: mem, cgroup1.Pids: t.TempDir()}}
	if d := cgroupDescription(cg); !strings.Contains(d, NoSocketBound) || !Degraded(d) {
		t.Errorf("a v1 memory cgroup without %s is described as %q", tcpLimitFile, d)
	}
	if err := os.WriteFile(filepath.Join(mem, tcpLimitFile), []byte("9223372036854771712\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d := cgroupDescription(cg); strings.Contains(d, NoSocketBound) {
		t.Errorf("a v1 memory cgroup with %s is described as %q", tcpLimitFile, d)
	}

	requireBwrapHost(t)
	if cgroups.Mode() == cgroups.Unified {
		return
	}
	subs, err := v1Hierarchy()
	if err != nil {
		t.Fatal(err)
	}
	root := ""
	for _, s := range subs {
		if p, ok := s.(interface{ Path(string) string }); ok && s.Name() == cgroup1.Memory {
			root = p.Path("/")
		}
	}
	if root == "" {
		t.Skip("no v1 memory hierarchy here")
	}
	_, err = os.Stat(filepath.Join(root, tcpLimitFile))
	got := Preflight(context.Background(), Options{})
	if said := strings.Contains(got[0].Reason, NoSocketBound); said != (err != nil) {
		t.Errorf("the kernel's TCP accounting: %v; the preflight said %q", err, got[0].Reason)
	}
}

const noCPUHelperEnv = "HARNESSFACTS_TEST_NO_CPU_HELPER"

// Where the cpu controller cannot be written (here: the v1 cpu hierarchy
// remounted read-only in a mount namespace of the helper's own), runs go on
// with memory and pids, and the preflight's verdict says so in capitals.
func TestBwrapWithoutACPUShareSaysSo(t *testing.T) {
	requireBwrapHost(t)
	if cgroups.Mode() == cgroups.Unified || !slices.Contains(v1Controllers(), "cpu") {
		t.Skip("needs a writable v1 cpu hierarchy to take away (a unified host enables cpu in the cgroup2 parent)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount -o remount,bind,ro "$(readlink -f /sys/fs/cgroup/cpu)" && exec "$0"`, exe)
	cmd.Env = append(os.Environ(), noCPUHelperEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "bwrap available: true") || !strings.Contains(string(out), NoCPUShare) ||
		!strings.Contains(string(out), "v1 (memory, pids)") || !strings.Contains(string(out), "exit 0") {
		t.Errorf("without a writable cpu hierarchy the preflight and a run said:\n%s", out)
	}
}

func noCPUHelper() int {
	defer removeTestCgroupParent() // this process's own (its pid in the name)
	for _, a := range Preflight(context.Background(), Options{CgroupParent: testCgroupParent}) {
		if a.Mode == ModeBwrap {
			fmt.Printf("bwrap available: %v: %s\n", a.Available, a.Reason)
		}
	}
	r, err := NewBwrapRunner(Options{CgroupParent: testCgroupParent})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	dir, err := os.MkdirTemp("/var/tmp", "hf-no-cpu-")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer os.RemoveAll(dir)
	_ = os.Chmod(dir, 0o777)
	res, err := r.Run(context.Background(), Spec{Argv: []string{"true"}, Dir: dir, ReadWrite: []string{dir}, Env: []string{"PATH=/usr/bin:/bin"}})
	fmt.Printf("run: exit %d %v\n", res.ExitCode, err)
	return 0
}

// cgroupController is the v1 hierarchy's folder of a directory below
// /sys/fs/cgroup/<folder>, "" on the unified hierarchy.
func cgroupController(dir string) string {
	if cgroups.Mode() == cgroups.Unified {
		return ""
	}
	rel, _ := filepath.Rel("/sys/fs/cgroup", dir)
	c, _, _ := strings.Cut(rel, "/")
	return c
}

// isLink: most hosts mount cpu and cpuacct together as cpu,cpuacct, with
// cpu and cpuacct as links to it.
func isLink(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode()&os.ModeSymlink != 0
}

// cpuWeightFile is the file a run's cgroup of controller ctrl has when it
// has a CPU weight of its own: cpu.shares in the v1 cpu hierarchy,
// cpu.weight on v2 (ctrl "").
func cpuWeightFile(ctrl string) string {
	switch ctrl {
	case "cpu":
		return "cpu.shares"
	case "":
		return "cpu.weight"
	}
	return ""
}

// cpuMounted reports whether the kernel has the cpu controller enabled.
func cpuMounted() bool {
	b, _ := os.ReadFile("/proc/cgroups")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "cpu" && f[3] == "1" {
			return true
		}
	}
	return false
}

// A prompt given as Stdin reaches the command (on cgroup v1 behind the
// release guard, which reads its own descriptor), and is on no command line.
func TestBwrapStdinReachesTheCommand(t *testing.T) {
	r := requireBwrapHost(t)
	prompt := "the prompt " + randomToken(t) + "\nsecond line\n"
	spec := runDir(t, testBase(t), "cat")
	spec.Stdin = strings.NewReader(prompt)
	res, out := run(t, r, spec)
	if res.ExitCode != 0 || afterSetupRetries(out) != prompt {
		t.Fatalf("stdin: %+v %q, want %q", res, out, prompt)
	}
}

// TestBwrapStartedIsCalledOnceBeforeTheEnd: Spec.Started hears of the start
// once, while the command still runs (it waits for a file Started writes).
func TestBwrapStartedIsCalledOnceBeforeTheEnd(t *testing.T) {
	r := requireBwrapHost(t)
	spec := runDir(t, testBase(t), "sh", "-c", `i=0; while [ ! -e go ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; [ -e go ] && echo saw-go`)
	calls := 0
	spec.Started = func() {
		calls++
		// The run dir belongs to the sandbox's uid; the file is only read.
		if err := os.WriteFile(filepath.Join(spec.Dir, "go"), nil, 0o644); err != nil {
			t.Error(err)
		}
	}
	res, out := run(t, r, spec)
	if calls != 1 || res.ExitCode != 0 || afterSetupRetries(out) != "saw-go\n" {
		t.Fatalf("Started called %d times; result %+v, output %q: want once, while the command ran", calls, res, out)
	}
}

// When bwrap dies in its setup (a stand-in bwrap here), the run is the
// sandbox's failure and says what bwrap said, with a user-mode network's
// stack attached or not, and leaves nothing: no slirp4netns, no cgroup.
func TestBwrapThatDiesInSetupIsReportedAsBwrap(t *testing.T) {
	requireBwrapHost(t)
	fake := filepath.Join(testBase(t), "bwrap") // run as the sandbox uid: outside the 0700 TempDir
	script := "#!/bin/sh\necho 'bwrap: Can not bind mount (a stand-in failure)' >&2\nexit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := NewBwrapRunner(Options{Bwrap: fake, CgroupParent: testCgroupParent})
	if err != nil {
		t.Fatal(err)
	}
	for _, network := range []Network{NetworkNone, NetworkUserMode} {
		spec := runDir(t, testBase(t), "true")
		spec.Network = network
		var buf bytes.Buffer
		spec.Stdout, spec.Stderr = &buf, &buf
		res, err := r.Run(context.Background(), spec)
		if out := buf.String(); !errors.Is(err, ErrSetupFailed) || !strings.Contains(out, "a stand-in failure") {
			t.Fatalf("%s: %+v, %v, %q: want ErrSetupFailed and bwrap's message", network, res, err, out)
		}
		assertNoRunCgroups(t)
		if left := processesNamed("slirp4netns"); left != 0 {
			t.Errorf("%s: %d slirp4netns processes left", network, left)
		}
	}
}

// cgroupV1 says whether r's runs get v1 cgroups here (the v1 placement
// is what some tests are about).
func cgroupV1(t *testing.T, r *BwrapRunner) bool {
	t.Helper()
	cg, err := newRunCgroup(r.opts, Limits{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cg.remove() }()
	return cg.version() == 1
}

// standInBwrap writes a stand-in bwrap that fails the way bwrap does when a
// host mount changes under its setup (its message, exit 1, the seccomp
// program unread) for its first fails starts, and is the real bwrap after.
func standInBwrap(t *testing.T, fails int) (path string, starts func() int) {
	t.Helper()
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Fatal(err)
	}
	dir := testBase(t) // run as the sandbox uid: outside the 0700 TempDir
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, 0o777); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "bwrap")
	script := fmt.Sprintf(`#!/bin/sh
echo start >> %[1]s/starts
if [ "$(wc -l < %[1]s/starts)" -le %[2]d ]; then
  echo 'bwrap: Can'"'"'t bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount "/newroot/gone": No such file or directory' >&2
  exit 1
fi
exec %[3]s "$@"
`, state, fails, bwrap)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, func() int {
		b, _ := os.ReadFile(filepath.Join(state, "starts"))
		return strings.Count(string(b), "\n")
	}
}

// TestBwrapSetupFailureIsStartedAgain: a bwrap that died in its setup,
// before the command could run (bubblewrap issue 650: a host mount that
// went away while bwrap remounted its bind of /), is started again; the
// command then runs once, with its whole stdin, and the retry is said on
// its stderr and in the result. Past setupTries the failure is reported as
// it is.
func TestBwrapSetupFailureIsStartedAgain(t *testing.T) {
	requireBwrapHost(t)
	fake, starts := standInBwrap(t, 1)
	r, err := NewBwrapRunner(Options{Bwrap: fake, CgroupParent: testCgroupParent})
	if err != nil {
		t.Fatal(err)
	}
	prompt := "the prompt " + randomToken(t) + "\n"
	spec := runDir(t, testBase(t), "sh", "-c", `cat > got; echo ran >> count; echo done`)
	spec.Stdin = strings.NewReader(prompt)
	calls := 0
	spec.Started = func() { calls++ }
	res, out := run(t, r, spec)
	if res.ExitCode != 0 || res.SetupRetries != 1 || starts() != 2 || calls != 1 {
		t.Fatalf("%+v after %d starts (Started called %d times), output %q: want exit 0 after one retry, Started once", res, starts(), calls, out)
	}
	if !strings.Contains(out, "starting the sandbox again (2 of 3)") || afterSetupRetries(out) != "done\n" {
		t.Errorf("output %q: want the retry said, then the command's own", out)
	}
	if b, _ := os.ReadFile(filepath.Join(spec.Dir, "count")); string(b) != "ran\n" {
		t.Errorf("the command ran %q times, want once", b)
	}
	if b, _ := os.ReadFile(filepath.Join(spec.Dir, "got")); string(b) != prompt {
		t.Errorf("stdin after the retry: %q, want %q", b, prompt)
	}

	fake, starts = standInBwrap(t, setupTries)
	r, err = NewBwrapRunner(Options{Bwrap: fake, CgroupParent: testCgroupParent})
	if err != nil {
		t.Fatal(err)
	}
	spec = runDir(t, testBase(t), "sh", "-c", `echo ran >> count`)
	var buf bytes.Buffer
	spec.Stdout, spec.Stderr = &buf, &buf
	res, err = r.Run(context.Background(), spec)
	out = buf.String()
	if !errors.Is(err, ErrSetupFailed) || res.SetupRetries != setupTries-1 || starts() != setupTries || strings.Count(out, "Unable to apply mount flags") != setupTries {
		t.Fatalf("%+v, %v after %d starts, output %q: want ErrSetupFailed (not the command's exit 1) and bwrap's message after %d starts", res, err, starts(), out, setupTries)
	}
	assertNoRunCgroups(t)
	if _, err := os.Stat(filepath.Join(spec.Dir, "count")); err == nil {
		t.Error("the command ran")
	}
}

// TestBwrapCommandThatFailsIsNotStartedAgain: only bwrap's own setup is
// retried. A command that exits 1 saying what bwrap says when its setup
// fails ran, and is never run again: the real bwrap read its seccomp
// program before it started it.
func TestBwrapCommandThatFailsIsNotStartedAgain(t *testing.T) {
	r := requireBwrapHost(t)
	spec := runDir(t, testBase(t), "sh", "-c", `echo ran >> count; echo "bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount \"/newroot/x\": Invalid argument" >&2; exit 1`)
	res, out := run(t, r, spec)
	if res.ExitCode != 1 || res.SetupRetries != 0 || strings.Contains(out, "starting the sandbox again") {
		t.Errorf("%+v, output %q: want exit 1 and no retry", res, out)
	}
	if b, _ := os.ReadFile(filepath.Join(spec.Dir, "count")); string(b) != "ran\n" {
		t.Errorf("the command ran %q times, want once", b)
	}

}

// A folder to hide that the sandbox's uid cannot reach (below a folder it
// may not search: a fixtures folder made private, as the local run
// advises) is out of its sight already, and no mount is made for it: bwrap,
// as that uid, failed to make one, and the run failed as if the agent had.
// A folder to hide named through a link is masked where the link leads.
func TestBwrapHiddenUnreachableOrLinked(t *testing.T) {
	r := requireBwrapHost(t)
	base := testBase(t)
	hidden := filepath.Join(base, "closed", "hidden")
	if err := os.MkdirAll(hidden, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hidden, "secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(base, "closed"), 0o700); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(base, "open", "answers")
	if err := os.MkdirAll(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(open, "answer"), []byte("42"), 0o644); err != nil {
		t.Fatal(err)
	}
	alias := filepath.Join(base, "alias")
	if err := os.Symlink(open, alias); err != nil {
		t.Fatal(err)
	}
	spec := runDir(t, base, "sh", "-c", `cat `+filepath.Join(hidden, "secret")+` 2>/dev/null; cat `+filepath.Join(open, "answer")+` `+filepath.Join(alias, "answer")+` 2>/dev/null; echo ran`)
	spec.Hidden = []string{hidden, alias}
	res, out := run(t, r, spec)
	if res.ExitCode != 0 || res.SetupRetries != 0 || out != "ran\n" {
		t.Errorf("%+v, output %q: want the command run once, seeing neither the closed folder nor what the link names", res, out)
	}
}

// A hidden path inside another hidden directory (the local run's signing
// key folder inside a masked /root) is covered by that directory's mask and
// leaves no trace in it: the masked directory is empty, not a chain of
// empty folders naming what was hidden. The same path written twice, one
// with a trailing slash, is still masked.
func TestBwrapHiddenInsideHiddenLeavesNoTrace(t *testing.T) {
	r := requireBwrapHost(t)
	base := testBase(t)
	home := filepath.Join(base, "home")
	keys := filepath.Join(home, ".config", "tool", "keys")
	if err := os.MkdirAll(keys, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := "secret-" + randomToken(t)
	if err := os.WriteFile(filepath.Join(keys, "key"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	twice := filepath.Join(base, "twice")
	if err := os.MkdirAll(twice, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(twice, "key"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := runDir(t, base, "sh", "-c", fmt.Sprintf(`echo "home:$(ls -A %s | wc -l)"; cat %s/key %s/key 2>/dev/null; echo done`, home, keys, twice))
	spec.Hidden = []string{home, keys, twice + "/", twice}
	args := strings.Join(bwrapArgs(spec, false), "\n") + "\n"
	if n := strings.Count(args, "--tmpfs\n"+twice+"\n") + strings.Count(args, "--tmpfs\n"+twice+"/\n"); n != 1 {
		t.Errorf("a folder hidden twice is masked %d times, want once (a mount more at every start)", n)
	}
	res, out := run(t, r, spec)
	if res.ExitCode != 0 || !strings.Contains(out, "home:0\n") || strings.Contains(out, secret) || !strings.HasSuffix(out, "done\n") {
		t.Fatalf("the masked folder shows what was hidden inside it, or a secret: %+v %q", res, out)
	}
}
