package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// The controller side of the cancel protocol documented in
// api/v1alpha1/conditions.go:
//
//   - a run carries RunFinalizer from its first binding until it is terminal,
//     so a deleted run stays until its node-agent let go of it (a run never
//     bound has nothing to let go of, and saves the write);
//   - a cancelled or deleted run that was never claimed (Pending, Scheduled)
//     is ended here: phase Failed, reason Cancelled or Deleted;
//   - a Running one gets StopRequested=True (reason Cancelled or Deleted)
//     and its node-agent ends it; deadline and node loss still apply;
//   - once the run is terminal the finalizer is removed.

// reconcileFinalizer removes RunFinalizer from a terminal run, and deletes
// the run after its TTL. It reports done when nothing else is to be done in
// this pass.
func (r *HarnessRunReconciler) reconcileFinalizer(ctx context.Context, p *pass) (bool, error) {
	run := p.run
	if run.Status.Phase.Terminal() {
		// Its tokens are charged to the namespace's budgets first; the
		// charge is recorded by this pass's status write, and the
		// finalizer and TTL wait for the next pass.
		if charged, err := r.chargeSpend(ctx, p); err != nil || charged {
			return err != nil, err
		}
		if controllerutil.ContainsFinalizer(run, harnessv1.RunFinalizer) {
			if err := r.patchFinalizer(ctx, p, false); err != nil {
				return true, err
			}
		}
		if run.DeletionTimestamp != nil {
			return true, nil
		}
		if !finishedCurrent(run) {
			// Ended by an older node-agent that did not set Finished (or
			// its spec changed since): this pass marks it Finished for
			// this generation, as kubectl wait wants it; its TTL is looked
			// at on the next.
			return false, nil
		}
		return true, r.reconcileTTL(ctx, p)
	}
	// A deleted run without our finalizer is about to go; with it, the stop
	// step ends or stops it.
	return run.DeletionTimestamp != nil && !controllerutil.ContainsFinalizer(run, harnessv1.RunFinalizer), nil
}

// patchFinalizer adds or removes RunFinalizer under optimistic concurrency
// (the patch carries the resourceVersion the pass read). The status this
// pass has decided so far is kept, to be written by the one status write.
func (r *HarnessRunReconciler) patchFinalizer(ctx context.Context, p *pass, add bool) error {
	desired := p.run.Status.DeepCopy()
	obj := p.orig.DeepCopy()
	base := obj.DeepCopy()
	var patch client.Patch
	if at, trimmed := obj.Annotations[CachedFinalizerIndexAnnotation]; trimmed {
		// The cache does not hold the run's whole list (cachedRun): a
		// merge patch, which writes the whole list, would drop the rest.
		var err error
		if patch, err = finalizerJSONPatch(obj.ResourceVersion, at, add); err != nil {
			return err
		}
	} else {
		patch = client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
	}
	if add {
		controllerutil.AddFinalizer(obj, harnessv1.RunFinalizer)
	} else {
		controllerutil.RemoveFinalizer(obj, harnessv1.RunFinalizer)
	}
	if err := r.client.Patch(ctx, obj, patch); err != nil {
		verb := "removing"
		if add {
			verb = "adding"
		}
		return fmt.Errorf("%s finalizer of HarnessRun %s/%s: %w", verb, base.Namespace, base.Name, err)
	}
	r.written.wrote(client.ObjectKeyFromObject(obj), obj.ResourceVersion)
	p.orig = obj.DeepCopy()
	obj.Status = *desired
	*p.run = *obj
	return nil
}

// finalizerJSONPatch adds RunFinalizer at the end of a run's finalizers,
// or removes it from index at (CachedFinalizerIndexAnnotation), on the
// version the pass read: the resourceVersion in the patch makes a newer
// run a Conflict, as MergeFromWithOptimisticLock does, and the test makes
// sure what is removed is RunFinalizer.
func finalizerJSONPatch(resourceVersion, at string, add bool) (client.Patch, error) {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value,omitempty"`
	}
	ops := []op{{Op: "replace", Path: "/metadata/resourceVersion", Value: resourceVersion}}
	if add {
		ops = append(ops, op{Op: "add", Path: "/metadata/finalizers/-", Value: harnessv1.RunFinalizer})
	} else {
		i, err := strconv.Atoi(at)
		if err != nil || i < 0 {
			return nil, fmt.Errorf("the cached run names no place of its finalizer (%q)", at)
		}
		path := "/metadata/finalizers/" + strconv.Itoa(i)
		ops = append(ops, op{Op: "test", Path: path, Value: harnessv1.RunFinalizer}, op{Op: "remove", Path: path})
	}
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	return client.RawPatch(types.JSONPatchType, b), nil
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

// stopWhat says in words what happened to a run stopped for reason.
func stopWhat(reason string) string {
	if reason == harnessv1.ReasonDeleted {
		return "deleted"
	}
	return "cancelled (spec.cancel)"
}

// reconcileStop carries out spec.cancel and deletion.
func (r *HarnessRunReconciler) reconcileStop(_ context.Context, p *pass) error {
	reason := stopReason(p.run)
	if reason == "" {
		return nil
	}
	what := stopWhat(reason)
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
