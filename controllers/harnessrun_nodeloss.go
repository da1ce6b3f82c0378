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
	switch h := r.nodeHealthOf(ctx, node); {
	case h.lost:
		return harnessv1.ReasonNodeLost, fmt.Sprintf("node %s was lost: %s", node, h.why)
	case h.recheck:
		// No renewal of the node's Lease will bring the run back here
		// if the node is gone indeed.
		p.requeue(max(h.expiresAt.Sub(p.now.Time), 100*time.Millisecond))
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
		if c := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionReady); c != nil && c.Status == metav1.ConditionFalse {
			switch c.Reason {
			case harnessv1.ReasonNodeAgentRestarted:
				return harnessv1.ReasonNodeAgentRestarted, fmt.Sprintf("the node-agent on %s restarted during the attempt: %s", node, c.Message)
			case harnessv1.ReasonHandedBack:
				return harnessv1.ReasonHandedBack, c.Message
			}
		}
	}
	return "", ""
}

// reconcileNodeLoss ends or retries the runs of a lost node. Only this
// infrastructure failure is retried (spec.retries): an agent's own failure,
// a timeout or a failed check never comes here, and a run being cancelled or
// deleted is not started again: it ends Cancelled or Deleted, with no
// failure class, the lost attempt in its message. An attempt handed back by
// a node-agent that was shutting down (reason HandedBack) is scheduled again
// without using a retry, MaxHandBacks times at most; status.handedBack
// counts them, and the retries used are the attempts so far less those.
func (r *HarnessRunReconciler) reconcileNodeLoss(ctx context.Context, p *pass) error {
	run := p.run
	if run.Status.NodeName == "" || (run.Status.Phase != harnessv1.RunScheduled && run.Status.Phase != harnessv1.RunRunning) {
		return nil
	}
	reason, msg := r.infrastructureFailure(ctx, p)
	if reason == "" {
		return nil
	}
	if stop := stopReason(run); stop != "" {
		// Cancelled or deleted, and the attempt lost meanwhile: the run
		// ends as the user asked, as if its node-agent had stopped it. A
		// stop judges nothing (no verdict, no failure class); the message
		// says what became of the attempt.
		p.fail(stop, fmt.Sprintf("the run was %s, and its attempt was lost meanwhile: %s", stopWhat(stop), msg), "", "")
		return nil
	}
	attempt := max(run.Status.Attempt, 1)
	handedBack := min(run.Status.HandedBack, attempt-1)
	if reason == harnessv1.ReasonHandedBack && run.Status.HandedBack < harnessv1.MaxHandBacks {
		msg = fmt.Sprintf("%s; scheduling it again as attempt %d, without using a retry (hand-back %d of at most %d)",
			msg, attempt+1, run.Status.HandedBack+1, harnessv1.MaxHandBacks)
		p.run.Status.HandedBack = run.Status.HandedBack + 1
		r.reschedule(p, attempt+1, harnessv1.ReasonHandedBack, msg)
		p.event(corev1.EventTypeNormal, harnessv1.ReasonHandedBack, "Reschedule", msg, nil)
		return nil
	}
	// The attempts that count against spec.retries, this one included.
	counted := attempt - handedBack
	if counted > run.Spec.Retries {
		if run.Spec.Retries > 0 {
			msg = fmt.Sprintf("%s; no retries left (attempt %d of %d)", msg, counted, run.Spec.Retries+1)
		}
		p.fail(reason, msg, harnessv1.VerdictError, harnessv1.FailureInfrastructure)
		return nil
	}
	msg = fmt.Sprintf("%s; retrying (attempt %d of %d)", msg, counted+1, run.Spec.Retries+1)
	r.reschedule(p, attempt+1, harnessv1.ReasonRetrying, msg)
	p.event(corev1.EventTypeWarning, harnessv1.ReasonRetrying, "Retry", msg, nil)
	return nil
}

// reschedule sends the run back to Pending for attempt, unbound.
func (r *HarnessRunReconciler) reschedule(p *pass, attempt int32, reason, msg string) {
	st := &p.run.Status
	st.Phase = harnessv1.RunPending
	st.NodeName = ""
	st.Attempt = attempt
	st.ScheduledTime = nil
	st.StartTime = nil
	st.LiveOutput = nil // the old attempt's stream ended with it
	st.Reason = reason
	st.Message = msg
	p.setCondition(harnessv1.ConditionScheduled, metav1.ConditionFalse, reason, msg)
	p.setCondition(harnessv1.ConditionReady, metav1.ConditionFalse, reason, msg)
}
