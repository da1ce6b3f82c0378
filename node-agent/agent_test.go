package nodeagent_test

import (
	"context"
	"errors"
	"fmt"
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
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
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
		if err := goleak.Find(before); err != nil {
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
func startAgent(t *testing.T, node string, exec nodeagent.Executor) context.CancelFunc {
	t.Helper()
	cacheOpts, clientOpts := nodeagent.ManagerOptions(node)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: env.Scheme, Cache: cacheOpts, Client: clientOpts,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		// Each test runs its own node-agent in this one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodeagent.New(mgr, nodeagent.Options{
		NodeName: node, LeaseNamespace: leaseNS, LeaseDuration: 4 * time.Second, Slots: 2,
		Adapters:     []harnessv1.AdapterInfo{{Name: harnessv1.AdapterExec, Version: "builtin"}},
		SandboxModes: []harnessv1.SandboxModeInfo{{Mode: "bwrap", Available: true}},
		Executor:     exec,
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
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
