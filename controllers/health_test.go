package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
)

// health is what the tools that judge a GitOps sync see of one object, read
// from the API server as they read it: kstatus (Flux's health checks and
// `kubectl wait`-style tooling) and the shipped Argo CD health.lua.
type health struct {
	kstatus status.Status
	argo    string
	message string
}

func (h health) String() string {
	return fmt.Sprintf("kstatus %s, argo %s (%s)", h.kstatus, h.argo, h.message)
}

// judge reads kind/ns/name from the API server as unstructured JSON (what
// kstatus and Argo CD get) and computes both healths.
func judge(t testing.TB, kind, ns, name string) health {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(harnessv1.GroupVersion.WithKind(kind))
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(u)
	if err != nil {
		t.Fatalf("kstatus of %s %s: %v", kind, name, err)
	}
	st, msg := argoHealth(t, kind, u.Object)
	return health{kstatus: res.Status, argo: st, message: msg}
}

// argoHealth runs config/health/argocd/harnessfacts.io/KIND/health.lua as
// Argo CD does: the object as the global obj, a table {status, message}
// returned.
func argoHealth(t testing.TB, kind string, obj map[string]any) (string, string) {
	t.Helper()
	script, err := os.ReadFile(filepath.Join("..", "config", "health", "argocd", "harnessfacts.io", kind, "health.lua"))
	if err != nil {
		t.Fatal(err)
	}
	L := lua.NewState(lua.Options{SkipOpenLibs: false})
	defer L.Close()
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(string(script)); err != nil {
		t.Fatalf("health.lua of %s: %v", kind, err)
	}
	ret, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("health.lua of %s returned %s, want a table", kind, L.Get(-1).Type())
	}
	return lua.LVAsString(ret.RawGetString("status")), lua.LVAsString(ret.RawGetString("message"))
}

// toLua converts decoded JSON to Lua values as Argo CD does: objects and
// arrays to tables (arrays 1-based), numbers to numbers.
func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case map[string]any:
		tb := L.NewTable()
		for k, x := range v {
			tb.RawSetString(k, toLua(L, x))
		}
		return tb
	case []any:
		tb := L.NewTable()
		for _, x := range v {
			tb.Append(toLua(L, x))
		}
		return tb
	default:
		panic(fmt.Sprintf("unexpected JSON value %T", v))
	}
}

func waitHealth(t testing.TB, kind, ns, name string, want func(health) bool, what string) health {
	t.Helper()
	var h health
	eventually(t, time.Minute, func() error {
		h = judge(t, kind, ns, name)
		if !want(h) {
			return fmt.Errorf("%s %s is not %s: %s", kind, name, what, h)
		}
		return nil
	})
	return h
}

// TestUnreconciledIsInProgress: a suite and a run that no controller has
// looked at yet (none runs in this namespace) are InProgress for kstatus,
// so a Flux health check right after the apply does not pass them, and
// Progressing for Argo CD. The API server shows their status with
// observedGeneration 0 (the CRDs' default) until the first status write.
func TestUnreconciledIsInProgress(t *testing.T) {
	ns := newNamespace(t)
	create(t, makeSuite(ns, "unseen", []string{"good"}, 1, 1), hftesting.MakeHarnessRun("unseen", ns).Obj())
	for _, kind := range []string{"HarnessSuite", "HarnessRun"} {
		if h := judge(t, kind, ns, "unseen"); h.kstatus != status.InProgressStatus || h.argo != "Progressing" {
			t.Errorf("a %s no controller has seen: %s, want kstatus InProgress and Argo CD Progressing", kind, h)
		}
	}
}

