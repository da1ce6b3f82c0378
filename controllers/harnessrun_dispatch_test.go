package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
)

const wait = 20 * time.Second

func TestNoNodeThenNodeAppears(t *testing.T) {
	ns := newNamespace(t)
	c := startController(t, ns, controllers.Options{}, nil)
	create(t, hftesting.MakeHarnessRun("solo", ns).Adapter(harnessv1.AdapterGemini).Obj())

	run := waitRun(t, ns, "solo", wait, "Pending", phaseIs(harnessv1.RunPending))
	cond := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionScheduled)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != harnessv1.ReasonUnschedulable ||
		!strings.Contains(cond.Message, "no HarnessNode is registered") {
		t.Fatalf("Scheduled condition of a run with no node = %+v, want False/Unschedulable saying no HarnessNode is registered", cond)
	}
	if len(run.Finalizers) != 0 {
		t.Errorf("finalizers of a run never bound = %v, want none", run.Finalizers)
	}

	// A node appearing later is noticed through the HarnessNode watch.
	startNode(t, ns, fakenode.Options{Name: "late-node", Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterGemini: "0.9.0"}, Slots: 1})
	run = waitRun(t, ns, "solo", wait, "Succeeded without finalizer", func(r *harnessv1.HarnessRun) bool {
		return r.Status.Phase == harnessv1.RunSucceeded && len(r.Finalizers) == 0
	})
	if run.Status.NodeName != "late-node" || run.Status.Attempt != 1 || run.Status.Verdict != harnessv1.VerdictPass {
		t.Errorf("finished run: node %q attempt %d verdict %q, want late-node, 1, Pass", run.Status.NodeName, run.Status.Attempt, run.Status.Verdict)
	}
	cond = meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionScheduled)
	if cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "late-node") {
		t.Errorf("Scheduled condition = %+v, want True naming late-node", cond)
	}
	// One Event per phase change: the controller's (Pending, Scheduled) and
	// the node-agent's (Running, Succeeded).
	eventually(t, wait, func() error {
		return wantReasons(runEvents(t, ns, "solo"), harnessv1.ReasonUnschedulable, "Scheduled", "Running", "Succeeded")
	})
	if got := metricValue(t, c.registry, "harnessfacts_scheduling_latency_seconds", nil); got != 1 {
		t.Errorf("scheduling latency observations = %v, want 1", got)
	}
	if got := metricValue(t, c.registry, "harnessfacts_harnessruns", map[string]string{"phase": "Succeeded"}); got != 1 {
		t.Errorf("harnessfacts_harnessruns{phase=Succeeded} = %v, want 1", got)
	}
}

// A run whose fixture ConfigMap does not exist yet (kubectl apply -f of a
// folder may create the run first) waits Pending, saying so, without
// holding a slot; the ConfigMap made within FixtureGrace, it is bound.
func TestRunWaitsForItsFixtureConfigMap(t *testing.T) {
	ns := newNamespace(t)
	c := startController(t, ns, controllers.Options{FixtureGrace: time.Minute}, nil)
	startNode(t, ns, fakenode.Options{Name: "fixture-node", Slots: 1,
		Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterCodex: "1.0"}})
	late := hftesting.MakeHarnessRun("late", ns).Adapter(harnessv1.AdapterCodex).Obj()
	late.Spec.Fixture = harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "fixture-late"}}
	create(t, late)

	run := waitRun(t, ns, "late", wait, "Pending", phaseIs(harnessv1.RunPending))
	cond := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionScheduled)
	if run.Status.NodeName != "" || cond == nil || cond.Status != metav1.ConditionFalse ||
		!strings.Contains(cond.Message, "fixture ConfigMap fixture-late (spec.fixture.configMapRef.name) does not exist") {
		t.Fatalf("run without its fixture: node %q, Scheduled condition %+v; want unbound, False naming the missing ConfigMap", run.Status.NodeName, cond)
	}
	eventually(t, wait, func() error {
		if got := metricValue(t, c.registry, "harnessfacts_pending_runs", map[string]string{"reason": controllers.PendingFixture}); got != 1 {
			return fmt.Errorf("harnessfacts_pending_runs{reason=%s} = %v, want 1", controllers.PendingFixture, got)
		}
		return nil
	})
	// The node's one slot stayed free: a run with its fixture inline takes it.
	create(t, hftesting.MakeHarnessRun("inline", ns).Adapter(harnessv1.AdapterCodex).Obj())
	waitRun(t, ns, "inline", wait, "Succeeded", phaseIs(harnessv1.RunSucceeded))

	create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fixture-late", Namespace: ns}, Data: map[string]string{"fixture.yaml": "prompt: p\n"}})
	run = waitRun(t, ns, "late", wait, "Succeeded", phaseIs(harnessv1.RunSucceeded))
	if run.Status.NodeName != "fixture-node" {
		t.Errorf("bound to %q, want fixture-node", run.Status.NodeName)
	}
}

