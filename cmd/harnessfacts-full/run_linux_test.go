package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harnessfacts/harnessfacts/internal/runcmd"
	"github.com/harnessfacts/harnessfacts/internal/runflags"
	"github.com/harnessfacts/harnessfacts/node-agent/egress"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// openDir is a folder the agent's unprivileged user can pass through, with
// a path short enough for a run root's unix sockets.
func openDir(t *testing.T) string {
	t.Helper()
	return openDirIn(t, "")
}

// openDirIn is openDir below parent ("": the temporary directory).
func openDirIn(t *testing.T, parent string) string {
	t.Helper()
	d, err := os.MkdirTemp(parent, "hf-cmd-")
	if err == nil {
		err = os.Chmod(d, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// A local run killed with SIGKILL leaves its run dir (and the credential
// copies in its home) and its sandbox's cgroups, empty once the sandbox
// has died with it. The next `harnessfacts run` on the same run root
// removes them at once (the cgroups' names say their maker is gone), and
// leaves alone a run dir whose owner is still alive.
func TestLocalRunRemovesAbandonedRunDirs(t *testing.T) {
	bin := harnessfactsBinary(t)
	base := openDir(t)
	runs := filepath.Join(base, "runs")

	// A fixture whose agent sleeps.
	fix := filepath.Join(base, "sleeper")
	writeFiles(t, map[string]string{
		filepath.Join(fix, "fixture.yaml"):   "prompt: wait\n",
		filepath.Join(fix, "workspace", "a"): "x\n",
		filepath.Join(fix, "run.yaml"): `apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: sleeper}
spec:
  agent:
    adapter: exec
    command: [sh, -c, "touch started; exec sleep 300"]
  fixture: {configMapRef: {name: sleeper}}
`,
	})
	killed := exec.Command(bin, "run", "-f", filepath.Join(fix, "run.yaml"), "--run-root", runs, "--evidence", filepath.Join(base, "ev1"))
	var killedOut bytes.Buffer
	killed.Stdout, killed.Stderr = &killedOut, &killedOut
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = killed.Wait(); close(exited) }()
	var leftover string
	for deadline := time.Now().Add(2 * time.Minute); leftover == ""; time.Sleep(50 * time.Millisecond) {
		m, _ := filepath.Glob(filepath.Join(runs, fixture.RunDirPrefix+"*", "workspace", "started"))
		if len(m) == 1 {
			leftover = filepath.Dir(filepath.Dir(m[0]))
		}
		select {
		case <-exited:
			t.Fatalf("the run ended before its agent started:\n%s", killedOut.String())
		default:
		}
		if time.Now().After(deadline) {
			_ = killed.Process.Kill()
			<-exited
			t.Fatalf("the sleeping agent never started:\n%s", killedOut.String())
		}
	}
	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	if _, err := os.Stat(leftover); err != nil {
		t.Fatalf("the killed run left no run dir (%v): nothing to test", err)
	}
	cgroupsLeft := runCgroupsOf(t, killed.Process.Pid)
	if len(cgroupsLeft) == 0 {
		if os.Geteuid() == 0 {
			t.Fatal("the killed run left no cgroup: nothing to test")
		}
		t.Log("not root: the run made no cgroup of its own, and its cgroups' removal is not checked")
	}
	for _, cg := range cgroupsLeft {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if b, err := os.ReadFile(filepath.Join(cg, "cgroup.procs")); err == nil && len(bytes.TrimSpace(b)) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the killed run's sandbox is still in %s", cg)
			}
		}
	}

	// A run dir whose owner lock this test holds: a run still going on.
	f, err := fixture.FromDir(fix, fixture.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	owned, err := f.Materialize(runs)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = owned.Remove() }()

	next := exec.Command(bin, "run", "-f", filepath.Join(repoRoot(t), "fixtures", "hello", "run.yaml"), "--run-root", runs, "--evidence", filepath.Join(base, "ev2"))
	var stdout, stderr bytes.Buffer
	next.Stdout, next.Stderr = &stdout, &stderr
	if err := next.Run(); err != nil {
		t.Fatalf("the next run: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	if _, err := os.Stat(leftover); err == nil {
		t.Errorf("the killed run's dir %s is still there after the next run:\n%s", leftover, stderr.String())
	}
	if !strings.Contains(stderr.String(), "removed the run dir "+leftover) {
		t.Errorf("the next run did not say it removed %s:\n%s", leftover, stderr.String())
	}
	if _, err := os.Stat(owned.Path); err != nil {
		t.Errorf("the run dir of a live owner was removed: %v", err)
	}
	for _, cg := range cgroupsLeft {
		if _, err := os.Stat(cg); err == nil {
			t.Errorf("the killed run's cgroup %s, a second old, is still there after the next run:\n%s", cg, stderr.String())
		}
		if !strings.Contains(stderr.String(), "removed the cgroup "+cg) {
			t.Errorf("the next run did not say it removed %s:\n%s", cg, stderr.String())
		}
	}
}

// runCgroupsOf finds the run cgroups that the process pid made below this
// process's own cgroups (where a local run it started makes them), by the
// maker their names carry.
func runCgroupsOf(t *testing.T, pid int) []string {
	t.Helper()
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, line := range strings.Split(strings.TrimSpace(string(self)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, mount := range []string{"/sys/fs/cgroup/*", "/sys/fs/cgroup"} {
			m, _ := filepath.Glob(filepath.Join(mount, parts[2], "harnessfacts", fmt.Sprintf("run-%d-*", pid)))
			for _, d := range m {
				if !slices.Contains(found, d) {
					found = append(found, d)
				}
			}
		}
	}
	return found
}

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(filepath.Dir(wd))
}

// Adding one path with --hide keeps every default masked: a secret planted
// in a default hidden folder stays unreadable in the sandbox, and so does
// one in the added folder.
func TestHideAddsToTheDefaults(t *testing.T) {
	cmd := runcmd.Command()
	// Outside /tmp, which the sandbox masks anyway.
	extraBase, err := os.MkdirTemp("/var/tmp", "hf-hide-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(extraBase) })
	if err := os.Chmod(extraBase, 0o755); err != nil {
		t.Fatal(err)
	}
	extra := filepath.Join(extraBase, "extra")
	if err := cmd.Flags().Parse([]string{"-f", "run.yaml", "--hide", extra}); err != nil {
		t.Fatal(err)
	}
	values, err := cmd.Flags().GetStringSlice("hide")
	if err != nil {
		t.Fatal(err)
	}
	hidden, err := runflags.HiddenPaths(values)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range append(runflags.DefaultHidden(), extra) {
		if !slices.Contains(hidden, d) {
			t.Errorf("--hide %s: %s is not hidden (hidden: %v)", extra, d, hidden)
		}
	}
	if _, err := runflags.HiddenPaths([]string{"relative/dir"}); err == nil {
		t.Error("a relative --hide path was accepted")
	}

	// The real sandbox with that list. /var/lib/harnessfacts is one of the
	// defaults; its planted file is world-readable, so only the mask stands
	// between it and the agent.
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: it runs bwrap as an unprivileged uid and plants a file in /var/lib/harnessfacts")
	}
	state := "/var/lib/harnessfacts"
	if _, err := os.Stat(state); os.IsNotExist(err) {
		if err := os.MkdirAll(state, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(state) })
	}
	if err := os.Chmod(state, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := fmt.Sprintf("planted-%d", time.Now().UnixNano())
	planted := []string{filepath.Join(state, fmt.Sprintf("hf-hide-test-%d", os.Getpid())), filepath.Join(extra, "secret")}
	if err := os.MkdirAll(extra, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range planted {
		if err := os.WriteFile(p, []byte(secret), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(p) })
	}
	r, err := sandbox.NewBwrapRunner(sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(openDir(t), "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err := r.Run(context.Background(), sandbox.Spec{
		Argv: []string{"sh", "-c", fmt.Sprintf("cat %s %s 2>&1; echo done", planted[0], planted[1])},
		Dir:  dir, ReadWrite: []string{dir}, Env: []string{"PATH=/usr/bin:/bin"},
		Hidden: hidden, Stdout: &out, Stderr: &out, Limits: sandbox.Limits{Timeout: time.Minute},
	})
	if err != nil || res.ExitCode != 0 || !strings.HasSuffix(out.String(), "done\n") {
		t.Fatalf("run: %v %+v %q", err, res, out.String())
	}
	if strings.Contains(out.String(), secret) {
		t.Errorf("a planted secret was readable with --hide %s: %q", extra, out.String())
	}
	// Control: without the masks the agent's user reads them.
	out.Reset()
	res, err = r.Run(context.Background(), sandbox.Spec{
		Argv: []string{"sh", "-c", fmt.Sprintf("cat %s %s; echo done", planted[0], planted[1])},
		Dir:  dir, ReadWrite: []string{dir}, Env: []string{"PATH=/usr/bin:/bin"},
		Stdout: &out, Stderr: &out, Limits: sandbox.Limits{Timeout: time.Minute},
	})
	if err != nil || strings.Count(out.String(), secret) != 2 {
		t.Fatalf("unmasked control: %v %+v %q (the refusal above proves nothing)", err, res, out.String())
	}
}

// A local run signs its receipt with --evidence-key (made when absent,
// mode 0600, its public part written beside it), and `evidence verify
// --key` checks the folder: it passes with that key, and fails on a byte
// of an artifact, of the signature, and with another key.
func TestLocalRunSignsItsEvidence(t *testing.T) {
	bin := harnessfactsBinary(t)
	base := openDir(t)
	keyFile := filepath.Join(base, "keys", "evidence-key.pem")
	pubFile := filepath.Join(base, "keys", "evidence-key.pub")
	ev := filepath.Join(base, "ev")
	run := exec.Command(bin, "run", "-f", filepath.Join(repoRoot(t), "fixtures", "hello", "run.yaml"), "--run-root", filepath.Join(base, "runs"),
		"--evidence", ev, "--evidence-key", keyFile)
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("the run: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	if info, err := os.Stat(keyFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file %v (%v), want mode 0600", info, err)
	}
	pub, err := os.ReadFile(pubFile)
	if err != nil || !strings.Contains(string(pub), "BEGIN PUBLIC KEY") {
		t.Fatalf("public key %q: %v", pub, err)
	}
	if !strings.Contains(stdout.String(), "signedBy: sha256:") || !strings.Contains(stderr.String(), "--key "+pubFile) {
		t.Errorf("the run does not say it signed, or with which key:\n%s\n%s", stdout.String(), stderr.String())
	}
	verify := func(dir string, args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"evidence", "verify", dir}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := verify(ev, "--key", pubFile); err != nil || !strings.Contains(out, "signature: good") {
		t.Fatalf("verify --key: %v\n%s", err, out)
	}
	// Another key: refused, saying which key signed.
	otherKey := filepath.Join(base, "other", "k.pem")
	if _, err := exec.Command(bin, "run", "-f", filepath.Join(repoRoot(t), "fixtures", "hello", "run.yaml"), "--run-root", filepath.Join(base, "runs"),
		"--evidence", filepath.Join(base, "ev-other"), "--evidence-key", otherKey).CombinedOutput(); err != nil {
		t.Fatal(err)
	}
	if out, err := verify(ev, "--key", filepath.Join(base, "other", "k.pub")); err == nil || !strings.Contains(out, "not among the trusted keys") {
		t.Errorf("verify with another key: %v\n%s", err, out)
	}
	flip := func(name string, at func([]byte) int) string {
		dir := filepath.Join(base, "flip-"+strings.ReplaceAll(name, "/", "-"))
		if err := exec.Command("cp", "-a", ev, dir).Run(); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[at(b)] ^= 1
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := verify(dir, "--key", pubFile)
		if err == nil {
			t.Errorf("a flipped byte of %s verified:\n%s", name, out)
		}
		return out
	}
	if out := flip("artifacts/greeting.txt", func([]byte) int { return 0 }); !strings.Contains(out, "DIFFERS artifacts/greeting.txt") {
		t.Errorf("artifact: %s", out)
	}
	if out := flip("receipt.dsse.json", func(b []byte) int { return bytes.LastIndex(b, []byte(`"sig":"`)) + 10 }); !strings.Contains(out, "(signature)") {
		t.Errorf("signature: %s", out)
	}
}

