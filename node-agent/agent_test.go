package nodeagent_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/leaks"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
	nodeagent "github.com/harnessfacts/harnessfacts/node-agent"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
)

var (
	env *testenv.Env
	k8s client.Client
)

func TestMain(m *testing.M) {
	before := goleak.IgnoreCurrent()
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s, err = client.New(env.Config, client.Options{Scheme: env.Scheme})
	if err == nil {
		err = k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNS}})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = env.Stop()
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	// Every attempt the Agent started has ended and written its outcome
	// once its manager stopped: no goroutine of ours may outlive it.
	if code == 0 {
		if err := goleak.Find(before, leaks.SandboxForker); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const leaseNS = "harnessfacts-system"

// scripted is an Executor whose outcome a test decides; it stands in for
// the real one where a test is about the Kubernetes side only.
type scripted struct {
	calls atomic.Int32
	// block holds each execution until the run is stopped.
	block bool
	mu    sync.Mutex
	seen  []string
}

func (s *scripted) Execute(ctx context.Context, run *harnessv1.HarnessRun) *executor.Outcome {
	s.calls.Add(1)
	s.mu.Lock()
	s.seen = append(s.seen, fmt.Sprintf("%s/%d", run.Name, run.Status.Attempt))
	s.mu.Unlock()
	if s.block {
		<-ctx.Done()
		var sc *executor.StopCause
		reason := harnessv1.ReasonStopped
		if errors.As(context.Cause(ctx), &sc) {
			reason = sc.Reason
		}
		return &executor.Outcome{Status: harnessv1.HarnessRunStatus{Phase: harnessv1.RunFailed, Verdict: harnessv1.VerdictError,
			Reason: reason, Message: "stopped: " + context.Cause(ctx).Error()}}
	}
	return &executor.Outcome{
		Status: harnessv1.HarnessRunStatus{Phase: harnessv1.RunSucceeded, Verdict: harnessv1.VerdictPass,
			Reason: harnessv1.ReasonCompleted, Message: "done",
			Evidence: &harnessv1.EvidenceStatus{Digest: "sha256:00"}},
		Evidence: &executor.Evidence{Data: map[string]string{"receipt.json": "{}"}},
	}
}

// startAgent runs a node-agent for node with exec in its own manager.
func startAgent(t *testing.T, node string, exec nodeagent.Executor, tune ...func(*nodeagent.Options)) context.CancelFunc {
	t.Helper()
	return startAgentOn(t, env.Config, node, exec, tune...)
}

// startAgentOn is startAgent with the node-agent's API client on cfg.
func startAgentOn(t *testing.T, cfg *rest.Config, node string, exec nodeagent.Executor, tune ...func(*nodeagent.Options)) context.CancelFunc {
	t.Helper()
	api, err := nodeagent.NewAPI(cfg, node)
	if err != nil {
		t.Fatal(err)
	}
	opts := nodeagent.Options{
		NodeName: node, LeaseNamespace: leaseNS, LeaseDuration: 4 * time.Second, Slots: 2,
		Adapters:     []harnessv1.AdapterInfo{{Name: harnessv1.AdapterExec, Version: "builtin"}},
		SandboxModes: []harnessv1.SandboxModeInfo{{Mode: "bwrap", Available: true}},
		Executor:     exec,
	}
	for _, f := range tune {
		f(&opts)
	}
	agent, err := nodeagent.New(api, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Start(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node-agent manager: %v", err)
		}
	}
	t.Cleanup(func() {
		select {
		case <-ctx.Done():
		default:
			stop()
		}
	})
	return stop
}

// boundRun creates a run and binds it to node as the controller would.
func boundRun(t *testing.T, name, node string, phase harnessv1.RunPhase) *harnessv1.HarnessRun {
	t.Helper()
	ctx := context.Background()
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: harnessv1.HarnessRunSpec{
			Agent:   harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: p\n"}}},
		},
	}
	if err := k8s.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), run) })
	now := metav1.Now()
	run.Status.Phase, run.Status.NodeName, run.Status.Attempt, run.Status.ScheduledTime = phase, node, 1, &now
	if err := k8s.Status().Update(ctx, run); err != nil {
		t.Fatal(err)
	}
	return run
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func getRun(t *testing.T, name string) *harnessv1.HarnessRun {
	t.Helper()
	run := &harnessv1.HarnessRun{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: name}, run); err != nil {
		t.Fatal(err)
	}
	return run
}