// A fixture ConfigMap that does not appear within FixtureGrace ends the
// run BadFixture, from the controller, naming it: every run ends, and a
// name that is wrong stays wrong.
func TestRunWhoseFixtureNeverAppearsEnds(t *testing.T) {
	ns := newNamespace(t)
	startController(t, ns, controllers.Options{FixtureGrace: 2 * time.Second}, nil)
	startNode(t, ns, fakenode.Options{Name: "nofixture-node", Slots: 1,
		Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterCodex: "1.0"}})
	typo := hftesting.MakeHarnessRun("typo", ns).Adapter(harnessv1.AdapterCodex).Obj()
	typo.Spec.Fixture = harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "fixture-hell0"}}
	create(t, typo)
	run := waitRun(t, ns, "typo", wait, "Failed", phaseIs(harnessv1.RunFailed))
	if st := run.Status; st.Reason != harnessv1.ReasonBadFixture || st.FailureClass != harnessv1.FailureInfrastructure || st.NodeName != "" ||
		!strings.Contains(st.Message, "fixture ConfigMap fixture-hell0 (spec.fixture.configMapRef.name) does not exist in namespace "+ns+", and it did not appear within 2s") {
		t.Errorf("status %s/%s/%s on node %q: %q; want Failed BadFixture, never bound, naming the ConfigMap", st.Phase, st.FailureClass, st.Reason, st.NodeName, st.Message)
	}
}

// forbiddenReader answers every read Forbidden, as the API server does a
// controller whose role does not reach the namespace's ConfigMaps.
type forbiddenReader struct{ client.Reader }

func (forbiddenReader) Get(_ context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, key.Name, errors.New("no role reaches it"))
}

// A controller that may not read the namespace's ConfigMaps binds the run
// anyway (and says so in its log): the node-agent's read of the fixture
// ends it with its reason; it does not wait on an error for ever.
func TestFixtureLookThatIsForbiddenBinds(t *testing.T) {
	ns := newNamespace(t)
	startController(t, ns, controllers.Options{FixtureReader: forbiddenReader{}}, nil)
	startNode(t, ns, fakenode.Options{Name: "forbidden-node", Slots: 1,
		Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterCodex: "1.0"}})
	r := hftesting.MakeHarnessRun("unlooked", ns).Adapter(harnessv1.AdapterCodex).Obj()
	r.Spec.Fixture = harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "fixture-x"}}
	create(t, r)
	if run := waitRun(t, ns, "unlooked", wait, "Succeeded", phaseIs(harnessv1.RunSucceeded)); run.Status.NodeName != "forbidden-node" {
		t.Errorf("ran on %q, want forbidden-node", run.Status.NodeName)
	}
}

