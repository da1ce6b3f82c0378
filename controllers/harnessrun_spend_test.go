package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
)

// spendPolicy labels ns and makes a policy with spend that selects it.
func spendPolicy(t *testing.T, ns string, spend harnessv1.PolicySpend) *harnessv1.HarnessPolicy {
	t.Helper()
	ctx := context.Background()
	label := map[string]string{"spend-test": ns}
	labelNamespace(t, ns, label)
	policy := &harnessv1.HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "spend-" + ns}, Spec: harnessv1.HarnessPolicySpec{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: label}, Spend: &spend,
	}}
	create(t, policy)
	t.Cleanup(func() { _ = k8s.Delete(ctx, policy) })
	return policy
}

// passWith is a passing outcome whose status.usage has tokens, as the
// node-agent writes what its model gateway counted.
func passWith(input, output, cacheRead int64) fakenode.Outcome {
	o := fakenode.Pass
	o.Usage = &harnessv1.UsageStatus{Source: harnessv1.UsageFromGateway, Requests: 1, InputTokens: input, OutputTokens: output, CacheReadTokens: cacheRead}
	return o
}

// waitingOnSpend: the run waits in Pending, its Scheduled condition naming
// the policy's rule.
func waitingOnSpend(want string) func(*harnessv1.HarnessRun) bool {
	return func(r *harnessv1.HarnessRun) bool {
		c := meta.FindStatusCondition(r.Status.Conditions, harnessv1.ConditionScheduled)
		return r.Status.Phase == harnessv1.RunPending && r.Status.NodeName == "" && c != nil && c.Status == metav1.ConditionFalse &&
			strings.Contains(c.Message, want) && strings.Contains(r.Status.Message, want)
	}
}

func spent(t *testing.T, policy, ns string) harnessv1.NamespaceSpend {
	t.Helper()
	p := &harnessv1.HarnessPolicy{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: policy}, p); err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Status.Spent {
		if s.Namespace == ns {
			return s
		}
	}
	return harnessv1.NamespaceSpend{}
}

// TestSpendStopsNewRunsOfANamespace: when a namespace's runs have used a
// policy's spend.namespaceTokens, its new runs wait in Pending with a
// message naming the policy and the rule, while its running run goes on to
// its end. The tokens are charged to the policy's status when each run
// ends, so deleting the ended runs gives nothing back; raising the budget
// lets the waiting run go.
func TestSpendStopsNewRunsOfANamespace(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	policy := spendPolicy(t, ns, harnessv1.PolicySpend{NamespaceTokens: ptr.To[int64](100)})
	startController(t, ns, controllers.Options{}, nil)
	node := startNode(t, ns, fakenode.Options{Name: "spend-" + ns, Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterGemini: "1"}, Slots: 10, RunFor: -1})
	run := func(name string) *harnessv1.HarnessRun {
		return hftesting.MakeHarnessRun(name, ns).Adapter(harnessv1.AdapterGemini).Obj()
	}

	create(t, run("a"), run("b"))
	waitRun(t, ns, "a", wait, "Running", phaseIs(harnessv1.RunRunning))
	waitRun(t, ns, "b", wait, "Running", phaseIs(harnessv1.RunRunning))
	// a ends having used 120 tokens (input, output and cache reads): the
	// budget is spent.
	if err := node.Finish(ctx, types.NamespacedName{Namespace: ns, Name: "a"}, passWith(70, 30, 20)); err != nil {
		t.Fatal(err)
	}
	waitRun(t, ns, "a", wait, "charged 120 tokens", func(r *harnessv1.HarnessRun) bool { return r.Status.ChargedTokens == 120 })
	if s := spent(t, policy.Name, ns); s.Tokens != 120 {
		t.Errorf("the policy's status.spent for %s: %+v, want 120 tokens", ns, s)
	}

	create(t, run("c"))
	rule := "HarnessPolicy " + policy.Name + " rule spend.namespaceTokens: namespace " + ns + " has used 120 of its 100 tokens"
	waitRun(t, ns, "c", wait, "waiting on the namespace's budget", waitingOnSpend(rule))
	// b, running when the budget was spent, is not stopped; it ends by
	// itself and is charged too.
	b := &harnessv1.HarnessRun{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "b"}, b); err != nil {
		t.Fatal(err)
	}
	if b.Status.Phase != harnessv1.RunRunning || meta.IsStatusConditionTrue(b.Status.Conditions, harnessv1.ConditionStopRequested) {
		t.Fatalf("the running run was disturbed by the spent budget: %s %s", b.Status.Phase, b.Status.Message)
	}
	if err := node.Finish(ctx, client.ObjectKeyFromObject(b), passWith(5, 5, 0)); err != nil {
		t.Fatal(err)
	}
	waitRun(t, ns, "b", wait, "Succeeded, charged", func(r *harnessv1.HarnessRun) bool {
		return r.Status.Phase == harnessv1.RunSucceeded && r.Status.ChargedTokens == 10
	})

	// Deleting the ended runs gives nothing back: the count is the policy's.
	for _, name := range []string{"a", "b"} {
		if err := k8s.Delete(ctx, &harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, wait, func() error {
		list := &harnessv1.HarnessRunList{}
		if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d runs left, want only c", len(list.Items))
		}
		return nil
	})
	create(t, run("d"))
	rule = "HarnessPolicy " + policy.Name + " rule spend.namespaceTokens: namespace " + ns + " has used 130 of its 100 tokens"
	waitRun(t, ns, "d", wait, "waiting on the namespace's budget after the deletions", waitingOnSpend(rule))
	if s := spent(t, policy.Name, ns); s.Tokens != 130 {
		t.Errorf("the policy's status.spent for %s: %+v, want 130 tokens", ns, s)
	}

	// The operator raises the budget: the waiting runs go.
	p := &harnessv1.HarnessPolicy{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: policy.Name}, p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Spend.NamespaceTokens = ptr.To[int64](1000)
	if err := k8s.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"c", "d"} {
		waitRun(t, ns, name, wait, "bound after the budget was raised", func(r *harnessv1.HarnessRun) bool { return r.Status.NodeName != "" })
	}
}