func TestRegistersTheNodeAndHeartbeats(t *testing.T) {
	startAgent(t, "node-reg", &scripted{})
	ctx := context.Background()
	node := &harnessv1.HarnessNode{}
	waitFor(t, "the HarnessNode", func() bool {
		return k8s.Get(ctx, types.NamespacedName{Name: "node-reg"}, node) == nil &&
			meta.IsStatusConditionTrue(node.Status.Conditions, harnessv1.ConditionNodeReady)
	})
	if node.Spec.Slots != 2 || node.Status.OS == "" || len(node.Status.Adapters) != 1 || node.Status.LeaseNamespace != leaseNS ||
		node.Status.ObservedGeneration != node.Generation {
		t.Errorf("HarnessNode does not describe the node: spec %+v status %+v", node.Spec, node.Status)
	}
	lease := &coordinationv1.Lease{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: leaseNS, Name: "node-reg"}, lease); err != nil {
		t.Fatalf("no heartbeat Lease: %v", err)
	}
	first := lease.Spec.RenewTime.Time
	waitFor(t, "the Lease to be renewed", func() bool {
		_ = k8s.Get(ctx, types.NamespacedName{Namespace: leaseNS, Name: "node-reg"}, lease)
		return lease.Spec.RenewTime.After(first)
	})
}

func TestClaimsExecutesOnceAndWritesEvidence(t *testing.T) {
	exec := &scripted{}
	startAgent(t, "node-claim", exec)
	boundRun(t, "claim-me", "node-claim", harnessv1.RunScheduled)
	boundRun(t, "not-mine", "other-node", harnessv1.RunScheduled)

	var run *harnessv1.HarnessRun
	waitFor(t, "the run to finish", func() bool {
		run = getRun(t, "claim-me")
		return run.Status.Phase.Terminal()
	})
	if run.Status.Phase != harnessv1.RunSucceeded || run.Status.Verdict != harnessv1.VerdictPass || run.Status.StartTime == nil || run.Status.CompletionTime == nil {
		t.Errorf("status = %+v, want Succeeded/Pass with start and completion times", run.Status)
	}
	if !meta.IsStatusConditionTrue(run.Status.Conditions, harnessv1.ConditionReady) {
		t.Errorf("Ready is not True: %+v", run.Status.Conditions)
	}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: run.Status.Evidence.ConfigMapName}, cm); err != nil {
		t.Fatalf("evidence ConfigMap %q: %v", run.Status.Evidence.ConfigMapName, err)
	}
	if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != run.UID {
		t.Errorf("evidence ConfigMap is not owned by the run: %+v", cm.OwnerReferences)
	}
	if cm.Labels[nodeagent.LabelNode] != "node-claim" {
		t.Errorf("evidence ConfigMap labels %v do not name the node that wrote it (the admission policy requires it)", cm.Labels)
	}
	time.Sleep(500 * time.Millisecond) // a second execution would show up by now
	if n := exec.calls.Load(); n != 1 {
		t.Errorf("executed %d times (%v), want exactly once", n, exec.seen)
	}
	if other := getRun(t, "not-mine"); other.Status.Phase != harnessv1.RunScheduled {
		t.Errorf("a run bound to another node was touched: %s", other.Status.Phase)
	}
}

// cleaningBehind is scripted whose attempts clean up behind, as the real
// executor does in the node-agent (executor.Options.CleanBehind): each
// cleanup is done when the test closes cleaned.
type cleaningBehind struct {
	scripted
	cleaned chan struct{}
}

func (c *cleaningBehind) Execute(ctx context.Context, run *harnessv1.HarnessRun) *executor.Outcome {
	out := c.scripted.Execute(ctx, run)
	out.Cleaned = c.cleaned
	return out
}