// A new run that only waits for a free slot is quiet for a second (no
// phase in its status, no Event: the next free slot may end the wait before
// anyone looks), then says Pending, naming the full node, with one
// Unschedulable Event. A run that fits no node is told at once.
func TestWaitingForASlotIsQuietAtFirst(t *testing.T) {
	ns := newNamespace(t)
	// The controller's clock stands until stepped; its requeues wait
	// real time, so it looks again every second meanwhile. It is an hour
	// behind the API server's: the second is the controller's own.
	clk := clocktesting.NewFakeClock(time.Now().Add(-time.Hour))
	startClockedController(t, ns, controllers.Options{}, nil, false, clk)
	startNode(t, ns, fakenode.Options{Name: "quiet-node", Slots: 1, NoClaim: true,
		Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterCodex: "1.0"}})
	mk := hftesting.MakeHarnessRun
	create(t, mk("first", ns).Obj())
	waitRun(t, ns, "first", wait, "Scheduled", phaseIs(harnessv1.RunScheduled))

	create(t, mk("second", ns).Obj(), mk("nowhere", ns).NodeSelector(map[string]string{"pool": "z"}).Obj())
	pendingSaying := func(msg string) func(*harnessv1.HarnessRun) bool {
		return func(r *harnessv1.HarnessRun) bool {
			c := meta.FindStatusCondition(r.Status.Conditions, harnessv1.ConditionScheduled)
			return r.Status.Phase == harnessv1.RunPending && r.Status.Reason == harnessv1.ReasonUnschedulable &&
				c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, msg)
		}
	}
	waitRun(t, ns, "nowhere", wait, "Pending at once", pendingSaying("nodeSelector matches no node"))
	time.Sleep(2500 * time.Millisecond) // two more looks at "second"
	if r := getRun(t, ns, "second"); r.Status.Phase != "" || len(r.Status.Conditions) != 0 {
		t.Fatalf("a run waiting for a slot for less than a second has status %+v, want none yet", r.Status)
	}
	if evs := runEvents(t, ns, "second"); len(evs) != 0 {
		t.Fatalf("a run waiting for a slot for less than a second has Events %v, want none yet", eventReasons(evs))
	}

	clk.Step(2 * time.Second)
	waitRun(t, ns, "second", wait, "Pending once it waited a second", pendingSaying("the only matching node, quiet-node, is full (1 of 1 slots in use)"))
	eventually(t, wait, func() error {
		return wantReasons(runEvents(t, ns, "second"), harnessv1.ReasonUnschedulable)
	})
}

func TestSchedulingRules(t *testing.T) {
	ns := newNamespace(t)
	c := startController(t, ns, controllers.Options{}, nil)
	// The node-agents never claim, so bound runs keep their slots.
	startNode(t, ns, fakenode.Options{Name: "rules-a", Slots: 1, NoClaim: true, Labels: map[string]string{"pool": "a"},
		Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterCodex: "1.0"}})
	startNode(t, ns, fakenode.Options{Name: "rules-b", Slots: 2, NoClaim: true, Labels: map[string]string{"pool": "b"},
		Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterCodex: "2.0", harnessv1.AdapterGemini: "0.9"}})
	startNode(t, ns, fakenode.Options{Name: "rules-c", Slots: 4, NoClaim: true, NotReady: true,
		Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterAider: "0.80"}})

	mk := hftesting.MakeHarnessRun
	steps := []struct {
		run      *harnessv1.HarnessRun
		wantNode string // bound here, or
		wantMsg  string // Pending with this in its message
	}{
		{run: mk("gemini", ns).Adapter(harnessv1.AdapterGemini).Obj(), wantNode: "rules-b"},
		{run: mk("codex-v1", ns).Version("1.0").Obj(), wantNode: "rules-a"},
		{run: mk("aider", ns).Adapter(harnessv1.AdapterAider).Obj(), wantMsg: "no Ready node has adapter aider"},
		{run: mk("opencode", ns).Adapter(harnessv1.AdapterOpenCode).Obj(), wantMsg: "no Ready node has adapter opencode"},
		{run: mk("codex-v3", ns).Version("3.0").Obj(), wantMsg: "no Ready node has adapter codex at version 3.0 (Ready nodes have 1.0, 2.0)"},
		{run: mk("pool-z", ns).NodeSelector(map[string]string{"pool": "z"}).Obj(), wantMsg: "nodeSelector matches no node"},
		{run: mk("pool-a", ns).NodeSelector(map[string]string{"pool": "a"}).Obj(), wantMsg: "the only matching node, rules-a, is full"},
		{run: mk("codex-any", ns).Obj(), wantNode: "rules-b"},
		{run: mk("codex-late", ns).Obj(), wantMsg: "all 2 matching nodes are full (3 of 3 slots in use)"},
	}
	for _, s := range steps {
		create(t, s.run)
		if s.wantNode != "" {
			run := waitRun(t, ns, s.run.Name, wait, "Scheduled", phaseIs(harnessv1.RunScheduled))
			if run.Status.NodeName != s.wantNode {
				t.Errorf("run %s bound to %q, want %q", s.run.Name, run.Status.NodeName, s.wantNode)
			}
			if !slices.Contains(run.Finalizers, harnessv1.RunFinalizer) {
				t.Errorf("bound run %s has finalizers %v, want %s", s.run.Name, run.Finalizers, harnessv1.RunFinalizer)
			}
			continue
		}
		waitRun(t, ns, s.run.Name, wait, "Pending saying "+s.wantMsg, func(r *harnessv1.HarnessRun) bool {
			c := meta.FindStatusCondition(r.Status.Conditions, harnessv1.ConditionScheduled)
			return r.Status.Phase == harnessv1.RunPending && c != nil && c.Status == metav1.ConditionFalse &&
				strings.Contains(c.Message, s.wantMsg) && strings.Contains(r.Status.Message, s.wantMsg)
		})
	}
	for reason, want := range map[string]float64{controllers.PendingNoAdapter: 2, controllers.PendingNoVersion: 1,
		controllers.PendingNodeSelector: 1, controllers.PendingFull: 2} {
		if got := metricValue(t, c.registry, "harnessfacts_pending_runs", map[string]string{"reason": reason}); got != want {
			t.Errorf("harnessfacts_pending_runs{reason=%s} = %v, want %v", reason, got, want)
		}
	}

	// Freeing rules-a's slot lets exactly one of the two waiting codex runs
	// that fit it in, without polling: the deletion is what wakes them.
	if err := k8s.Delete(context.Background(), s(steps[1].run)); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, func() error {
		var onA, full []string
		for _, name := range []string{"pool-a", "codex-late"} {
			run := getRun(t, ns, name)
			switch {
			case run.Status.Phase == harnessv1.RunScheduled && run.Status.NodeName == "rules-a":
				onA = append(onA, name)
			case run.Status.Phase == harnessv1.RunPending && strings.Contains(run.Status.Message, "full"):
				full = append(full, name)
			}
		}
		if len(onA) != 1 || len(full) != 1 {
			return fmt.Errorf("after freeing rules-a: bound there %v, still waiting %v; want one of each", onA, full)
		}
		return nil
	})
	assertNoOverbooking(t, ns, map[string]int32{"rules-a": 1, "rules-b": 2, "rules-c": 4})
}

