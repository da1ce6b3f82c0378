package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// infrastructureFailure says whether the run's attempt was lost to the
// infrastructure: its node lost, its node-agent restarted (the node-agent
// then marks the run Ready=False, reason NodeAgentRestarted, and leaves the
// decision to retry to the controller), or its node-agent, alive, did not
// claim it within ClaimTimeout of its binding (then p is asked back at that
// moment).
func (r *HarnessRunReconciler) infrastructureFailure(ctx context.Context, p *pass) (reason, message string) {
	run := p.run
	node := run.Status.NodeName
	if h := r.nodeHealthOf(ctx, node); h.lost {
		return harnessv1.ReasonNodeLost, fmt.Sprintf("node %s was lost: %s", node, h.why)
	}
	if run.Status.Phase == harnessv1.RunScheduled && run.Status.ScheduledTime != nil {
		claimBy := run.Status.ScheduledTime.Add(r.opts.ClaimTimeout)
		if left := claimBy.Sub(p.now.Time); left > 0 {
			p.requeue(left)
		} else {
			return harnessv1.ReasonClaimTimeout, fmt.Sprintf("the node-agent on %s did not claim the run within %s of its binding at %s",
				node, r.opts.ClaimTimeout, run.Status.ScheduledTime.UTC().Format(time.RFC3339))
		}
	}
	if run.Status.Phase == harnessv1.RunRunning {
		if c := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionReady); c != nil &&
			c.Status == metav1.ConditionFalse && c.Reason == harnessv1.ReasonNodeAgentRestarted {
			return harnessv1.ReasonNodeAgentRestarted, fmt.Sprintf("the node-agent on %s restarted during the attempt: %s", node, c.Message)
		}
	}
	return "", ""
}

// reconcileNodeLoss ends or retries the runs of a lost node. Only this
// infrastructure failure is retried (spec.retries): an agent's own failure,
// a timeout or a failed check never comes here, and a run being cancelled or
// deleted is not started again.
func (r *HarnessRunReconciler) reconcileNodeLoss(ctx context.Context, p *pass) error {
	run := p.run
	if run.Status.NodeName == "" || (run.Status.Phase != harnessv1.RunScheduled && run.Status.Phase != harnessv1.RunRunning) {
		return nil
	}
	reason, msg := r.infrastructureFailure(ctx, p)
	if reason == "" {
		return nil
	}
	attempt := max(run.Status.Attempt, 1)
	if stopReason(run) != "" || attempt > run.Spec.Retries {
		if run.Spec.Retries > 0 && stopReason(run) == "" {
			msg = fmt.Sprintf("%s; no retries left (attempt %d of %d)", msg, attempt, run.Spec.Retries+1)
		}
		p.fail(reason, msg, harnessv1.VerdictError, harnessv1.FailureInfrastructure)
		return nil
	}
	st := &p.run.Status
	msg = fmt.Sprintf("%s; retrying (attempt %d of %d)", msg, attempt+1, run.Spec.Retries+1)
	st.Phase = harnessv1.RunPending
	st.NodeName = ""
	st.Attempt = attempt + 1
	st.ScheduledTime = nil
	st.StartTime = nil
	st.Reason = harnessv1.ReasonRetrying
	st.Message = msg
	p.setCondition(harnessv1.ConditionScheduled, metav1.ConditionFalse, harnessv1.ReasonRetrying, msg)
	p.setCondition(harnessv1.ConditionReady, metav1.ConditionFalse, harnessv1.ReasonRetrying, msg)
	p.event(corev1.EventTypeWarning, harnessv1.ReasonRetrying, "Retry", msg, nil)
	return nil
}
