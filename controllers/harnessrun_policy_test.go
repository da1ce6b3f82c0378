package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
)

// fairShare labels ns and gives it a HarnessPolicy of fairShare
// maxRunsInFlight limit, removed when the test ends.
func fairShare(t *testing.T, ns string, limit int32) *harnessv1.HarnessPolicy {
	t.Helper()
	ctx := context.Background()
	label := map[string]string{"fairshare-test": ns}
	labelNamespace(t, ns, label)
	policy := &harnessv1.HarnessPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "fairshare-" + ns},
		Spec: harnessv1.HarnessPolicySpec{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: label},
			FairShare:         &harnessv1.PolicyFairShare{MaxRunsInFlight: ptr.To(limit)},
		},
	}
	create(t, policy)
	t.Cleanup(func() { _ = k8s.Delete(ctx, policy) })
	return policy
}

// labelNamespace sets ns's labels to labels (nil: none).
func labelNamespace(t testing.TB, ns string, labels map[string]string) {
	t.Helper()
	nsObj := &corev1.Namespace{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: ns}, nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Labels = labels
	if err := k8s.Update(context.Background(), nsObj); err != nil {
		t.Fatal(err)
	}
}

// waitsForShare: the run is Pending because its namespace has as many runs
// on nodes as its fair share allows.
func waitsForShare(r *harnessv1.HarnessRun) bool {
	c := meta.FindStatusCondition(r.Status.Conditions, harnessv1.ConditionScheduled)
	return r.Status.Phase == harnessv1.RunPending && c != nil && strings.Contains(c.Message, "fairShare.maxRunsInFlight")
}

// TestFairShareQueuesANamespace gives a namespace a HarnessPolicy with
// fairShare.maxRunsInFlight 2 and a node with room for ten: only two of its
// runs are on the node at a time, the others wait in Pending saying which
// policy holds them, and every run still finishes (a queue, not a refusal).
// Raising the limit lets the waiting runs go at once.
func TestFairShareQueuesANamespace(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	policy := fairShare(t, ns, 2)

	startController(t, ns, controllers.Options{}, nil)
	node := startNode(t, ns, fakenode.Options{Name: "fair-" + ns, Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterGemini: "1"}, Slots: 10, RunFor: -1})
	const runs = 6
	for i := range runs {
		create(t, hftesting.MakeHarnessRun(fmt.Sprintf("r%d", i), ns).Adapter(harnessv1.AdapterGemini).Obj())
	}

	// Two are bound, four wait with the policy's name.
	eventually(t, wait, func() error {
		list := &harnessv1.HarnessRunList{}
		if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		bound, held := 0, []string{}
		for _, r := range list.Items {
			switch {
			case r.Status.NodeName != "" && !r.Status.Phase.Terminal():
				bound++
			case r.Status.Phase == harnessv1.RunPending:
				c := meta.FindStatusCondition(r.Status.Conditions, harnessv1.ConditionScheduled)
				if c != nil && strings.Contains(c.Message, "as many as HarnessPolicy "+policy.Name+" allows (fairShare.maxRunsInFlight 2)") {
					held = append(held, r.Name)
				}
			}
		}
		if bound != 2 || len(held) != runs-2 {
			return fmt.Errorf("%d bound, %d waiting on the policy; want 2 and %d", bound, len(held), runs-2)
		}
		return nil
	})
	if got := node.MaxActive(); got > 2 {
		t.Fatalf("the node held %d runs of the namespace at once, the policy allows 2", got)
	}

	// Finishing one lets exactly one more go. A bound run may still be
	// Scheduled (the node has not claimed it yet); only a Running one can
	// finish.
	list := &harnessv1.HarnessRunList{}
	eventually(t, wait, func() error {
		if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, r := range list.Items {
			if r.Status.NodeName != "" && r.Status.Phase == harnessv1.RunRunning {
				return node.Finish(ctx, client.ObjectKeyFromObject(&r), fakenode.Pass)
			}
		}
		return fmt.Errorf("no run of %s is Running on the node yet", ns)
	})
	eventually(t, wait, func() error {
		if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		bound, done := 0, 0
		for _, r := range list.Items {
			if r.Status.Phase.Terminal() {
				done++
			} else if r.Status.NodeName != "" {
				bound++
			}
		}
		if done != 1 || bound != 2 {
			return fmt.Errorf("%d finished, %d bound; want 1 and 2", done, bound)
		}
		return nil
	})
	if got := node.MaxActive(); got > 2 {
		t.Fatalf("the node held %d runs of the namespace at once, the policy allows 2", got)
	}

	// A raised limit lets the rest go without any run finishing.
	base := policy.DeepCopy()
	policy.Spec.FairShare.MaxRunsInFlight = ptr.To[int32](10)
	if err := k8s.Patch(ctx, policy, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, func() error {
		if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, r := range list.Items {
			if r.Status.NodeName == "" {
				return fmt.Errorf("%s still waits: %s", r.Name, r.Status.Message)
			}
		}
		return nil
	})

}

