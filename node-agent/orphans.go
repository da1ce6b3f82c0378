package nodeagent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/kube"
)

// sweep ends the runs an earlier node-agent process claimed on this node and
// never finished: their agent died with it (bwrap --die-with-parent), so the
// attempt cannot be trusted and is not executed again.
func (a *Agent) sweep(ctx context.Context) error {
	var runs harnessv1.HarnessRunList
	if err := a.cache.List(ctx, &runs); err != nil { // the cache holds only this node's runs
		return fmt.Errorf("listing this node's runs: %w", err)
	}
	for i := range runs.Items {
		run := &runs.Items[i]
		if run.Status.NodeName != a.opts.NodeName || run.Status.Phase != harnessv1.RunRunning {
			continue
		}
		if err := a.markOrphaned(ctx, run); err != nil {
			return err
		}
	}
	return nil
}

// markOrphaned reports an attempt this process did not claim (an earlier
// process did, and died with its agent): Ready=False with reason
// NodeAgentRestarted, phase unchanged. The controller then ends the run
// (Failed, class Infrastructure) or retries it while spec.retries allows;
// the attempt itself is never executed again.
func (a *Agent) markOrphaned(ctx context.Context, run *harnessv1.HarnessRun) error {
	if c := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionReady); c != nil &&
		c.Reason == harnessv1.ReasonNodeAgentRestarted {
		return nil
	}
	base := run.DeepCopy()
	msg := fmt.Sprintf("the node-agent on %s restarted during attempt %d; the attempt's agent was killed with it and its run dir removed",
		a.opts.NodeName, run.Status.Attempt)
	run.Status.ObservedGeneration = run.Generation
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: harnessv1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: harnessv1.ReasonNodeAgentRestarted, Message: msg, ObservedGeneration: run.Generation,
		LastTransitionTime: metav1.NewTime(a.opts.Clock.Now())})
	err := a.client.Status().Patch(ctx, run, kube.MergeFromWithLock(base))
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // the next version comes through the watch
	}
	if err != nil {
		return fmt.Errorf("reporting the orphaned attempt of %s: %w", keyOf(run), err)
	}
	a.recorder.Eventf(run, nil, corev1.EventTypeWarning, harnessv1.ReasonNodeAgentRestarted, "Recover", "%s", msg)
	return nil
}