// A local run on a machine where the sandbox goes without a bound it gives
// elsewhere (here: the open-file table, where no systemd raised it) says so
// once, as a WARNING line of its own, not a second time in the executor's
// log for node-agents.
func TestLocalRunSaysItsDegradedSandboxOnce(t *testing.T) {
	bin := harnessfactsBinary(t)
	base := openDir(t)
	// Whether the node's open-file table is out of one run's reach is the
	// machine's, whatever options a preflight has; the run's other bounds
	// (its cgroups) depend on its own options, so only this one decides
	// that the run must say something.
	fileTableOpen := func() bool {
		for _, av := range sandbox.Preflight(context.Background(), sandbox.Options{}) {
			if av.Mode == sandbox.ModeBwrap && av.Available && strings.Contains(av.Reason, sandbox.NoFileTableBound) {
				return true
			}
		}
		return false
	}
	before := fileTableOpen()
	run := exec.Command(bin, "run", "-f", filepath.Join(repoRoot(t), "fixtures", "hello", "run.yaml"), "--run-root", filepath.Join(base, "runs"),
		"--evidence", filepath.Join(base, "ev"), "--evidence-key", "")
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("the run: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	if n := strings.Count(stderr.String(), "runs here go without a bound"); n != 0 {
		t.Errorf("the executor's log line for node-agents is in the local run's output %d times:\n%s", n, stderr.String())
	}
	said := strings.Count(stderr.String(), "WARNING bwrap: ")
	if said > 1 {
		t.Errorf("the local run said its sandbox's verdict %d times, want once:\n%s", said, stderr.String())
	}
	switch after := fileTableOpen(); {
	case before != after:
		// A test of another package sets fs.file-max for a while.
		t.Log("the node's open-file table changed during the run: whether the run had to warn was not checked")
	case after && (said != 1 || !strings.Contains(stderr.String(), sandbox.NoFileTableBound)):
		t.Errorf("one run could fill this machine's open-file table, and the local run did not say so once:\n%s", stderr.String())
	case !after:
		t.Log("this machine's open-file table is out of one run's reach: whether the run had to warn was not checked")
	}
}