// TestPolicyRecheckedBeforeBinding: admission refuses a run that breaks a
// HarnessPolicy, but a run admitted before the policy existed (this test
// control plane has no admission policy, which stands for that) is refused
// by the controller before it is bound, with the rule named; a run in a
// namespace the policy does not select is bound as usual.
func TestPolicyRecheckedBeforeBinding(t *testing.T) {
	ctx := context.Background()
	ns, other := newNamespace(t), newNamespace(t)
	label := map[string]string{"recheck-test": ns}
	labelNamespace(t, ns, label)
	policy := &harnessv1.HarnessPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "recheck-" + ns},
		Spec: harnessv1.HarnessPolicySpec{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: label},
			Isolation:         &harnessv1.PolicyIsolation{ForbidFallback: true},
		},
	}
	create(t, policy)
	t.Cleanup(func() { _ = k8s.Delete(ctx, policy) })
	fallback := func(name, namespace string) *harnessv1.HarnessRun {
		r := hftesting.MakeHarnessRun(name, namespace).Adapter(harnessv1.AdapterGemini).Obj()
		r.Spec.Isolation.Policy = harnessv1.IsolationAllowFallback
		return r
	}
	create(t, fallback("unsandboxed", ns), fallback("unsandboxed", other))

	// A test's controller watches one namespace (and a node's Lease only
	// there): one controller and one node per namespace.
	startController(t, ns, controllers.Options{}, nil)
	startController(t, other, controllers.Options{}, nil)
	startNode(t, ns, fakenode.Options{Name: "recheck-" + ns, Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterGemini: "1"}, Slots: 4})
	startNode(t, other, fakenode.Options{Name: "recheck-" + other, Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterGemini: "1"}, Slots: 4})

	run := waitRun(t, ns, "unsandboxed", wait, "Failed", phaseIs(harnessv1.RunFailed))
	want := "HarnessPolicy " + policy.Name + " rule isolation.forbidFallback: isolation.policy AllowFallback is not allowed"
	if run.Status.Reason != harnessv1.ReasonPolicyViolation || !strings.Contains(run.Status.Message, want) || run.Status.NodeName != "" {
		t.Errorf("run breaking the policy: reason %q, message %q, node %q; want %s naming %q, never bound",
			run.Status.Reason, run.Status.Message, run.Status.NodeName, harnessv1.ReasonPolicyViolation, want)
	}
	waitRun(t, other, "unsandboxed", wait, "Succeeded (its namespace is not selected)", phaseIs(harnessv1.RunSucceeded))
}

// TestBindingRecordsTheLimitCeilings: the controller records the strictest
// HarnessPolicy ceiling of each limit, and the policy that sets it, when it
// binds a run (status.limitCeilings): the node-agent judges the limits it
// resolves from the fixture against them. So too the names every policy
// allows at inside addresses (status.insideHosts), for its egress proxy. A run that sets no limit is not
// refused here: only its node knows its fixture's.
func TestBindingRecordsTheLimitCeilings(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	label := map[string]string{"ceilings-test": ns}
	labelNamespace(t, ns, label)
	loose := &harnessv1.HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "loose-" + ns}, Spec: harnessv1.HarnessPolicySpec{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: label},
		Limits:            &harnessv1.PolicyLimits{MaxEpisodeSeconds: ptr.To[int32](600), MaxDisk: ptr.To(resource.MustParse("512Mi"))},
		Network:           &harnessv1.PolicyNetwork{InsideHosts: []string{"gateway.corp", "Mirror.Corp", "lab.corp"}},
	}}
	strict := &harnessv1.HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "strict-" + ns}, Spec: harnessv1.HarnessPolicySpec{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: label},
		Limits:            &harnessv1.PolicyLimits{MaxEpisodeSeconds: ptr.To[int32](60), MaxDecisions: ptr.To[int32](10)},
		Network:           &harnessv1.PolicyNetwork{InsideHosts: []string{"mirror.corp", "gateway.corp"}},
	}}
	create(t, loose, strict)
	t.Cleanup(func() { _ = k8s.Delete(ctx, loose); _ = k8s.Delete(ctx, strict) })

	startController(t, ns, controllers.Options{}, nil)
	startNode(t, ns, fakenode.Options{Name: "ceilings-" + ns, Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterGemini: "1"}, Slots: 2, RunFor: -1})
	create(t, hftesting.MakeHarnessRun("unset", ns).Adapter(harnessv1.AdapterGemini).Obj())

	run := waitRun(t, ns, "unset", wait, "bound", func(r *harnessv1.HarnessRun) bool { return r.Status.NodeName != "" })
	want := &harnessv1.LimitCeilings{
		PolicyLimits: harnessv1.PolicyLimits{MaxEpisodeSeconds: ptr.To[int32](60), MaxDecisions: ptr.To[int32](10), MaxDisk: ptr.To(resource.MustParse("512Mi"))},
		Policies:     map[string]string{"maxEpisodeSeconds": strict.Name, "maxDecisions": strict.Name, "maxDisk": loose.Name},
	}
	if diff := cmp.Diff(want, run.Status.LimitCeilings); diff != "" {
		t.Errorf("status.limitCeilings (-want +got):\n%s", diff)
	}
	// The names both policies allow inside, for the node-agent's egress.
	if diff := cmp.Diff([]string{"gateway.corp", "mirror.corp"}, run.Status.InsideHosts); diff != "" {
		t.Errorf("status.insideHosts (-want +got):\n%s", diff)
	}
	if run.Status.Reason == harnessv1.ReasonPolicyViolation {
		t.Errorf("a run that sets no limit was refused before its node read its fixture: %s", run.Status.Message)
	}
}
