package nodeagent

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/kube"
)

// policyViolations are the rules of the HarnessPolicies over the run's
// namespace that the run breaks, as this node-agent's cache holds them.
// Admission checks a run when it is made and the controller before it binds
// it; a policy made or tightened after that is caught here, before the
// claim, and again just before the agent starts (the executor's
// PolicyViolations). The cache is fed by a watch of HarnessPolicies and of
// Namespaces (their labels are what policies select by): a change
// is seen one watch event after the API server accepted it, milliseconds on
// a healthy watch. A policy written within that moment before a check is
// judged by the next check; one written after the agent started binds the
// next runs (the controller's and admission's checks are cache-fed too).
func policyViolations(ctx context.Context, r *kube.Cache, run *harnessv1.HarnessRun) ([]string, error) {
	policies, labels, err := policiesAndLabels(ctx, r, run.Namespace)
	if err != nil || len(policies) == 0 {
		return nil, err
	}
	var out []string
	for i := range policies {
		p := &policies[i]
		ok, err := p.Selects(labels)
		if err != nil {
			log.FromContext(ctx).Error(err, "a HarnessPolicy selects no namespace", "policy", p.Name)
			continue
		}
		if !ok {
			continue
		}
		for _, v := range p.Violations(&run.Spec) {
			out = append(out, v.String())
		}
	}
	return out, nil
}

// policiesAndLabels are every HarnessPolicy, sorted by name, and the labels
// of namespace (read only when there is a policy).
func policiesAndLabels(ctx context.Context, r *kube.Cache, namespace string) ([]harnessv1.HarnessPolicy, map[string]string, error) {
	policies := &harnessv1.HarnessPolicyList{}
	if err := r.List(ctx, policies); err != nil {
		return nil, nil, fmt.Errorf("listing HarnessPolicies: %w", err)
	}
	if len(policies.Items) == 0 {
		return nil, nil, nil
	}
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: namespace}, ns); err != nil {
		return nil, nil, fmt.Errorf("reading namespace %s for its HarnessPolicies: %w", namespace, err)
	}
	sort.Slice(policies.Items, func(i, j int) bool { return policies.Items[i].Name < policies.Items[j].Name })
	return policies.Items, ns.Labels, nil
}

// refuse ends a bound run that breaks a HarnessPolicy instead of claiming
// it: Failed, reason PolicyViolation, naming each rule, in one status write
// conditioned on the version read (like a claim). Like the controller's
// refusal before binding, it has no verdict: the agent never ran.
func (a *Agent) refuse(ctx context.Context, run *harnessv1.HarnessRun, violations []string) (result, error) {
	now := metav1.NewTime(a.opts.Clock.Now())
	base := run.DeepCopy()
	st := &run.Status
	st.Phase, st.Reason = harnessv1.RunFailed, harnessv1.ReasonPolicyViolation
	st.Message = "refused by the namespace's HarnessPolicies when the node-agent on " + a.opts.NodeName + " claimed it: " + strings.Join(violations, "; ")
	st.CompletionTime = &now
	st.ObservedGeneration = run.Generation
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: harnessv1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: harnessv1.ReasonPolicyViolation, Message: st.Message, ObservedGeneration: run.Generation, LastTransitionTime: now})
	harnessv1.MarkFinished(st, run.Generation, now)
	st.Fit()
	if err := a.client.Status().Patch(ctx, run, kube.MergeFromWithLock(base)); err != nil {
		if isGone(err) {
			return result{}, nil
		}
		return result{}, fmt.Errorf("refusing %s: %w", keyOf(run), err)
	}
	a.recorder.Eventf(run, nil, corev1.EventTypeWarning, harnessv1.ReasonPolicyViolation, "Claim", "%s", st.Message)
	return result{}, nil
}

// gatewayLimits reads a run's model gateway limits from the HarnessPolicies
// over its namespace, as they are when its gateway starts.
func gatewayLimits(r *kube.Cache) func(ctx context.Context, run *harnessv1.HarnessRun) (harnessv1.GatewayLimits, error) {
	return func(ctx context.Context, run *harnessv1.HarnessRun) (harnessv1.GatewayLimits, error) {
		selecting, err := policiesOver(ctx, r, run.Namespace)
		if err != nil {
			return harnessv1.GatewayLimits{}, err
		}
		return harnessv1.GatewayLimitsOf(selecting), nil
	}
}

// pricing reads the price table of a run's namespace from the
// HarnessPolicies over it, as they are when the run ends.
func pricing(r *kube.Cache) func(ctx context.Context, run *harnessv1.HarnessRun) (*harnessv1.PolicyPricing, string, error) {
	return func(ctx context.Context, run *harnessv1.HarnessRun) (*harnessv1.PolicyPricing, string, error) {
		selecting, err := policiesOver(ctx, r, run.Namespace)
		if err != nil {
			return nil, "", err
		}
		p, name := harnessv1.PricingOf(selecting)
		return p, name, nil
	}
}

// policiesOver are the HarnessPolicies that select namespace, by name.
func policiesOver(ctx context.Context, r *kube.Cache, namespace string) ([]harnessv1.HarnessPolicy, error) {
	policies, labels, err := policiesAndLabels(ctx, r, namespace)
	if err != nil {
		return nil, err
	}
	var selecting []harnessv1.HarnessPolicy
	for _, p := range policies {
		if ok, err := p.Selects(labels); err == nil && ok {
			selecting = append(selecting, p)
		}
	}
	return selecting, nil
}