// TestTheTerminalStatusWaitsForTheCleanup: the evidence is written while
// the attempt's cleanup goes on; the terminal status, which frees the
// run's slot for the controller, only once it is done, so that nothing of
// a run (its dir, its credential copies, its servers) outlives it.
func TestTheTerminalStatusWaitsForTheCleanup(t *testing.T) {
	exec := &cleaningBehind{cleaned: make(chan struct{})}
	startAgent(t, "node-behind", exec)
	var once sync.Once
	cleanedUp := func() { once.Do(func() { close(exec.cleaned) }) }
	t.Cleanup(cleanedUp) // before the agent's stop, which waits for it
	run := boundRun(t, "cleaned-behind", "node-behind", harnessv1.RunScheduled)
	evidence := types.NamespacedName{Namespace: "default", Name: nodeagent.EvidenceName(run)}
	waitFor(t, "the evidence ConfigMap, written while the cleanup goes on", func() bool {
		return k8s.Get(context.Background(), evidence, &corev1.ConfigMap{}) == nil
	})
	time.Sleep(500 * time.Millisecond) // a terminal write that did not wait would be in by now
	if st := getRun(t, "cleaned-behind").Status; st.Phase != harnessv1.RunRunning {
		t.Fatalf("before the cleanup was done the run is %s (%s), want Running", st.Phase, st.Message)
	}
	cleanedUp()
	waitFor(t, "the run to finish once cleaned", func() bool { return getRun(t, "cleaned-behind").Status.Phase.Terminal() })
	if st := getRun(t, "cleaned-behind").Status; st.Phase != harnessv1.RunSucceeded || st.Evidence == nil || st.Evidence.ConfigMapName != evidence.Name {
		t.Errorf("status = %s, evidence %+v; want Succeeded naming %s", st.Phase, st.Evidence, evidence.Name)
	}
}

// TestSquattedEvidenceNameGetsAnotherName: anyone who may write ConfigMaps
// in the namespace can make one named as a run's evidence will be before
// the run ends (here immutable, with a forged receipt). The evidence is
// then written under a name of its own, which status records, and the
// squatter's ConfigMap is left as it was. Before, the run passed with no
// evidence ConfigMap at all.
func TestSquattedEvidenceNameGetsAnotherName(t *testing.T) {
	ctx := context.Background()
	squat := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "squatted-evidence-1", Namespace: "default"},
		Immutable:  ptr.To(true),
		Data:       map[string]string{"receipt.json": `{"forged":true}`},
	}
	if err := k8s.Create(ctx, squat); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), squat) })
	startAgent(t, "node-squat", &scripted{})
	boundRun(t, "squatted", "node-squat", harnessv1.RunScheduled)
	var run *harnessv1.HarnessRun
	waitFor(t, "the run to finish", func() bool {
		run = getRun(t, "squatted")
		return run.Status.Phase.Terminal()
	})
	if run.Status.Evidence == nil || run.Status.Evidence.ConfigMapName == "" || run.Status.Evidence.ConfigMapName == squat.Name ||
		strings.Contains(run.Status.Message, "evidence ConfigMap failed") {
		t.Fatalf("status %+v, message %q: want the evidence under another name", run.Status.Evidence, run.Status.Message)
	}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: "default", Name: run.Status.Evidence.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != run.UID || cm.Labels[nodeagent.LabelRunUID] != string(run.UID) {
		t.Errorf("evidence %s is not the run's: owners %+v, labels %v", cm.Name, cm.OwnerReferences, cm.Labels)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(squat), cm); err != nil || cm.Data["receipt.json"] != `{"forged":true}` || len(cm.OwnerReferences) != 0 {
		t.Errorf("the squatter's ConfigMap changed: %v %+v", err, cm)
	}
}

func TestCancelStopsTheRunningAttempt(t *testing.T) {
	exec := &scripted{block: true}
	startAgent(t, "node-cancel", exec)
	boundRun(t, "cancel-me", "node-cancel", harnessv1.RunScheduled)
	waitFor(t, "the run to start", func() bool { return getRun(t, "cancel-me").Status.Phase == harnessv1.RunRunning })

	run := getRun(t, "cancel-me")
	run.Spec.Cancel = true
	if err := k8s.Update(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run to stop", func() bool {
		run = getRun(t, "cancel-me")
		return run.Status.Phase.Terminal()
	})
	if run.Status.Phase != harnessv1.RunFailed || run.Status.Reason != harnessv1.ReasonCancelled {
		t.Errorf("status = %s/%s (%s), want Failed/Cancelled", run.Status.Phase, run.Status.Reason, run.Status.Message)
	}
}