// TestSpendStopsASuiteRound: spend.suiteTokens bounds the tokens of one
// round of a suite (its runs carry the suite and round labels): once a
// round has used them, its further runs wait, while a new round of the
// same suite and a run of no suite still go (there is no namespace budget
// here).
func TestSpendStopsASuiteRound(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	policy := spendPolicy(t, ns, harnessv1.PolicySpend{SuiteTokens: ptr.To[int64](50)})
	startController(t, ns, controllers.Options{}, nil)
	node := startNode(t, ns, fakenode.Options{Name: "round-" + ns, Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterGemini: "1"}, Slots: 10, RunFor: -1})
	run := func(name, round string) *harnessv1.HarnessRun {
		w := hftesting.MakeHarnessRun(name, ns).Adapter(harnessv1.AdapterGemini)
		if round != "" {
			w = w.Label(harnessv1.LabelSuite, "bench").Label(harnessv1.LabelSuiteRound, round)
		}
		return w.Obj()
	}
	create(t, run("r1-a", "1"))
	waitRun(t, ns, "r1-a", wait, "Running", phaseIs(harnessv1.RunRunning))
	if err := node.Finish(ctx, types.NamespacedName{Namespace: ns, Name: "r1-a"}, passWith(40, 20, 0)); err != nil {
		t.Fatal(err)
	}
	waitRun(t, ns, "r1-a", wait, "charged", func(r *harnessv1.HarnessRun) bool { return r.Status.ChargedTokens == 60 })

	create(t, run("r1-b", "1"), run("r2-a", "2"), run("solo", ""))
	waitRun(t, ns, "r1-b", wait, "waiting on the round's budget",
		waitingOnSpend("HarnessPolicy "+policy.Name+" rule spend.suiteTokens: round 1 of suite bench has used 60 of its 50 tokens"))
	waitRun(t, ns, "r2-a", wait, "Running (a new round)", phaseIs(harnessv1.RunRunning))
	waitRun(t, ns, "solo", wait, "Running (no suite)", phaseIs(harnessv1.RunRunning))

	// The new round's tokens are counted apart from the first's.
	if err := node.Finish(ctx, types.NamespacedName{Namespace: ns, Name: "r2-a"}, passWith(10, 0, 0)); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, func() error {
		s := spent(t, policy.Name, ns)
		if s.Tokens != 70 || len(s.Suites) != 1 || s.Suites[0] != (harnessv1.SuiteSpend{Suite: "bench", Round: 2, Tokens: 10}) {
			return fmt.Errorf("status.spent %+v, want 70 tokens in the namespace and 10 in round 2 of bench", s)
		}
		return nil
	})
}

