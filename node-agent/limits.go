package nodeagent

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/kube"
)

// underWayAfter is how long an attempt must be running, after its claim,
// before the node-agent says so beyond the claim itself: a Running Event,
// and its settled limits written into status.limits and
// status.limitSources. Until then the controller knows only the run's own
// episode, and for a run that sets none its deadline is a loose backstop
// (the strictest HarnessPolicy ceiling, else the schema's maximum: never
// shorter than the episode the attempt really has); with status.limits it
// is that episode. An attempt that ends sooner has its limits recorded by
// its terminal write instead, and its story told by its terminal Event
// (status.startTime says when it began): every short run is spared two
// writes, and etcd an Event. The node-agent enforces the limits itself
// either way.
const underWayAfter = time.Second

// limitsSettled is the executor's LimitsSettled: the attempt's limits are
// known (its fixture was read). They are written at once when the attempt
// has been running for underWayAfter already, else when it has, if it has
// not ended by then (watchUnderWay).
func (a *Agent) limitsSettled(ctx context.Context, run *harnessv1.HarnessRun, lim harnessv1.ResolvedLimits, checks int32) {
	a.mu.Lock()
	r := a.running[run.UID]
	a.mu.Unlock()
	if r == nil {
		return
	}
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	r.limits, r.checks = &lim, checks
	if r.underWay && !r.ended {
		a.writeLimits(ctx, r)
	}
}

// watchUnderWay records the attempt's Running Event and writes its settled
// limits once it has been running for underWayAfter, unless it ended first.
// It returns when the attempt's context ends.
func (a *Agent) watchUnderWay(r *running) {
	t := a.opts.Clock.NewTimer(underWayAfter)
	defer t.Stop()
	select {
	case <-t.C():
	case <-r.ctx.Done():
		return
	}
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	if r.ended {
		return
	}
	r.underWay = true
	a.recorder.Eventf(r.last, nil, corev1.EventTypeNormal, string(harnessv1.RunRunning), "Start", "%s (at %s)",
		r.last.Status.Message, r.last.Status.StartTime.UTC().Format(time.RFC3339))
	if r.limits != nil {
		a.writeLimits(r.ctx, r)
	}
}

// writeLimits writes the attempt's settled limits into status.limits and
// status.limitSources, and its checks into status.plannedChecks: a merge patch of those two fields over the run as
// this process last wrote it, and the terminal write then starts from its
// answer. The patch is conditional on the run's resourceVersion, so that it
// cannot land on a run deleted and made again under the same name since
// the claim (a status patch ignores a UID in it); when someone else wrote
// the run meanwhile, it is read again and written only if it is still this
// attempt's. The terminal write records the same limits again. The caller
// holds r.writeMu.
func (a *Agent) writeLimits(ctx context.Context, r *running) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	last := r.last
	cur := last.DeepCopy()
	fresh := false
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if fresh {
			cur = &harnessv1.HarnessRun{}
			if err := a.client.Get(ctx, keyOf(last), cur); err != nil {
				return err
			}
			if cur.UID != last.UID || cur.Status.Attempt != last.Status.Attempt || cur.Status.Phase.Terminal() ||
				cur.Status.NodeName != a.opts.NodeName {
				cur = nil
				return nil // not this attempt's any more
			}
		}
		fresh = true
		base := cur.DeepCopy()
		cur.Status.Limits = r.limits.Limits.DeepCopy()
		cur.Status.LimitSources = r.limits.Sources
		cur.Status.PlannedChecks = r.checks
		return a.client.Status().Patch(ctx, cur, kube.MergeFromWithLock(base))
	})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			// Not fatal: the node-agent enforces the limits itself; the
			// controller keeps its backstop.
			log.FromContext(ctx).Error(err, "recording the run's limits in status", "run", r.key)
		}
		return
	}
	if cur != nil {
		r.last = cur
	}
	r.limits = nil
}