func TestRestartReportsTheOrphanedAttemptAndNeverRunsItAgain(t *testing.T) {
	// An earlier node-agent process claimed this attempt and died.
	boundRun(t, "orphan", "node-restart", harnessv1.RunRunning)
	exec := &scripted{}
	startAgent(t, "node-restart", exec)
	var run *harnessv1.HarnessRun
	waitFor(t, "the orphaned attempt to be reported", func() bool {
		run = getRun(t, "orphan")
		c := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionReady)
		return c != nil && c.Reason == harnessv1.ReasonNodeAgentRestarted
	})
	time.Sleep(500 * time.Millisecond)
	if n := exec.calls.Load(); n != 0 {
		t.Errorf("the orphaned attempt was executed again (%d calls)", n)
	}
}

// TestClaimRechecksThePolicy: a run bound before a HarnessPolicy was made
// (or tightened) that it now breaks is refused when its node-agent claims
// it, naming the rule, and its agent never starts.
func TestClaimRechecksThePolicy(t *testing.T) {
	ctx := context.Background()
	const ns = "claim-policy"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"tenant": ns}}}); err != nil {
		t.Fatal(err)
	}
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "admitted-before", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent:   harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: p\n"}}},
		},
	}
	if err := k8s.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	// The policy comes after admission and after binding.
	policy := &harnessv1.HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "codex-only"}, Spec: harnessv1.HarnessPolicySpec{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tenant": ns}},
		Adapters:          []harnessv1.Adapter{harnessv1.AdapterCodex},
	}}
	if err := k8s.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), policy) })
	now := metav1.Now()
	run.Status.Phase, run.Status.NodeName, run.Status.Attempt, run.Status.ScheduledTime = harnessv1.RunScheduled, "node-policy", 1, &now
	if err := k8s.Status().Update(ctx, run); err != nil {
		t.Fatal(err)
	}

	exec := &scripted{}
	startAgent(t, "node-policy", exec)
	waitFor(t, "the run to end", func() bool {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(run), run); err != nil {
			t.Fatal(err)
		}
		return run.Status.Phase.Terminal()
	})
	st := run.Status
	if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonPolicyViolation ||
		!strings.Contains(st.Message, "HarnessPolicy codex-only rule adapters: adapter exec is not allowed") || st.StartTime != nil {
		t.Errorf("status = %s %s %q (started %v), want Failed PolicyViolation naming the rule, never started", st.Phase, st.Reason, st.Message, st.StartTime)
	}
	if !meta.IsStatusConditionTrue(st.Conditions, harnessv1.ConditionFinished) {
		t.Errorf("the refused run is not Finished: %+v", st.Conditions)
	}
	if n := exec.calls.Load(); n != 0 {
		t.Errorf("the agent of a refused run was executed %d times", n)
	}
}

// draining is an Executor whose attempts take the time its runs' names
// say: "quick-*" a moment, others until they are stopped. A stopped attempt
// still reports Pass with evidence, as an agent that printed its answer
// just before it was killed might: the node-agent must not believe it.
type draining struct {
	mu     sync.Mutex
	causes map[string]error
	calls  map[string]int
}

func (d *draining) Execute(ctx context.Context, run *harnessv1.HarnessRun) *executor.Outcome {
	d.mu.Lock()
	d.calls[run.Name]++
	d.mu.Unlock()
	if strings.HasPrefix(run.Name, "quick-") {
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
		}
	} else {
		<-ctx.Done()
	}
	d.mu.Lock()
	d.causes[run.Name] = context.Cause(ctx)
	d.mu.Unlock()
	return &executor.Outcome{
		Status: harnessv1.HarnessRunStatus{Phase: harnessv1.RunSucceeded, Verdict: harnessv1.VerdictPass,
			Reason: harnessv1.ReasonCompleted, Message: "done", Evidence: &harnessv1.EvidenceStatus{Digest: "sha256:00"}},
		Evidence: &executor.Evidence{Data: map[string]string{"receipt.json": "{}"}},
	}
}

