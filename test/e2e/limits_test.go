//go:build linux

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/syncbuf"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// shortFixture is a fixture whose limits give its agent a 2-second episode.
const shortFixture = "prompt: go\nlimits:\n  episodeSeconds: 2\n  probeSeconds: 2\n  maxOutputBytes: 4096\n"

func inlineRun(ns, name, fixtureYAML, script string) *harnessv1.HarnessRun {
	r := scriptRun(ns, name, script)
	r.Spec.Fixture.Inline.Files["fixture.yaml"] = fixtureYAML
	return r
}

// TestFixtureLimitsApplyWhenTheRunSetsNone: a run that sets no limit runs
// under its fixture's (hello's 180-second episode, not the API's 360; a
// 2-second episode ends a sleeping agent), and a limit the run sets wins
// over its fixture's. status.limits and status.limitSources say what
// applied and where it came from. On the old main the API server filled
// every limit, so no fixture's limit ever applied.
func TestFixtureLimitsApplyWhenTheRunSetsNone(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "e2e-limits")
	fixtureConfigMap(t, ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	hello := helloRun(ns, harnessv1.MCPTransportHTTP)
	timesOut := inlineRun(ns, "fixture-episode", shortFixture, "echo started; sleep 30; echo slept")
	runWins := inlineRun(ns, "run-episode", shortFixture, "sleep 4; echo slept")
	runWins.Spec.Limits.EpisodeSeconds = 30
	watched := inlineRun(ns, "watched", "prompt: go\nlimits: {episodeSeconds: 40}\nchecks:\n- {name: a, shell: 'true'}\n- {name: b, shell: 'true'}\n", "sleep 5")
	for _, r := range []*harnessv1.HarnessRun{hello, timesOut, runWins, watched} {
		if err := k8s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}

	// While the agent runs, status.limits already holds the fixture's
	// episode: the controller's deadline follows it, not its backstop.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cur := &harnessv1.HarnessRun{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(watched), cur); err != nil {
			t.Fatal(err)
		}
		if cur.Status.Phase == harnessv1.RunRunning && cur.Status.Limits != nil {
			if cur.Status.Limits.EpisodeSeconds != 40 || cur.Status.LimitSources["episodeSeconds"] != "fixture" {
				t.Errorf("a running run's status.limits %+v from %v; want the fixture's episodeSeconds 40", cur.Status.Limits, cur.Status.LimitSources)
			}
			// Its checks too, each within probeSeconds after the episode:
			// the deadline allows for them.
			if cur.Status.PlannedChecks != 2 {
				t.Errorf("a running run's status.plannedChecks %d, want its fixture's 2", cur.Status.PlannedChecks)
			}
			break
		}
		if cur.Status.Phase.Terminal() || time.Now().After(deadline) {
			t.Errorf("the run ran without status.limits: %+v", cur.Status)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	got := waitTerminal(t, client.ObjectKeyFromObject(hello))
	if got.Status.Verdict != harnessv1.VerdictPass {
		t.Errorf("hello: %s %s: %s", got.Status.Verdict, got.Status.Reason, got.Status.Message)
	}
	if l := got.Status.Limits; l == nil || l.EpisodeSeconds != 180 || l.ProbeSeconds != 20 {
		t.Errorf("hello ran under %+v; want its fixture's episodeSeconds 180 and probeSeconds 20", l)
	}
	want := map[string]string{"episodeSeconds": "fixture", "probeSeconds": "fixture", "memory": "default", "disk": "default",
		"maxDecisions": "default", "maxProcesses": "default", "maxOutputBytes": "default", "maxArtifactBytes": "default"}
	if diff := cmp.Diff(want, got.Status.LimitSources); diff != "" {
		t.Errorf("hello's status.limitSources (-want +got):\n%s", diff)
	}

	got = waitTerminal(t, client.ObjectKeyFromObject(timesOut))
	st := got.Status
	if st.Agent == nil || !st.Agent.TimedOut || st.FailureClass != harnessv1.FailureTimeout ||
		!strings.Contains(st.Message, "limits.episodeSeconds (2s)") || strings.Contains(outputTail(got), "slept") {
		t.Errorf("a sleeping agent under its fixture's 2-second episode: %s/%s: %s; agent %+v\noutput: %s",
			st.Verdict, st.FailureClass, st.Message, st.Agent, outputTail(got))
	}
	if l := st.Limits; l == nil || l.EpisodeSeconds != 2 || l.MaxOutputBytes != 4096 || st.LimitSources["episodeSeconds"] != "fixture" {
		t.Errorf("status.limits %+v from %v; want the fixture's episodeSeconds 2 and maxOutputBytes 4096", l, st.LimitSources)
	}

	got = waitTerminal(t, client.ObjectKeyFromObject(runWins))
	st = got.Status
	if st.Verdict != harnessv1.VerdictPass || !strings.Contains(outputTail(got), "slept") {
		t.Errorf("the run's 30-second episode over its fixture's 2: %s/%s: %s\noutput: %s", st.Verdict, st.Reason, st.Message, outputTail(got))
	}
	if l := st.Limits; l == nil || l.EpisodeSeconds != 30 || l.ProbeSeconds != 2 || st.LimitSources["episodeSeconds"] != "run" || st.LimitSources["probeSeconds"] != "fixture" {
		t.Errorf("status.limits %+v from %v; want the run's episodeSeconds 30 and the fixture's probeSeconds 2", l, st.LimitSources)
	}

	// The watched run, under way for seconds, said so with a Running
	// Event (naming when it started) before its Succeeded one.
	events := eventsv1.EventList{Items: testenv.FinishedRunEvents(t, k8s, waitTerminal(t, client.ObjectKeyFromObject(watched)))}
	var running, succeeded *eventsv1.Event
	for i, e := range events.Items {
		switch {
		case e.Regarding.Name != watched.Name:
		case e.Reason == "Running":
			running = &events.Items[i]
		case e.Reason == "Succeeded":
			succeeded = &events.Items[i]
		}
	}
	if running == nil || succeeded == nil || !running.EventTime.Before(&succeeded.EventTime) || !strings.Contains(running.Note, "started attempt 1 (at ") {
		t.Errorf("the watched run's Events: Running %+v, Succeeded %+v; want a Running one naming its start, then Succeeded", running, succeeded)
	}
}

