package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// The controller side of the cancel protocol documented in
// api/v1alpha1/conditions.go:
//
//   - every run carries RunFinalizer while it is not terminal, so a deleted
//     run stays until its node-agent let go of it;
//   - a cancelled or deleted run that was never claimed (Pending, Scheduled)
//     is ended here: phase Failed, reason Cancelled or Deleted;
//   - a Running one gets StopRequested=True (reason Cancelled or Deleted)
//     and its node-agent ends it; deadline and node loss still apply;
//   - once the run is terminal the finalizer is removed.

// reconcileFinalizer adds RunFinalizer to a live run and removes it from a
// terminal one. It reports done when nothing else is to be done in this pass.
func (r *HarnessRunReconciler) reconcileFinalizer(ctx context.Context, p *pass) (bool, error) {
	run := p.run
	if run.Status.Phase.Terminal() {
		if controllerutil.ContainsFinalizer(run, harnessv1.RunFinalizer) {
			if err := r.patchFinalizer(ctx, p, false); err != nil {
				return true, err
			}
		}
		if run.DeletionTimestamp != nil {
			return true, nil
		}
		return true, r.reconcileTTL(ctx, p)
	}
	if run.DeletionTimestamp != nil {
		// Without our finalizer the run is about to go; with it, the stop
		// step below ends or stops it.
		return !controllerutil.ContainsFinalizer(run, harnessv1.RunFinalizer), nil
	}
	if !controllerutil.ContainsFinalizer(run, harnessv1.RunFinalizer) {
		if err := r.patchFinalizer(ctx, p, true); err != nil {
			return true, err
		}
	}
	return false, nil
}

// patchFinalizer adds or removes RunFinalizer under optimistic concurrency
// and makes the result the pass's starting point.
func (r *HarnessRunReconciler) patchFinalizer(ctx context.Context, p *pass, add bool) error {
	base := p.run.DeepCopy()
	if add {
		controllerutil.AddFinalizer(p.run, harnessv1.RunFinalizer)
	} else {
		controllerutil.RemoveFinalizer(p.run, harnessv1.RunFinalizer)
	}
	if err := r.client.Patch(ctx, p.run, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		verb := "removing"
		if add {
			verb = "adding"
		}
		return fmt.Errorf("%s finalizer of HarnessRun %s/%s: %w", verb, base.Namespace, base.Name, err)
	}
	p.orig = p.run.DeepCopy()
	return nil
}

// stopReason says why the run must stop, or "" when it need not.
func stopReason(run *harnessv1.HarnessRun) string {
	switch {
	case run.DeletionTimestamp != nil:
		return harnessv1.ReasonDeleted
	case run.Spec.Cancel:
		return harnessv1.ReasonCancelled
	}
	return ""
}

// reconcileStop carries out spec.cancel and deletion.
func (r *HarnessRunReconciler) reconcileStop(_ context.Context, p *pass) error {
	reason := stopReason(p.run)
	if reason == "" {
		return nil
	}
	what := "cancelled (spec.cancel)"
	if reason == harnessv1.ReasonDeleted {
		what = "deleted"
	}
	switch effectivePhase(p.run) {
	case harnessv1.RunPending, harnessv1.RunScheduled:
		msg := fmt.Sprintf("the run was %s before its node-agent started it", what)
		p.setCondition(harnessv1.ConditionStopRequested, metav1.ConditionTrue, reason, msg)
		p.fail(reason, msg, "", "")
	case harnessv1.RunRunning:
		if meta.IsStatusConditionTrue(p.run.Status.Conditions, harnessv1.ConditionStopRequested) {
			return nil // asked already; the node-agent is stopping it
		}
		msg := fmt.Sprintf("the run was %s: node-agent on %s, stop the agent and report what you know", what, p.run.Status.NodeName)
		p.setCondition(harnessv1.ConditionStopRequested, metav1.ConditionTrue, reason, msg)
		p.event(corev1.EventTypeNormal, harnessv1.ConditionStopRequested, "Stop", msg, nil)
	}
	return nil
}
