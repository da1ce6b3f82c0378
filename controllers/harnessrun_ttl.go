package controllers

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// reconcileTTL deletes a finished run spec.ttlSecondsAfterFinished after it
// finished. Its evidence ConfigMap is owned by the run, so the garbage
// collector deletes it with the run (background propagation).
func (r *HarnessRunReconciler) reconcileTTL(ctx context.Context, p *pass) error {
	run := p.run
	if run.Spec.TTLSecondsAfterFinished == nil || !run.Status.Phase.Terminal() {
		return nil
	}
	expires := finishedAt(run).Add(time.Duration(*run.Spec.TTLSecondsAfterFinished) * time.Second)
	if left := expires.Sub(p.now.Time); left > 0 {
		p.requeue(left)
		return nil
	}
	// The preconditions make sure we delete the run we judged: not one whose
	// TTL was just raised, nor a new run of the same name.
	err := r.client.Delete(ctx, run,
		client.Preconditions{UID: &run.UID, ResourceVersion: &run.ResourceVersion},
		client.PropagationPolicy("Background"))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting finished HarnessRun %s/%s after its TTL: %w", run.Namespace, run.Name, err)
	}
	log.FromContext(ctx).Info("deleted finished run after its TTL", "run", client.ObjectKeyFromObject(run),
		"ttlSecondsAfterFinished", *run.Spec.TTLSecondsAfterFinished, "phase", run.Status.Phase)
	return nil
}

// finishedAt is the latest time the run may have finished: completionTime,
// else the last change of its Ready condition, else its creation. The API
// stores these times in whole seconds, cut down, so the second is rounded up
// to never delete a run before its TTL has really passed.
func finishedAt(run *harnessv1.HarnessRun) time.Time {
	t := run.CreationTimestamp.Time
	if run.Status.CompletionTime != nil {
		t = run.Status.CompletionTime.Time
	} else if c := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionReady); c != nil {
		t = c.LastTransitionTime.Time
	}
	if t.Nanosecond() == 0 {
		t = t.Add(time.Second)
	}
	return t
}