// TestSuiteHealthStalledOnMissingFixture: a suite whose fixture is missing is
// Failed for kstatus (Stalled) and Degraded for Argo CD, not healthy; once
// the fixture exists, the round runs and ends Current and Healthy.
func TestSuiteHealthStalledOnMissingFixture(t *testing.T) {
	ns := newNamespace(t)
	startNode(t, ns, fakenode.Options{Name: "health-node-" + ns, Slots: 4, Adapters: codexOnly, RunFor: 10 * time.Millisecond})
	startSuiteController(t, ns)
	suite := makeSuite(ns, "stalled", []string{"good"}, 2, 1)
	suite.Spec.Fixtures = harnessv1.SuiteFixtures{Names: []string{"fixture-later"}}
	create(t, suite)

	h := waitHealth(t, "HarnessSuite", ns, "stalled", func(h health) bool { return h.kstatus == status.FailedStatus }, "Failed")
	if h.argo != "Degraded" || !strings.Contains(h.message, "fixture-later") {
		t.Errorf("a suite with a missing fixture: %s, want Argo CD Degraded naming fixture-later", h)
	}
	s := getSuite(t, ns, "stalled")
	if c := meta.FindStatusCondition(s.Status.Conditions, harnessv1.SuiteConditionStalled); c == nil || c.Reason != harnessv1.SuiteReasonFixturesNotFound {
		t.Errorf("Stalled condition %+v, want True with reason FixturesNotFound", c)
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, harnessv1.SuiteConditionReconciling); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Reconciling condition %+v, want False while stalled", c)
	}
	if s.Status.ObservedGeneration != s.Generation {
		t.Errorf("observedGeneration %d, generation %d", s.Status.ObservedGeneration, s.Generation)
	}

	create(t, fixtureCM(ns, "fixture-later", "now"))
	h = waitHealth(t, "HarnessSuite", ns, "stalled", func(h health) bool { return h.kstatus == status.CurrentStatus }, "Current")
	if h.argo != "Healthy" {
		t.Errorf("a complete suite: %s, want Argo CD Healthy", h)
	}
	s = getSuite(t, ns, "stalled")
	if c := meta.FindStatusCondition(s.Status.Conditions, harnessv1.SuiteConditionStalled); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Stalled condition %+v, want False once the fixture exists", c)
	}
}

// TestSuiteHealthStalledOnRefusedRuns: an admission policy (a real
// ValidatingAdmissionPolicy) that refuses the suite's runs stalls it: kstatus
// Failed, Argo CD Degraded, the message quoting the refusal.
func TestSuiteHealthStalledOnRefusedRuns(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-runs-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{harnessv1.GroupVersion.Group},
						APIVersions: []string{"*"}, Resources: []string{"harnessruns"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "runs are closed in this namespace"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "no-runs-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}},
		},
	}
	create(t, policy, binding)
	t.Cleanup(func() { _ = k8s.Delete(ctx, binding); _ = k8s.Delete(ctx, policy) })
	// The policy takes effect once the API server has loaded it: wait
	// until a plain run is refused.
	eventually(t, 30*time.Second, func() error {
		err := k8s.Create(ctx, hftesting.MakeHarnessRun("probe", ns).Obj())
		if err == nil {
			_ = k8s.Delete(ctx, hftesting.MakeHarnessRun("probe", ns).Obj())
			return fmt.Errorf("the policy does not refuse runs yet")
		}
		return nil
	})

	startSuiteController(t, ns)
	create(t, fixtureCM(ns, "fixture-a", "do a"), makeSuite(ns, "refused", []string{"good"}, 1, 1))
	h := waitHealth(t, "HarnessSuite", ns, "refused", func(h health) bool { return h.kstatus == status.FailedStatus }, "Failed")
	if h.argo != "Degraded" || !strings.Contains(h.message, "runs are closed in this namespace") {
		t.Errorf("a suite whose runs are refused: %s, want Argo CD Degraded quoting the policy", h)
	}
	s := getSuite(t, ns, "refused")
	if c := meta.FindStatusCondition(s.Status.Conditions, harnessv1.SuiteConditionStalled); c == nil || c.Reason != harnessv1.SuiteReasonRunsRefused {
		t.Errorf("Stalled condition %+v, want True with reason RunsRefused", c)
	}
}