// TestSpendChargesARunDeletedBeforeItsEnd: a run author cannot escape the
// budget by deleting a running run before it is charged, even having
// stripped its finalizer: its tokens so far (status.usage as the node-agent
// wrote them) count while it runs, and are charged when it is deleted.
func TestSpendChargesARunDeletedBeforeItsEnd(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	policy := spendPolicy(t, ns, harnessv1.PolicySpend{NamespaceTokens: ptr.To[int64](100)})
	startController(t, ns, controllers.Options{}, nil)
	node := startNode(t, ns, fakenode.Options{Name: "del-" + ns, Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterGemini: "1"}, Slots: 10, RunFor: -1})
	create(t, hftesting.MakeHarnessRun("big", ns).Adapter(harnessv1.AdapterGemini).Obj())
	waitRun(t, ns, "big", wait, "Running", phaseIs(harnessv1.RunRunning))
	key := types.NamespacedName{Namespace: ns, Name: "big"}
	if err := node.SetUsage(ctx, key, harnessv1.UsageStatus{Source: harnessv1.UsageFromGateway, Requests: 3, InputTokens: 400, OutputTokens: 100}); err != nil {
		t.Fatal(err)
	}
	// While it runs, its tokens count already.
	create(t, hftesting.MakeHarnessRun("next", ns).Adapter(harnessv1.AdapterGemini).Obj())
	waitRun(t, ns, "next", wait, "waiting on the running run's tokens",
		waitingOnSpend("namespace "+ns+" has used 500 of its 100 tokens (0 charged by ended runs, 500 by runs present)"))

	// The author strips the finalizer and deletes the run.
	stripAndDelete(ctx, t, key)
	eventually(t, wait, func() error {
		if s := spent(t, policy.Name, ns); s.Tokens != 500 {
			return fmt.Errorf("status.spent %+v, want the deleted run's 500 tokens", s)
		}
		return nil
	})
	create(t, hftesting.MakeHarnessRun("after", ns).Adapter(harnessv1.AdapterGemini).Obj())
	waitRun(t, ns, "after", wait, "waiting after the deletion",
		waitingOnSpend("namespace "+ns+" has used 500 of its 100 tokens (500 charged by ended runs, 0 by runs present)"))
}

// TestSpendChargesARunOfASuiteBeyondTheSuitesKept: a namespace's entry in
// status.spent keeps at most 1000 suites. A run author labels their runs
// with suite names as they like, so they can fill that list (1000 runs of
// a token each, each with its own suite label). A run with a new suite
// label must still be charged to the namespace: before, the status write
// was refused (too many suites), the charge failed on every pass, and the
// author stripped the finalizer and deleted the run: its tokens were never
// charged, and the namespace's budget was stepped around.
func TestSpendChargesARunOfASuiteBeyondTheSuitesKept(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	policy := spendPolicy(t, ns, harnessv1.PolicySpend{NamespaceTokens: ptr.To[int64](2000)})
	// What 1000 earlier one-token runs, each labelled with a suite of its
	// own, leave in the policy's status.
	p := &harnessv1.HarnessPolicy{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: policy.Name}, p); err != nil {
		t.Fatal(err)
	}
	entry := harnessv1.NamespaceSpend{Namespace: ns, Tokens: 1000}
	for i := range 1000 {
		entry.Suites = append(entry.Suites, harnessv1.SuiteSpend{Suite: fmt.Sprintf("fill-%04d", i), Round: 1, Tokens: 1})
	}
	p.Status.Spent = []harnessv1.NamespaceSpend{entry}
	if err := k8s.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	startController(t, ns, controllers.Options{}, nil)
	node := startNode(t, ns, fakenode.Options{Name: "fill-" + ns, Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterGemini: "1"}, Slots: 10, RunFor: -1})

	create(t, hftesting.MakeHarnessRun("big", ns).Adapter(harnessv1.AdapterGemini).
		Label(harnessv1.LabelSuite, "one-more").Label(harnessv1.LabelSuiteRound, "1").Obj())
	waitRun(t, ns, "big", wait, "Running", phaseIs(harnessv1.RunRunning))
	key := types.NamespacedName{Namespace: ns, Name: "big"}
	if err := node.Finish(ctx, key, passWith(4000, 1000, 0)); err != nil {
		t.Fatal(err)
	}
	waitRun(t, ns, "big", wait, "ended", phaseIs(harnessv1.RunSucceeded))

	// The author strips the finalizer and deletes the run at once.
	stripAndDelete(ctx, t, key)
	eventually(t, wait, func() error {
		if s := spent(t, policy.Name, ns); s.Tokens != 6000 || len(s.Suites) > 1000 {
			return fmt.Errorf("status.spent has %d tokens and %d suites, want the 5000 tokens of the deleted run charged (6000) and at most 1000 suites", s.Tokens, len(s.Suites))
		}
		return nil
	})
	create(t, hftesting.MakeHarnessRun("after", ns).Adapter(harnessv1.AdapterGemini).Obj())
	waitRun(t, ns, "after", wait, "waiting on the namespace's budget",
		waitingOnSpend("namespace "+ns+" has used 6000 of its 2000 tokens (6000 charged by ended runs, 0 by runs present)"))
}

// stripAndDelete does what a run author may to a run the controller still
// holds: remove its finalizer, then delete it.
func stripAndDelete(ctx context.Context, t *testing.T, key types.NamespacedName) {
	t.Helper()
	run := &harnessv1.HarnessRun{}
	if err := k8s.Get(ctx, key, run); err != nil {
		t.Fatal(err)
	}
	base := run.DeepCopy()
	run.Finalizers = nil
	if err := k8s.Patch(ctx, run, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, run); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