// TestDrainSeesAClaimThrough: the node-agent begins stopping while its
// claim's write is on its way (the API server has taken it; its answer is
// slow). The claim is seen through and its attempt finishes within the
// grace, instead of the run being left Running with no attempt (its answer
// dropped with the cancelled context) until the next node-agent's sweep.
func TestDrainSeesAClaimThrough(t *testing.T) {
	const node = "node-drain-claim"
	taken := make(chan struct{})
	var once sync.Once
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err != nil || req.Method != http.MethodPatch || !strings.HasSuffix(req.URL.Path, "/harnessruns/quick-slow-claim/status") {
				return resp, err
			}
			// Taken by the API server; the answer is slow to come back.
			once.Do(func() { close(taken) })
			select {
			case <-time.After(500 * time.Millisecond):
				return resp, nil
			case <-req.Context().Done():
				_ = resp.Body.Close()
				return nil, req.Context().Err()
			}
		})
	}
	exec := &draining{causes: map[string]error{}, calls: map[string]int{}}
	stop := startAgentOn(t, cfg, node, exec, func(o *nodeagent.Options) { o.HandBackAfter = 30 * time.Second })
	boundRun(t, "quick-slow-claim", node, harnessv1.RunScheduled)
	select {
	case <-taken:
	case <-time.After(30 * time.Second):
		t.Fatal("the claim was never sent")
	}
	stop()
	run := getRun(t, "quick-slow-claim")
	if run.Status.Phase != harnessv1.RunSucceeded || run.Status.Verdict != harnessv1.VerdictPass {
		t.Errorf("a run whose claim was on its way when the node-agent began stopping: %s %q %s: %s",
			run.Status.Phase, run.Status.Verdict, run.Status.Reason, run.Status.Message)
	}
	exec.mu.Lock()
	defer exec.mu.Unlock()
	if exec.calls["quick-slow-claim"] != 1 {
		t.Errorf("the attempt ran %d times, want once", exec.calls["quick-slow-claim"])
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestDrainHandsBackWhatCannotFinish: a stopping node-agent says Draining on
// its HarnessNode and claims no new run; an attempt that finishes within
// HandBackAfter is written as usual; one still running then is stopped and
// handed back (Ready=False, reason HandedBack, phase Running, no verdict,
// no evidence), whatever its stopped agent reported.
func TestDrainHandsBackWhatCannotFinish(t *testing.T) {
	exec := &draining{causes: map[string]error{}, calls: map[string]int{}}
	const node = "node-drain"
	// The quick run ends well within HandBackAfter; the other never ends
	// by itself.
	stop := startAgent(t, node, exec, func(o *nodeagent.Options) { o.HandBackAfter = 5 * time.Second })
	boundRun(t, "long-drained", node, harnessv1.RunScheduled)
	waitFor(t, "the long run to start", func() bool { return getRun(t, "long-drained").Status.Phase == harnessv1.RunRunning })

	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	ctx := context.Background()
	hn := &harnessv1.HarnessNode{}
	waitFor(t, "the HarnessNode to say Draining", func() bool {
		if err := k8s.Get(ctx, types.NamespacedName{Name: node}, hn); err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(hn.Status.Conditions, harnessv1.ConditionNodeReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == harnessv1.ReasonDraining
	})
	// Bound while the node-agent drains (a controller that had not seen
	// Draining yet): not claimed.
	boundRun(t, "quick-late", node, harnessv1.RunScheduled)
	<-stopped

	long := getRun(t, "long-drained")
	ready := meta.FindStatusCondition(long.Status.Conditions, harnessv1.ConditionReady)
	if long.Status.Phase != harnessv1.RunRunning || ready == nil || ready.Reason != harnessv1.ReasonHandedBack ||
		long.Status.Verdict != "" || long.Status.Evidence != nil || long.Status.LiveOutput != nil || long.Status.Attempt != 1 {
		t.Errorf("the long run after the drain: phase %s verdict %q evidence %+v ready %+v; want Running, no verdict, no evidence, Ready=False HandedBack",
			long.Status.Phase, long.Status.Verdict, long.Status.Evidence, ready)
	}
	var sc *executor.StopCause
	if !errors.As(exec.causes["long-drained"], &sc) || sc.Reason != harnessv1.ReasonHandedBack {
		t.Errorf("the long run's agent was stopped by %v, want a StopCause HandedBack", exec.causes["long-drained"])
	}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: "default", Name: nodeagent.EvidenceName(long)}, cm); err == nil {
		t.Errorf("the handed-back attempt has evidence %s", cm.Name)
	}
	if late := getRun(t, "quick-late"); late.Status.Phase != harnessv1.RunScheduled {
		t.Errorf("a run bound while the node-agent drained was claimed: %s", late.Status.Phase)
	}
	exec.mu.Lock()
	defer exec.mu.Unlock()
	if exec.calls["quick-late"] != 0 || exec.calls["long-drained"] != 1 {
		t.Errorf("executions %v, want long-drained once and quick-late never", exec.calls)
	}
}

