package nodeagent

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// recordLimits returns the executor's LimitsSettled: it writes the
// attempt's limits into status.limits and status.limitSources as soon as
// the fixture is read. Until then the controller knows only the run's own
// episode, and for a run that sets none its deadline is a loose backstop;
// with status.limits it is the episode the attempt really has. The write is
// a merge patch of those two fields only, so it never conflicts with the
// controller's writes; the terminal write records the same limits again.
func recordLimits(c client.Client) func(context.Context, *harnessv1.HarnessRun, harnessv1.ResolvedLimits) {
	return func(ctx context.Context, run *harnessv1.HarnessRun, lim harnessv1.ResolvedLimits) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cur := run.DeepCopy()
		base := cur.DeepCopy()
		cur.Status.Limits = lim.Limits.DeepCopy()
		cur.Status.LimitSources = lim.Sources
		if err := c.Status().Patch(ctx, cur, client.MergeFrom(base)); err != nil && !apierrors.IsNotFound(err) {
			// Not fatal: the node-agent enforces the limits itself; the
			// controller keeps its backstop.
			log.FromContext(ctx).Error(err, "recording the run's limits in status", "run", client.ObjectKeyFromObject(run))
		}
	}
}