func s(run *harnessv1.HarnessRun) *harnessv1.HarnessRun { return run }

// assertNoOverbooking checks, over what the API server holds, that no node
// has more non-terminal runs than slots.
func assertNoOverbooking(t testing.TB, ns string, slots map[string]int32) map[string]int32 {
	t.Helper()
	runs := &harnessv1.HarnessRunList{}
	if err := k8s.List(context.Background(), runs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	load := map[string]int32{}
	for _, r := range runs.Items {
		if r.Status.NodeName != "" && !r.Status.Phase.Terminal() {
			load[r.Status.NodeName]++
		}
	}
	for node, n := range load {
		if n > slots[node] {
			t.Errorf("node %s holds %d runs, more than its %d slots", node, n, slots[node])
		}
	}
	return load
}

func TestLeastLoadedFirst(t *testing.T) {
	ns := newNamespace(t)
	startController(t, ns, controllers.Options{}, nil)
	slots := map[string]int32{}
	for _, name := range []string{"ll-1", "ll-2", "ll-3"} {
		startNode(t, ns, fakenode.Options{Name: name, Slots: 3, NoClaim: true, Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterCodex: "1"}})
		slots[name] = 3
	}
	countBound := func(want int) map[string]int32 {
		var load map[string]int32
		eventually(t, wait, func() error {
			load = assertNoOverbooking(t, ns, slots)
			n := int32(0)
			for _, v := range load {
				n += v
			}
			if n != int32(want) {
				return fmt.Errorf("%d runs bound, want %d", n, want)
			}
			return nil
		})
		return load
	}
	for i := range 6 {
		create(t, hftesting.MakeHarnessRun(fmt.Sprintf("spread-%d", i), ns).Obj())
	}
	if d := cmp.Diff(map[string]int32{"ll-1": 2, "ll-2": 2, "ll-3": 2}, countBound(6)); d != "" {
		t.Errorf("6 runs over 3 empty nodes of 3 slots (-want +got):\n%s", d)
	}
	for i := 6; i < 10; i++ {
		create(t, hftesting.MakeHarnessRun(fmt.Sprintf("spread-%d", i), ns).Obj())
	}
	if d := cmp.Diff(map[string]int32{"ll-1": 3, "ll-2": 3, "ll-3": 3}, countBound(9)); d != "" {
		t.Errorf("10 runs over 3 nodes of 3 slots (-want +got):\n%s", d)
	}
}

