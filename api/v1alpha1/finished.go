package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations of a HarnessRun made by `harnessfacts retry`.
const (
	// LabelRetryOf names the run a run retries (same spec, new name), so
	// `kubectl get hfrun -l harnessfacts.io/retry-of=NAME` lists its retries.
	LabelRetryOf = "harnessfacts.io/retry-of"
	// AnnotationRetryOfUID is the UID of that run: a later run of the same
	// name is not the one retried.
	AnnotationRetryOfUID = "harnessfacts.io/retry-of-uid"
)

// MarkFinished sets Finished on st from its phase (FinishedCondition) and,
// for a run that ended without verdict Pass, kstatus' Stalled
// (RunStalledCondition). It is the one place both are set: whoever writes a
// terminal phase (the node-agent's outcome, the controller ending a run, a
// local run) calls it in that same write, so `kubectl wait
// --for=condition=Finished` returns with the write that ended the run; the
// controller calls it on every pass, which adds Finished=False to a new
// run and Finished=True to a terminal run that lacks it.
func MarkFinished(st *HarnessRunStatus, generation int64, now metav1.Time) {
	finished := FinishedCondition(st, generation, now)
	meta.SetStatusCondition(&st.Conditions, finished)
	if stalled, ok := RunStalledCondition(st, finished); ok {
		meta.SetStatusCondition(&st.Conditions, stalled)
	}
}

// FinishedCondition is the Finished condition a run with status st and
// metadata.generation generation should carry: True with the verdict as
// reason once the phase is terminal, False (reason NotFinished) before.
func FinishedCondition(st *HarnessRunStatus, generation int64, now metav1.Time) metav1.Condition {
	c := metav1.Condition{Type: ConditionFinished, ObservedGeneration: generation, LastTransitionTime: now}
	if !st.Phase.Terminal() {
		c.Status = metav1.ConditionFalse
		c.Reason = ReasonNotFinished
		// One message for every phase before the end, so that the
		// condition does not change (and cost a write) at each phase.
		c.Message = "the run has not reached a terminal phase"
		return c
	}
	c.Status = metav1.ConditionTrue
	switch {
	case st.Verdict != "":
		c.Reason = string(st.Verdict)
	case st.Reason != "":
		c.Reason = st.Reason
	default:
		c.Reason = string(st.Phase)
	}
	c.Message = st.Message
	if c.Message == "" {
		c.Message = "the run is " + string(st.Phase)
	}
	return c
}

// RunStalledCondition is kstatus' Stalled condition for a run that ended
// without verdict Pass (ok false otherwise: the condition is not set). kstatus
// judges a run by its Ready condition (InProgress while False), so without
// it a failed run would look in progress forever to Flux and other kstatus
// users; with it a finished run is Current on Pass and Failed otherwise,
// like a Job. finished is the run's Finished condition.
func RunStalledCondition(st *HarnessRunStatus, finished metav1.Condition) (metav1.Condition, bool) {
	if !st.Phase.Terminal() || st.Verdict == VerdictPass {
		return metav1.Condition{}, false
	}
	return metav1.Condition{
		Type: ConditionStalled, Status: metav1.ConditionTrue, Reason: finished.Reason,
		Message:            "the run ended without verdict Pass: " + finished.Message,
		ObservedGeneration: finished.ObservedGeneration, LastTransitionTime: finished.LastTransitionTime,
	}, true
}