// TestPolicyCeilingsJudgeTheResolvedLimits: a HarnessPolicy's ceilings
// apply to the limits a run resolves, not only to those it sets. A fixture
// asking for more than a ceiling ends the run with PolicyViolation naming
// the rule (never cut); a default above a ceiling, which nobody asked for,
// gives way to it, and status.limitSources says so.
func TestPolicyCeilingsJudgeTheResolvedLimits(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "e2e-ceilings")
	nsObj := &corev1.Namespace{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: ns}, nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Labels = map[string]string{"e2e-ceilings": "yes"}
	if err := k8s.Update(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	policy := &harnessv1.HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "e2e-ceilings"}, Spec: harnessv1.HarnessPolicySpec{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: nsObj.Labels},
		Limits:            &harnessv1.PolicyLimits{MaxEpisodeSeconds: ptr.To[int32](30), MaxDisk: ptr.To(resource.MustParse("64Mi"))},
	}}
	if err := k8s.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), policy) })

	fixtureConfigMap(t, ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	hello := helloRun(ns, harnessv1.MCPTransportHTTP) // its fixture asks for 180 s
	plain := inlineRun(ns, "defaults", "prompt: go\n", "echo hi")
	for _, r := range []*harnessv1.HarnessRun{hello, plain} {
		if err := k8s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}

	got := waitTerminal(t, client.ObjectKeyFromObject(hello))
	st := got.Status
	want := "HarnessPolicy e2e-ceilings rule limits.maxEpisodeSeconds: limits.episodeSeconds 180 (set by the fixture) is above the ceiling 30"
	if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonPolicyViolation || !strings.Contains(st.Message, want) ||
		st.Verdict != "" || st.Agent != nil {
		t.Errorf("hello under a 30-second ceiling: %s %s verdict %q: %s (agent %+v); want refused before the agent ran, saying %q",
			st.Phase, st.Reason, st.Verdict, st.Message, st.Agent, want)
	}
	if c := st.LimitCeilings; c == nil || c.MaxEpisodeSeconds == nil || *c.MaxEpisodeSeconds != 30 || c.Policies["maxEpisodeSeconds"] != policy.Name {
		t.Errorf("status.limitCeilings %+v; want the policy's maxEpisodeSeconds 30, named", c)
	}

	got = waitTerminal(t, client.ObjectKeyFromObject(plain))
	st = got.Status
	if st.Verdict != harnessv1.VerdictPass {
		t.Errorf("a run within the ceilings: %s %s: %s", st.Verdict, st.Reason, st.Message)
	}
	if l := st.Limits; l == nil || l.EpisodeSeconds != 30 || l.Disk.Cmp(resource.MustParse("64Mi")) != 0 ||
		st.LimitSources["episodeSeconds"] != "HarnessPolicy e2e-ceilings limits.maxEpisodeSeconds" ||
		st.LimitSources["disk"] != "HarnessPolicy e2e-ceilings limits.maxDisk" || st.LimitSources["memory"] != "default" {
		t.Errorf("status.limits %+v from %v; want the defaults lowered to the ceilings and said so", l, st.LimitSources)
	}
}