// spec.nodeSelector is matched against the Node's labels, which the
// controller reads, not against the HarnessNode's status.labels, which its
// node-agent writes: a compromised node-agent labelled itself with another
// tenant's pool, was bound that tenant's runs, and the run source would
// have served it their Secrets. A HarnessNode with no Node of its name (a
// machine outside a cluster) is matched on what it reports.
func TestNodeSelectorIsMatchedAgainstTheNode(t *testing.T) {
	ns := newNamespace(t)
	startController(t, ns, controllers.Options{}, nil)
	for name, labels := range map[string]map[string]string{
		"forger-node": {"kubernetes.io/hostname": "forger-node"},
		"secure-node": {"kubernetes.io/hostname": "secure-node", "pool": "secure"},
	} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		create(t, node)
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), node) })
	}
	codex := map[harnessv1.Adapter]string{harnessv1.AdapterCodex: "1.0"}
	// The forger reports the secure pool (and another node's name); the
	// secure node reports nothing of its own: its Node says it.
	startNode(t, ns, fakenode.Options{Name: "forger-node", Slots: 8, NoClaim: true, Adapters: codex,
		Labels: map[string]string{"pool": "secure", "kubernetes.io/hostname": "secure-node"}})
	startNode(t, ns, fakenode.Options{Name: "secure-node", Slots: 2, NoClaim: true, Adapters: codex})
	startNode(t, ns, fakenode.Options{Name: "laptop-node", Slots: 1, NoClaim: true, Adapters: codex, Labels: map[string]string{"where": "laptop"}})
	mk := hftesting.MakeHarnessRun
	create(t, mk("pool-run", ns).Adapter(harnessv1.AdapterCodex).NodeSelector(map[string]string{"pool": "secure"}).Obj(),
		mk("host-run", ns).Adapter(harnessv1.AdapterCodex).NodeSelector(map[string]string{"kubernetes.io/hostname": "secure-node"}).Obj(),
		mk("laptop-run", ns).Adapter(harnessv1.AdapterCodex).NodeSelector(map[string]string{"where": "laptop"}).Obj())
	if r := waitRun(t, ns, "pool-run", wait, "Scheduled", phaseIs(harnessv1.RunScheduled)); r.Status.NodeName != "secure-node" {
		t.Errorf("pool-run bound to %q, want secure-node (the forger reported the pool, its Node has none)", r.Status.NodeName)
	}
	if r := waitRun(t, ns, "laptop-run", wait, "Scheduled", phaseIs(harnessv1.RunScheduled)); r.Status.NodeName != "laptop-node" {
		t.Errorf("laptop-run bound to %q, want laptop-node (no Node: its reported labels)", r.Status.NodeName)
	}
	// The forger reports secure-node's name too, with eight free slots:
	// host-run goes to the node that is secure-node.
	if r := waitRun(t, ns, "host-run", wait, "Scheduled", phaseIs(harnessv1.RunScheduled)); r.Status.NodeName != "secure-node" {
		t.Errorf("host-run bound to %q, want secure-node (the forger reported its hostname)", r.Status.NodeName)
	}
	// The secure node is full now. An administrator labels another Node
	// into the pool: a run waiting for the pool is bound to it, without
	// its node-agent writing anything.
	create(t, mk("pool-run-2", ns).Adapter(harnessv1.AdapterCodex).NodeSelector(map[string]string{"pool": "secure"}).Obj())
	time.Sleep(time.Second)
	forger := &corev1.Node{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: "forger-node"}, forger); err != nil {
		t.Fatal(err)
	}
	forger.Labels["pool"] = "secure"
	if err := k8s.Update(context.Background(), forger); err != nil {
		t.Fatal(err)
	}
	if r := waitRun(t, ns, "pool-run-2", wait, "Scheduled", phaseIs(harnessv1.RunScheduled)); r.Status.NodeName != "forger-node" {
		t.Errorf("pool-run-2 bound to %q, want forger-node, labelled into the pool", r.Status.NodeName)
	}
}