// A run the local validation refuses is refused with the API server's
// message, while the sandbox preflight started beside the validation is
// waited for: it leaves no temporary folder behind.
func TestRefusedLocalRunLeavesNoPreflight(t *testing.T) {
	bin := harnessfactsBinary(t)
	base := openDir(t)
	tmp := filepath.Join(base, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	runFile := filepath.Join(base, "run.yaml")
	if err := os.WriteFile(runFile, []byte(`apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: refused}
spec:
  agent: {adapter: exec}
  fixture: {configMapRef: {name: hello}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		cmd := exec.Command(bin, "run", "-f", runFile, "--run-root", filepath.Join(base, "runs"), "--evidence", filepath.Join(base, fmt.Sprint("ev", i)))
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "is not a valid HarnessRun") || !strings.Contains(string(out), "command") {
			t.Fatalf("a run without a command: %v\n%s", err, out)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Fatalf("the refused run left %v in its TMPDIR", left)
		}
	}
	// Refused before the run began: the preflight `run`'s init began
	// (package prestart) is waited for all the same.
	for range 3 {
		cmd := exec.Command(bin, "run", "-f", runFile, "--run-root", filepath.Join(base, "runs"), "--no-such-flag")
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "unknown flag") {
			t.Fatalf("a run with an unknown flag: %v\n%s", err, out)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Fatalf("a run refused for its flags left %v in its TMPDIR", left)
		}
	}
}

// A fixture run twice from its own folder, as its README says (`cd` there,
// `harnessfacts run -f run.yaml`): the first run's evidence lands in the
// folder, and the second run reads the same fixture, with the same digest.
func TestLocalRunTwiceInTheFixturesFolder(t *testing.T) {
	bin := harnessfactsBinary(t)
	base := openDir(t)
	fix := filepath.Join(base, "hello")
	if out, err := exec.Command("cp", "-a", filepath.Join(repoRoot(t), "fixtures", "hello"), fix).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var digests []string
	for i := range 2 {
		cmd := exec.Command(bin, "run", "-q", "-f", "run.yaml", "--run-root", filepath.Join(base, "runs"), "--evidence-key", "")
		cmd.Dir = fix
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("run %d from the fixture's folder: %v\n%s", i+1, err, out)
		}
		m := regexp.MustCompile(`fixtureDigest: (sha256:[0-9a-f]+)`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("run %d: no fixture digest in\n%s", i+1, out)
		}
		digests = append(digests, string(m[1]))
	}
	if digests[0] != digests[1] {
		t.Fatalf("the fixture's digest changed with the first run's evidence: %v", digests)
	}
	if entries, _ := os.ReadDir(filepath.Join(fix, "evidence", "hello")); len(entries) != 3 {
		t.Fatalf("evidence/hello holds %d entries, want two runs' and the link", len(entries))
	}
}

// The host folders a local run reads from are masked in its sandbox,
// wherever they are (here below /var/tmp, which no default mask covers, as
// a CI workspace or /srv would be): the agent finds neither its fixture's
// verifier part (whose copy would pass its check) nor the secrets folder's
// keys the run did not select (which the redactor does not know).
func TestLocalRunHidesTheHostFoldersItReads(t *testing.T) {
	bin := harnessfactsBinary(t)
	base := openDirIn(t, "/var/tmp")
	// Every value the agent must not find is this test's own: another
	// instance of it on the machine (a second checkout's tests at the same
	// time) leaves its folders in /var/tmp, which no run of this one hides
	// (the known limit: a task set every user may read is readable), and
	// the agent found those and failed this test now and then.
	tag := strings.TrimPrefix(filepath.Base(base), "hf-cmd-")
	name := "guess-" + tag
	fix := filepath.Join(base, "fixtures", name)
	files := map[string]string{
		filepath.Join(fix, "fixture.yaml"): "prompt: guess the number\nartifacts: [answer.txt, loot.txt]\nchecks:\n" +
			"- name: guessed\n  shell: cmp -s answer.txt \"$HARNESSFACTS_TESTS/expected.txt\"\n",
		filepath.Join(fix, "workspace", "README"):      "guess\n",
		filepath.Join(fix, "tests", "expected.txt"):    "secret-answer-1729-" + tag + "\n",
		filepath.Join(base, "secrets", "used", "key"):  "sk-selected-0123456789abcdef-" + tag + "\n",
		filepath.Join(base, "secrets", "other", "key"): "sk-not-selected-of-another-team-0123456789-" + tag + "\n",
		filepath.Join(base, "run.yaml"): `apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: guess}
spec:
  agent:
    adapter: exec
    command: [sh, -c, "f=$(find / -xdev -path '*/fixtures/` + name + `/tests/expected.txt' 2>/dev/null | head -1); echo found $f; cat \"$f\" > answer.txt; for s in $(find / -xdev -path '*/secrets/*/key' 2>/dev/null); do echo \"$s: $(cat $s)\"; done > loot.txt; cat ` + filepath.Join(base, "run.yaml") + ` >> loot.txt"]
    credentials:
    - {env: MY_KEY, secretKeyRef: {name: used, key: key}}
  fixture: {configMapRef: {name: ` + name + `}}
`,
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ev := filepath.Join(base, "ev")
	cmd := exec.Command(bin, "run", "-f", filepath.Join(base, "run.yaml"), "--fixtures", filepath.Join(base, "fixtures"),
		"--secrets", filepath.Join(base, "secrets"), "--run-root", filepath.Join(base, "runs"), "--evidence", ev, "--evidence-key", "")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	if !strings.Contains(out.String(), "verdict: Fail") {
		t.Errorf("the run's verdict is not Fail (%v):\n%s", runErr, out.String())
	}
	answer, _ := os.ReadFile(filepath.Join(ev, "artifacts", "answer.txt"))
	loot, err := os.ReadFile(filepath.Join(ev, "artifacts", "loot.txt"))
	if err != nil {
		t.Fatalf("the agent's loot.txt: %v\n%s", err, out.String())
	}
	if strings.Contains(string(answer), "secret-answer-1729-"+tag) {
		t.Errorf("the agent read its fixture's verifier part from the host: %q", answer)
	}
	for _, leak := range []string{"sk-not-selected-of-another-team-0123456789-" + tag, "sk-selected-0123456789abcdef-" + tag, "kind: HarnessRun"} {
		if strings.Contains(string(loot), leak) {
			t.Errorf("the agent read %q from the host:\n%s", leak, loot)
		}
	}
	// Hidden from this run's agent, but not from a concurrent run's (its
	// own uid, masks fixed at its start): said, when each run has a uid of
	// its own (as root).
	if os.Geteuid() == 0 {
		for _, want := range []string{
			"WARNING the fixture's verifier part " + filepath.Join(fix, "tests", "expected.txt") + " is readable by every user",
			"WARNING a key of the secrets folder " + filepath.Join(base, "secrets"),
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("the run did not say %q:\n%s", want, out.String())
			}
		}
		// Closed to others, they are not named.
		for _, d := range []string{filepath.Join(fix, "tests"), filepath.Join(base, "secrets")} {
			if err := os.Chmod(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		again := exec.Command(bin, "run", "-f", filepath.Join(base, "run.yaml"), "--fixtures", filepath.Join(base, "fixtures"),
			"--secrets", filepath.Join(base, "secrets"), "--run-root", filepath.Join(base, "runs"), "--evidence", filepath.Join(base, "ev2"), "--evidence-key", "")
		o, _ := again.CombinedOutput()
		if strings.Contains(string(o), "readable by every user") {
			t.Errorf("a run whose verifier part and secrets only their owner may read warned of them:\n%s", o)
		}
	}
}

// A local run longer than 30 s (every real CLI's run) ended with
// controller-runtime's complaint that no logger was set, and a goroutine's
// stack, on stderr; the executor's own log lines were dropped. The run now
// has a logger: stderr holds neither.
func TestLongLocalRunPrintsNoStack(t *testing.T) {
	if testing.Short() {
		t.Skip("a 31-second run")
	}
	bin := harnessfactsBinary(t)
	base := openDir(t)
	fix := filepath.Join(base, "slow")
	if err := os.MkdirAll(filepath.Join(fix, "workspace"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"fixture.yaml": "prompt: wait\nlimits: {episodeSeconds: 60}\n",
		"run.yaml": "apiVersion: harnessfacts.io/v1alpha1\nkind: HarnessRun\nmetadata: {name: slow}\n" +
			"spec:\n  agent: {adapter: exec, command: [sleep, \"31\"]}\n  fixture: {configMapRef: {name: slow}}\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(fix, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "run", "-q", "-f", filepath.Join(fix, "run.yaml"), "--run-root", filepath.Join(base, "runs"),
		"--evidence", filepath.Join(base, "ev"), "--evidence-key", "")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("%v\n%s\n%s", err, out, stderr.String())
	}
	if s := stderr.String(); strings.Contains(s, "SetLogger") || strings.Contains(s, "goroutine") {
		t.Errorf("stderr of a 31 s run:\n%s", s)
	}
}

// TestLocalRunTreatsTheMachinesAddressAsInside: a local run whose agent
// reaches a server on this machine's own address (not in any inside range:
// this machine's is a documentation address, a laptop's may be public) is
// refused by its egress proxy, with the flag that allows it named; with
// --inside-host naming the address, it reaches the server.
func TestLocalRunTreatsTheMachinesAddressAsInside(t *testing.T) {
	bin := harnessfactsBinary(t)
	var own string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			if ip, ok := netip.AddrFromSlice(n.IP.To4()); ok && egress.Classify(ip, nil) == "" {
				own = ip.String()
				break
			}
		}
	}
	if own == "" {
		t.Skip("this machine has no IPv4 address outside the inside ranges to try")
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "the machine's own service")
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	target := net.JoinHostPort(own, fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
	base := openDir(t)
	fix := filepath.Join(base, "fixtures", "reach")
	if err := os.MkdirAll(filepath.Join(fix, "workspace"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fix, "fixture.yaml"), []byte("prompt: reach\nmcp: {transport: None}\nartifacts: [got.txt]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runYAML := filepath.Join(base, "run.yaml")
	if err := os.WriteFile(runYAML, []byte(`apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: reach}
spec:
  agent:
    adapter: exec
    command: [sh, -c, "curl -s -m 10 http://`+target+`/ > got.txt"]
  network: {egress: ProviderOnly, allowHosts: ["`+target+`"]}
  fixture: {configMapRef: {name: reach}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, extra := range [][]string{nil, {"--inside-host", own}} {
		ev := filepath.Join(base, fmt.Sprint("ev", i))
		cmd := exec.Command(bin, append([]string{"run", "-q", "-f", runYAML, "--fixtures", filepath.Join(base, "fixtures"),
			"--run-root", filepath.Join(base, "runs"), "--evidence", ev, "--evidence-key", ""}, extra...)...)
		out, _ := cmd.CombinedOutput()
		got, err := os.ReadFile(filepath.Join(ev, "artifacts", "got.txt"))
		if err != nil {
			t.Fatalf("%v: the agent's got.txt: %v\n%s", extra, err, out)
		}
		switch {
		case extra == nil && !strings.Contains(string(got), "a node's own address") || extra == nil && !strings.Contains(string(got), "harnessfacts run --inside-host may allow it"):
			t.Errorf("without --inside-host the agent got %q, want the proxy's refusal naming the flag", got)
		case extra != nil && string(got) != "the machine's own service":
			t.Errorf("with --inside-host %s the agent got %q, want the server's answer", own, got)
		}
	}
}

// A local run holds the garbage collector back until its agent starts
// (package startgc), and collects again from then on; a GOGC the user set
// is kept from the start. Seen from the runtime's own trace of each
// collection (GODEBUG=gctrace=1, on stderr with the run's steps).
func TestLocalRunHoldsTheCollectorUntilTheAgentStarts(t *testing.T) {
	bin := harnessfactsBinary(t)
	base := openDir(t)
	for i, gogc := range []string{"", "100"} {
		run := exec.Command(bin, "run", "-f", filepath.Join(repoRoot(t), "fixtures", "hello", "run.yaml"), "--run-root", filepath.Join(base, "runs"),
			"--evidence", filepath.Join(base, fmt.Sprint("ev", i)), "--evidence-key", "")
		run.Env = append(os.Environ(), "GODEBUG=gctrace=1", "GOGC="+gogc, "GOMEMLIMIT=")
		var stdout, stderr bytes.Buffer
		run.Stdout, run.Stderr = &stdout, &stderr
		if err := run.Run(); err != nil {
			t.Fatalf("the run (GOGC=%q): %v\n%s\n%s", gogc, err, stdout.String(), stderr.String())
		}
		before, after, started := 0, 0, false
		for _, line := range strings.Split(stderr.String(), "\n") {
			switch {
			case strings.Contains(line, "the agent started in"):
				started = true
			case strings.HasPrefix(line, "gc ") && started:
				after++
			case strings.HasPrefix(line, "gc "):
				before++
			}
		}
		switch {
		case !started:
			t.Fatalf("GOGC=%q: no line says the agent started:\n%s", gogc, stderr.String())
		case gogc == "" && (before != 0 || after == 0):
			t.Errorf("GOGC unset: %d collections before the agent started (want none), %d after (want some):\n%s", before, after, stderr.String())
		case gogc != "" && before == 0:
			t.Errorf("GOGC=%s: no collection before the agent started, as if the run held the collector back against the user's setting:\n%s", gogc, stderr.String())
		}
	}
}

// A check's cgroup and network namespace are made ahead, while the sandbox
// before it runs (the agent's, for the first). A run whose agent times
// out runs no check: what was made ahead for the first is removed with the
// run, as is everything of a run whose checks all ran.
func TestLocalRunLeavesNoCgroupMadeAheadForItsChecks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: a local run as root makes cgroups of its own")
	}
	bin := harnessfactsBinary(t)
	base := openDir(t)
	fix := filepath.Join(base, "slow")
	writeFiles(t, map[string]string{
		filepath.Join(fix, "fixture.yaml"):   "prompt: wait\nchecks:\n- {name: one, command: [\"true\"]}\n- {name: two, command: [\"true\"]}\nlimits: {episodeSeconds: 1}\n",
		filepath.Join(fix, "workspace", "a"): "x\n",
		filepath.Join(fix, "run.yaml"): `apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: slow}
spec:
  agent: {adapter: exec, command: [sleep, "30"]}
  fixture: {configMapRef: {name: slow}}
`,
	})
	for i, runFile := range []string{filepath.Join(fix, "run.yaml"), filepath.Join(repoRoot(t), "fixtures", "hello", "run.yaml")} {
		cmd := exec.Command(bin, "run", "-f", runFile, "--run-root", filepath.Join(base, "runs"), "--evidence", filepath.Join(base, fmt.Sprint("ev", i)))
		out, err := cmd.CombinedOutput()
		if i == 0 && !strings.Contains(string(out), "did not finish within limits.episodeSeconds") {
			t.Fatalf("the slow agent's run did not time out (%v):\n%s", err, out)
		}
		if i == 1 && err != nil {
			t.Fatalf("hello: %v\n%s", err, out)
		}
		if left := runCgroupsOf(t, cmd.Process.Pid); len(left) > 0 {
			t.Errorf("%s left the cgroups %v", runFile, left)
		}
	}
}

// writeFiles writes each file of files (by path), making its folders.
func writeFiles(t *testing.T, files map[string]string) {
	t.Helper()
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