// TestDrainLetsAnAttemptFinish: an attempt that ends within HandBackAfter
// of the node-agent's stop is judged and written as usual; the stop waits
// for it.
func TestDrainLetsAnAttemptFinish(t *testing.T) {
	exec := &draining{causes: map[string]error{}, calls: map[string]int{}}
	const node = "node-drain-finish"
	stop := startAgent(t, node, exec, func(o *nodeagent.Options) { o.HandBackAfter = 30 * time.Second })
	boundRun(t, "quick-finishes", node, harnessv1.RunScheduled)
	waitFor(t, "the run to start", func() bool { return getRun(t, "quick-finishes").Status.Phase == harnessv1.RunRunning })
	stop()
	run := getRun(t, "quick-finishes")
	if run.Status.Phase != harnessv1.RunSucceeded || run.Status.Verdict != harnessv1.VerdictPass {
		t.Errorf("a run that finished within the grace: %s %q %s: %s", run.Status.Phase, run.Status.Verdict, run.Status.Reason, run.Status.Message)
	}
	exec.mu.Lock()
	defer exec.mu.Unlock()
	if c := exec.causes["quick-finishes"]; c != nil {
		t.Errorf("the run that could finish was stopped: %v", c)
	}
}

// handedOver is an Executor that, once its attempt is stopped, says so on
// stopped with the cause and returns only when release is closed: a test
// changes the run in between.
type handedOver struct {
	stopped chan error
	release chan struct{}
}

func (h *handedOver) Execute(ctx context.Context, run *harnessv1.HarnessRun) *executor.Outcome {
	<-ctx.Done()
	h.stopped <- context.Cause(ctx)
	<-h.release
	var sc *executor.StopCause
	reason := harnessv1.ReasonStopped
	if errors.As(context.Cause(ctx), &sc) {
		reason = sc.Reason
	}
	return &executor.Outcome{
		Status: harnessv1.HarnessRunStatus{Phase: harnessv1.RunFailed, Verdict: harnessv1.VerdictError, Reason: reason,
			Message: context.Cause(ctx).Error() + "; the agent's process tree was killed", Evidence: &harnessv1.EvidenceStatus{Digest: "sha256:00"}},
		Evidence: &executor.Evidence{Data: map[string]string{"receipt.json": "{}"}},
	}
}