// TestRunHealthAndFinished: a run carries Finished=False until it ends, then
// Finished=True with its verdict as reason; Argo CD's health follows (Healthy
// on Pass, Degraded on Fail), and the outcome is counted once.
func TestRunHealthAndFinished(t *testing.T) {
	ns := newNamespace(t)
	startNode(t, ns, fakenode.Options{Name: "finish-node-" + ns, Slots: 4, Adapters: codexOnly, RunFor: 300 * time.Millisecond,
		Outcome: func(r *harnessv1.HarnessRun) fakenode.Outcome {
			if r.Name == "fails" {
				return fakenode.AgentFailed
			}
			return fakenode.Pass
		}})
	c := startController(t, ns, controllers.Options{}, nil)
	create(t, hftesting.MakeHarnessRun("passes", ns).Obj(), hftesting.MakeHarnessRun("fails", ns).Obj())

	for name, want := range map[string]struct {
		reason, argo string
		kstatus      status.Status
	}{"passes": {"Pass", "Healthy", status.CurrentStatus}, "fails": {"Fail", "Degraded", status.FailedStatus}} {
		run := waitRun(t, ns, name, time.Minute, "Finished", func(r *harnessv1.HarnessRun) bool {
			return meta.IsStatusConditionTrue(r.Status.Conditions, harnessv1.ConditionFinished)
		})
		f := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionFinished)
		if f.Reason != want.reason || !run.Status.Phase.Terminal() {
			t.Errorf("run %s: Finished reason %q at phase %s, want %s at a terminal phase", name, f.Reason, run.Status.Phase, want.reason)
		}
		if h := judge(t, "HarnessRun", ns, name); h.argo != want.argo || h.kstatus != want.kstatus {
			t.Errorf("run %s: %s, want kstatus %s and Argo CD %s", name, h, want.kstatus, want.argo)
		}
	}
	if got := metricValue(t, c.registry, "harnessfacts_runs_finished_total", map[string]string{"verdict": "Pass", "adapter": "codex", "failure_class": "None"}); got != 1 {
		t.Errorf("runs finished with Pass: %v, want 1", got)
	}
	if got := metricValue(t, c.registry, "harnessfacts_runs_finished_total", map[string]string{"verdict": "Fail", "adapter": "codex", "failure_class": "Agent"}); got != 1 {
		t.Errorf("runs finished with Fail: %v, want 1", got)
	}
	if got := metricValue(t, c.registry, "harnessfacts_run_duration_seconds", map[string]string{"adapter": "codex", "verdict": "Pass"}); got != 1 {
		t.Errorf("run durations observed for Pass: %v, want 1", got)
	}
	if got := metricValue(t, c.registry, "harnessfacts_run_queue_wait_seconds", map[string]string{"adapter": "codex"}); got != 2 {
		t.Errorf("queue waits observed: %v, want 2", got)
	}
}

// TestRunFinishedFalseWhileRunning: before its end a run says Finished=False,
// so `kubectl wait --for=condition=Finished=False` and dashboards see it.
func TestRunFinishedFalseWhileRunning(t *testing.T) {
	ns := newNamespace(t)
	startNode(t, ns, fakenode.Options{Name: "slow-node-" + ns, Slots: 1, Adapters: codexOnly, RunFor: -1})
	startController(t, ns, controllers.Options{}, nil)
	create(t, hftesting.MakeHarnessRun("slow", ns).Obj())
	run := waitRun(t, ns, "slow", time.Minute, "Running", phaseIs(harnessv1.RunRunning))
	f := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionFinished)
	if f == nil || f.Status != metav1.ConditionFalse || f.Reason != harnessv1.ReasonNotFinished {
		t.Errorf("Finished condition of a running run: %+v, want False with reason NotFinished", f)
	}
	if h := judge(t, "HarnessRun", ns, "slow"); h.argo != "Progressing" || h.kstatus != status.InProgressStatus {
		t.Errorf("a running run: %s, want kstatus InProgress and Argo CD Progressing", h)
	}
}