// localRun runs `harnessfacts run -f` on a run.yaml (a file, or YAML
// written to one) and returns the status it prints.
func localRun(t *testing.T, file, runYAML string) harnessv1.HarnessRunStatus {
	t.Helper()
	dir := t.TempDir()
	if file == "" {
		file = filepath.Join(dir, "run.yaml")
		if err := os.WriteFile(file, []byte(runYAML), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	runs := filepath.Join(openDir(t), "runs")
	cmd := exec.Command(binary, "run", "-f", file, "--evidence", filepath.Join(dir, "evidence"), "--run-root", runs)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run() // a run that does not pass exits 1; its status says why
	var out struct {
		Status harnessv1.HarnessRunStatus `json:"status"`
	}
	if err := yaml.Unmarshal(stdout.Bytes(), &out); err != nil || out.Status.Phase == "" {
		t.Fatalf("harnessfacts run printed no status (%v)\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	return out.Status
}

func localRunYAML(name, fixtureYAML, script, limits string) string {
	y := "apiVersion: harnessfacts.io/v1alpha1\nkind: HarnessRun\nmetadata: {name: " + name + "}\nspec:\n" +
		"  agent: {adapter: exec, command: [bash, -c, " + quoteYAML(script) + "]}\n" +
		"  fixture: {inline: {files: {fixture.yaml: " + quoteYAML(fixtureYAML) + "}}}\n"
	if limits != "" {
		y += "  limits: " + limits + "\n"
	}
	return y
}

// TestLocalRunAppliesFixtureLimits: `harnessfacts run -f` resolves limits
// as a cluster does: hello's run.yaml, which sets none, runs under the
// fixture's 180-second episode; a 2-second fixture episode ends a sleeping
// agent; a run's own episode wins over its fixture's.
func TestLocalRunAppliesFixtureLimits(t *testing.T) {
	st := localRun(t, filepath.Join(testenv.RepoRoot(), "fixtures", "hello", "run.yaml"), "")
	if st.Verdict != harnessv1.VerdictPass || st.Limits == nil || st.Limits.EpisodeSeconds != 180 || st.LimitSources["episodeSeconds"] != "fixture" {
		t.Errorf("hello run locally: %s %s: %s; limits %+v from %v; want a pass under the fixture's 180 s",
			st.Verdict, st.Reason, st.Message, st.Limits, st.LimitSources)
	}

	st = localRun(t, "", localRunYAML("fixture-episode", shortFixture, "echo started; sleep 30; echo slept", ""))
	if st.Agent == nil || !st.Agent.TimedOut || !strings.Contains(st.Message, "limits.episodeSeconds (2s)") ||
		st.Limits == nil || st.Limits.EpisodeSeconds != 2 || st.LimitSources["episodeSeconds"] != "fixture" {
		t.Errorf("a sleeping agent under its fixture's 2-second episode, locally: %s/%s: %s; agent %+v; limits %+v from %v",
			st.Verdict, st.FailureClass, st.Message, st.Agent, st.Limits, st.LimitSources)
	}

	st = localRun(t, "", localRunYAML("run-episode", shortFixture, "sleep 4; echo slept", "{episodeSeconds: 30}"))
	if st.Verdict != harnessv1.VerdictPass || st.Limits == nil || st.Limits.EpisodeSeconds != 30 || st.LimitSources["episodeSeconds"] != "run" {
		t.Errorf("the run's 30-second episode over its fixture's 2, locally: %s/%s: %s; limits %+v from %v",
			st.Verdict, st.Reason, st.Message, st.Limits, st.LimitSources)
	}
}

// TestHugeMaxOutputBytesKeepsMemoryBounded: a run allowed the most output
// the schema takes (limits.maxOutputBytes 1 GiB) whose agent prints 256 MiB
// costs the executor no memory in proportion: `harnessfacts run` (the
// executor a node-agent runs, with real bwrap) keeps the output in a spool
// file, not in memory. Its peak RSS, and that of every process it waited
// for, stays within a few MiB of the same run printing a few bytes.
func TestHugeMaxOutputBytesKeepsMemoryBounded(t *testing.T) {
	const printed = 256 << 20
	peakOf := func(name, script string) (int64, harnessv1.HarnessRunStatus) {
		dir := t.TempDir()
		file := filepath.Join(dir, "run.yaml")
		if err := os.WriteFile(file, []byte(localRunYAML(name, "prompt: go\n", script, "{maxOutputBytes: 1073741824}")), 0o600); err != nil {
			t.Fatal(err)
		}
		runs := filepath.Join(openDir(t), "runs")
		stdoutFile, stderrFile := filepath.Join(dir, "stdout"), filepath.Join(dir, "stderr")
		// The peak covers the process and the children it waited for:
		// the executor, bwrap, sandbox-init and the agent's tree.
		peak, ws := peakRSS(t, dir, stdoutFile, stderrFile, binary, "run", "-f", file, "--evidence", filepath.Join(dir, "evidence"), "--run-root", runs)
		stdout, _ := os.ReadFile(stdoutFile)
		if !ws.Exited() || ws.ExitStatus() != 0 {
			stderr, _ := os.ReadFile(stderrFile)
			t.Fatalf("harnessfacts run: %v\nstdout:\n%s\nstderr:\n%s", ws, stdout, stderr)
		}
		var out struct {
			Status harnessv1.HarnessRunStatus `json:"status"`
		}
		if err := yaml.Unmarshal(stdout, &out); err != nil {
			t.Fatal(err)
		}
		return peak, out.Status
	}
	quiet, _ := peakOf("quiet", "echo done")
	loud, st := peakOf("loud", "head -c 268435456 /dev/zero | tr '\\\\0' x; echo; echo done")
	if st.Agent == nil || st.Agent.OutputBytes < printed || st.Agent.Truncated || st.Limits == nil || st.Limits.MaxOutputBytes != 1<<30 {
		t.Fatalf("agent %+v, limits %+v: want %d bytes printed, none dropped, under maxOutputBytes 1 GiB", st.Agent, st.Limits, printed)
	}
	t.Logf("peak RSS %d MiB for %d MiB of output, %d MiB for a few bytes", loud>>20, printed>>20, quiet>>20)
	if loud-quiet > 32<<20 {
		t.Errorf("harnessfacts run peaked at %d MiB of RSS for %d MiB of output, %d MiB for a few bytes: the output is held in memory",
			loud>>20, printed>>20, quiet>>20)
	}
}

// TestLocalRunInterrupted: Ctrl-C (SIGINT), again and again, during a local run's
// agent ends the run Stopped, saying it was interrupted here, with the
// agent's tree killed, its status printed and its evidence written, and
// nothing of the run dir left.
func TestLocalRunInterrupted(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(file, []byte(localRunYAML("interrupted", "prompt: go\n", "echo started; sleep 60; echo slept", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	runs := filepath.Join(openDir(t), "runs")
	cmd := exec.Command(binary, "run", "-f", file, "--evidence", filepath.Join(dir, "evidence"), "--run-root", runs)
	var stdout bytes.Buffer
	stderr := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(stderr.String(), "the agent started") {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the agent never started:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	// Ctrl-C pressed again and again, as people do: none of the later ones
	// may kill the command while it stops the agent and removes the run
	// dir with the credential copies in it.
	waited := make(chan struct{})
	go func() {
		for {
			select {
			case <-waited:
				return
			case <-time.After(5 * time.Millisecond):
				_ = cmd.Process.Signal(os.Interrupt)
			}
		}
	}()
	_ = cmd.Wait()
	close(waited)
	var out struct {
		Status harnessv1.HarnessRunStatus `json:"status"`
	}
	if err := yaml.Unmarshal(stdout.Bytes(), &out); err != nil || out.Status.Phase == "" {
		t.Fatalf("harnessfacts run printed no status (%v)\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	st := out.Status
	if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonStopped || st.FailureClass != "" ||
		!strings.Contains(st.Message, "harnessfacts run was interrupted (interrupt)") || strings.Contains(st.Message, "node-agent") {
		t.Errorf("an interrupted local run: %s %s class %q: %s; want Failed, Stopped, no class, said to be interrupted here", st.Phase, st.Reason, st.FailureClass, st.Message)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the run took %s to end after the interrupt", took)
	}
	if entries, err := os.ReadDir(runs); err == nil && len(entries) > 0 {
		t.Errorf("the run root keeps %d entries after the run", len(entries))
	}
	if _, err := os.Stat(filepath.Join(dir, "evidence")); err != nil {
		t.Errorf("no evidence written: %v", err)
	}
}

// TestSmallProcessLimitIsTheAgents: limits.maxProcesses counts the agent's
// own processes. bwrap's pid 1 and sandbox-init's threads share the run's
// pids cgroup and come on top, so a limit of 1 or 4 neither breaks the
// sandbox nor sandbox-init (which the run then blamed on the agent, exit
// code 1 and "Can't fork for pid 1"), nor does the agent, using all of
// its limit, leave sandbox-init without a thread it needs: the agent gets
// exactly its limit.
func TestSmallProcessLimitIsTheAgents(t *testing.T) {
	const script = `n=0; while [ $n -lt 40 ]; do sleep 3 & n=$((n+1)); echo "started $n"; done`
	for _, limit := range []int{1, 4, 16} {
		y := "apiVersion: harnessfacts.io/v1alpha1\nkind: HarnessRun\nmetadata: {name: small-limit}\nspec:\n" +
			"  agent: {adapter: exec, command: [sh, -c, " + quoteYAML(script) + "]}\n" +
			"  fixture: {inline: {files: {fixture.yaml: " + quoteYAML("prompt: go\n") + "}}}\n" +
			"  limits: {maxProcesses: " + strconv.Itoa(limit) + "}\n"
		st := localRun(t, "", y)
		if st.Agent == nil {
			t.Fatalf("maxProcesses %d: no agent status: %s/%s: %s", limit, st.Verdict, st.Reason, st.Message)
		}
		out := st.Agent.OutputTail
		if strings.Contains(out, "bwrap:") || strings.Contains(out, "newosproc") || strings.Contains(out, "sandbox-init") {
			t.Errorf("maxProcesses %d broke the sandbox, not the agent:\n%s", limit, out)
			continue
		}
		started := 0
		for _, line := range strings.Split(out, "\n") {
			if n, err := strconv.Atoi(strings.TrimPrefix(line, "started ")); err == nil && n > started {
				started = n
			}
		}
		// The shell is one of the agent's processes.
		if got := started + 1; got != limit {
			t.Errorf("maxProcesses %d: the agent ran %d processes at once, want %d:\n%s", limit, got, limit, out)
		}
	}
}

// TestArtifactsAreWhatTheChecksJudged: the artifacts are hashed as the
// agent left them, before the checks. Here a second check runs the
// workspace's own test script, which rewrites count.txt after the first
// check passed it; the receipt used to sign the rewritten file beside the
// passed checks (helper 65).
func TestArtifactsAreWhatTheChecksJudged(t *testing.T) {
	fixtureYAML := "prompt: count\nartifacts: [count.txt]\nchecks:\n" +
		"- {name: correct, shell: 'grep -qx 3 count.txt'}\n" +
		"- {name: project-tests, shell: 'sh ./run_tests.sh'}\n"
	st := localRun(t, "", localRunYAML("artifacts-first", fixtureYAML, `echo 3 > count.txt; echo "echo 41 > count.txt" > run_tests.sh`, ""))
	want := sha256.Sum256([]byte("3\n"))
	if len(st.Artifacts) != 1 || st.Artifacts[0].SHA256 != hex.EncodeToString(want[:]) {
		t.Fatalf("artifacts %+v: want count.txt as the agent left it (3), sha256 %x; verdict %s: %s", st.Artifacts, want, st.Verdict, st.Message)
	}
	if st.Verdict != harnessv1.VerdictPass {
		t.Errorf("verdict %s (%s): want Pass", st.Verdict, st.Message)
	}
}