// TestDrainEndsARunCancelledWhileItIsHandedBack: the drain stops an
// attempt to hand it back, and the run is cancelled before the hand-back
// is written. The run is not handed back (to be scheduled again, or to end
// as an infrastructure failure): it ends as the cancel asks, Failed,
// reason Cancelled, Ready reason Stopped, no failure class, with its
// evidence.
func TestDrainEndsARunCancelledWhileItIsHandedBack(t *testing.T) {
	exec := &handedOver{stopped: make(chan error, 1), release: make(chan struct{})}
	const node = "node-drain-cancelled"
	stop := startAgent(t, node, exec, func(o *nodeagent.Options) { o.HandBackAfter = 0 })
	boundRun(t, "cancelled-in-hand-back", node, harnessv1.RunScheduled)
	waitFor(t, "the run to start", func() bool { return getRun(t, "cancelled-in-hand-back").Status.Phase == harnessv1.RunRunning })

	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	var sc *executor.StopCause
	if cause := <-exec.stopped; !errors.As(cause, &sc) || sc.Reason != harnessv1.ReasonHandedBack {
		t.Errorf("the attempt was stopped by %v, want the drain's hand-back", cause)
	}
	run := getRun(t, "cancelled-in-hand-back")
	run.Spec.Cancel = true
	if err := k8s.Update(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	close(exec.release)
	<-stopped

	run = getRun(t, "cancelled-in-hand-back")
	st := run.Status
	ready := meta.FindStatusCondition(st.Conditions, harnessv1.ConditionReady)
	if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonCancelled || st.FailureClass != "" ||
		ready == nil || ready.Reason != harnessv1.ReasonStopped || !strings.Contains(st.Message, "spec.cancel stopped the run") {
		t.Errorf("a run cancelled while it was handed back: %s/%s class %q Ready %+v: %s; want Failed/Cancelled, no class, Ready Stopped",
			st.Phase, st.Reason, st.FailureClass, ready, st.Message)
	}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: nodeagent.EvidenceName(run)}, cm); err != nil {
		t.Errorf("the cancelled attempt's evidence: %v", err)
	}
}

// TestDrainStopsARunCancelledWhileItDrains: a run cancelled while its
// node-agent drains is stopped within about a second (the claim reconciler
// has stopped; the drain reads the runs itself), long before the hand-back
// (30s), and ends Failed/Cancelled; the drain then ends at once.
func TestDrainStopsARunCancelledWhileItDrains(t *testing.T) {
	exec := &draining{causes: map[string]error{}, calls: map[string]int{}}
	const node = "node-drain-cancel"
	stop := startAgent(t, node, exec, func(o *nodeagent.Options) { o.HandBackAfter = 30 * time.Second })
	boundRun(t, "cancelled-while-draining", node, harnessv1.RunScheduled)
	waitFor(t, "the run to start", func() bool { return getRun(t, "cancelled-while-draining").Status.Phase == harnessv1.RunRunning })

	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	waitFor(t, "the HarnessNode to say Draining", func() bool {
		hn := &harnessv1.HarnessNode{}
		if err := k8s.Get(context.Background(), types.NamespacedName{Name: node}, hn); err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(hn.Status.Conditions, harnessv1.ConditionNodeReady)
		return c != nil && c.Reason == harnessv1.ReasonDraining
	})
	run := getRun(t, "cancelled-while-draining")
	run.Spec.Cancel = true
	if err := k8s.Update(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	cancelledAt := time.Now()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the drain went on 10s after the cancel of its only attempt")
	}
	t.Logf("the drain ended %v after the cancel", time.Since(cancelledAt).Round(10*time.Millisecond))
	exec.mu.Lock()
	cause := exec.causes["cancelled-while-draining"]
	exec.mu.Unlock()
	var sc *executor.StopCause
	if !errors.As(cause, &sc) || sc.Reason != harnessv1.ReasonCancelled {
		t.Errorf("the attempt was stopped by %v, want the cancel", cause)
	}
}

// A node-agent whose account may not list the runs bound to its node (a
// ClusterRole without list and watch) stops at start, within its cache
// sync timeout, saying which watch it may not make, rather than waiting for
// ever with nothing claimed.
func TestStartSaysWhatItMayNotWatch(t *testing.T) {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "node-agent-without-rbac"}
	const node = "no-rbac-node"
	api, err := nodeagent.NewAPI(cfg, node)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := nodeagent.New(api, nodeagent.Options{NodeName: node, LeaseNamespace: leaseNS, Slots: 1,
		Executor: &scripted{}, CacheSyncTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = agent.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "HarnessRuns bound to this node (the node-agent needs list and watch on them)") {
		t.Fatalf("Start without RBAC: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Start waited past its cache sync timeout")
	}
	hn := &harnessv1.HarnessNode{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: node}, hn); err == nil {
		t.Errorf("a node-agent that cannot watch its runs registered its node: %+v", hn.Status)
	}
}
