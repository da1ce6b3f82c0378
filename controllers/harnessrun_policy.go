package controllers

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// PendingFairShare is the pending reason of a run whose namespace already
// has as many runs on nodes as a HarnessPolicy allows.
const PendingFairShare = "FairShare"

// namespacePolicies returns the HarnessPolicies (from the cache) that
// select namespace, by name.
func (r *HarnessRunReconciler) namespacePolicies(ctx context.Context, namespace string) ([]*harnessv1.HarnessPolicy, error) {
	policies := &harnessv1.HarnessPolicyList{}
	if err := r.client.List(ctx, policies, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing HarnessPolicies: %w", err)
	}
	if len(policies.Items) == 0 {
		return nil, nil
	}
	ns := &corev1.Namespace{}
	if err := r.client.Get(ctx, types.NamespacedName{Name: namespace}, ns, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("reading namespace %s for its HarnessPolicies: %w", namespace, err)
	}
	var out []*harnessv1.HarnessPolicy
	for i := range policies.Items {
		p := &policies.Items[i]
		ok, err := p.Selects(ns.Labels)
		if err != nil {
			// Such a policy selects nothing; say so rather than stop every
			// dispatch.
			log.FromContext(ctx).Error(err, "a HarnessPolicy selects no namespace", "policy", p.Name)
			continue
		}
		if ok {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// policyViolations are the rules of policies that the run breaks: a run
// admitted before a policy was made or tightened (admission checks every
// new run) is refused here, before it is bound.
func policyViolations(run *harnessv1.HarnessRun, policies []*harnessv1.HarnessPolicy) []string {
	var out []string
	for _, p := range policies {
		for _, v := range p.Violations(&run.Spec) {
			out = append(out, v.String())
		}
	}
	return out
}

// fairShareLimit is the strictest fairShare.maxRunsInFlight of policies (0:
// none), and the policy that sets it.
func fairShareLimit(policies []*harnessv1.HarnessPolicy) (int32, string) {
	var limit int32
	var policy string
	for _, p := range policies {
		if p.Spec.FairShare == nil || p.Spec.FairShare.MaxRunsInFlight == nil {
			continue
		}
		if m := *p.Spec.FairShare.MaxRunsInFlight; limit == 0 || m < limit {
			limit, policy = m, p.Name
		}
	}
	return limit, policy
}

// waitingOnPolicy queues every waiting run when a HarnessPolicy changes: a
// raised or removed fairShare or budget lets some of them go.
func (r *HarnessRunReconciler) waitingOnPolicy(ctx context.Context, _ client.Object) []reconcile.Request {
	runs := &harnessv1.HarnessRunList{}
	if err := r.client.List(ctx, runs, client.MatchingFields{IndexRunPhase: string(harnessv1.RunPending)}, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "listing waiting runs after a HarnessPolicy changed")
		return nil
	}
	out := make([]reconcile.Request, 0, len(runs.Items))
	for i := range runs.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&runs.Items[i])})
	}
	return out
}

// policyMayFree passes the HarnessPolicy changes that may let waiting runs
// go: a changed spec (a raised or removed fairShare or budget), and a
// spend count an operator lowered or removed. A charge only raises counts,
// and comes at every run's end: it wakes nothing.
var policyMayFree = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		oldP, ok1 := e.ObjectOld.(*harnessv1.HarnessPolicy)
		newP, ok2 := e.ObjectNew.(*harnessv1.HarnessPolicy)
		if !ok1 || !ok2 || oldP.Generation != newP.Generation {
			return true
		}
		return spentLowered(&oldP.Status, &newP.Status)
	},
}

// spentLowered says whether some count of before is lower, or gone, in
// after.
func spentLowered(before, after *harnessv1.HarnessPolicyStatus) bool {
	for _, o := range before.Spent {
		var n *harnessv1.NamespaceSpend
		for i := range after.Spent {
			if after.Spent[i].Namespace == o.Namespace {
				n = &after.Spent[i]
			}
		}
		if n == nil || n.Tokens < o.Tokens {
			return true
		}
		for _, os := range o.Suites {
			found := false
			for _, ns := range n.Suites {
				if ns.Suite == os.Suite {
					found = true
					if ns.Round == os.Round && ns.Tokens < os.Tokens {
						return true
					}
				}
			}
			if !found {
				return true
			}
		}
	}
	return false
}
