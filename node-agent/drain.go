package nodeagent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
)

// The drain: a node-agent that is stopping (SIGTERM: its pod replaced by a
// helm upgrade, or deleted) claims no new run and says so on its
// HarnessNode (Ready=False, reason Draining), so that the controller binds
// nothing more to it. Its attempts get Options.HandBackAfter to finish and
// write their outcome as usual. Those still running then are handed back:
// the agent is stopped through the attempt's context, and once the
// executor has returned (the agent's process tree killed, the run dir and
// the credential copies in it removed) the run gets Ready=False with reason
// HandedBack, phase left Running and no verdict; whatever the stopped agent
// produced is not judged. The controller then schedules the run again as a
// new attempt that does not count against spec.retries. The hand-back is
// written only if the run is still this node's attempt, so a run is never
// carried out twice at once; a node-agent killed before it could write it
// leaves the attempt to the next one's sweep (NodeAgentRestarted), so no
// run is lost either.
//
// A run cancelled or deleted meanwhile still ends as a stop does (Cancelled
// or Deleted, no failure class): the claim reconciler acts on nothing once
// the drain began, so the drain itself looks for stop requests every second
// (watchStops), and a hand-back that finds one writes the stopped outcome
// instead (handBack).

// drain stops claiming, waits for the attempts until HandBackAfter, and
// hands back those left. ctx lives until the drain is done.
func (a *Agent) drain(ctx context.Context) {
	logger := log.FromContext(ctx)
	a.claims.Lock()
	a.draining = true
	a.claims.Unlock()
	if err := a.markDraining(ctx); err != nil {
		logger.Error(err, "saying on the HarnessNode that the node-agent drains")
	}
	done := make(chan struct{})
	go func() {
		a.wg.Wait()
		close(done)
	}()
	stopsWatched := make(chan struct{})
	go func() {
		defer close(stopsWatched)
		a.watchStops(ctx, done)
	}()
	defer func() { <-stopsWatched }()
	if n := a.runningCount(); n > 0 {
		logger.Info("stopping: no new run is claimed; running attempts may finish, then those left are handed back",
			"attempts", n, "handBackAfter", a.opts.HandBackAfter)
	}
	timer := a.opts.Clock.NewTimer(a.opts.HandBackAfter)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C():
	}
	a.handBackAll(logger)
	<-done
}

// watchStops, until done, stops every second the attempts whose run was
// cancelled or deleted since, with that cause, as the claim reconciler
// does before the drain: each then finishes as usual (Cancelled or
// Deleted, its evidence written) instead of running on until it is handed
// back. The runs are read from the API server itself, not the cache: what
// the drain writes must rest on the runs as they are.
func (a *Agent) watchStops(ctx context.Context, done <-chan struct{}) {
	ticker := a.opts.Clock.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-done:
			return
		case <-ticker.C():
		}
		a.stopRequestedAttempts(ctx)
	}
}

// stopRequestedAttempts reads the run of each attempt whose agent still
// runs and was not stopped yet, and stops those whose run asks for it.
func (a *Agent) stopRequestedAttempts(ctx context.Context) {
	logger := log.FromContext(ctx)
	a.mu.Lock()
	live := map[types.UID]*running{}
	for uid, r := range a.running {
		if !r.finishing && r.ctx.Err() == nil {
			live[uid] = r
		}
	}
	a.mu.Unlock()
	for uid, r := range live {
		run := &harnessv1.HarnessRun{}
		err := a.client.Get(ctx, r.key, run)
		var cause *executor.StopCause
		switch {
		case apierrors.IsNotFound(err) || (err == nil && run.UID != uid):
			cause = &executor.StopCause{Reason: harnessv1.ReasonDeleted, Message: "the run was deleted"}
		case err != nil:
			logger.Error(err, "reading a run while draining, to see whether it must stop; trying again in a second", "run", r.key)
			continue
		default:
			cause = stopRequested(run)
		}
		if cause != nil {
			logger.Info("stopping an attempt whose run must stop while the node-agent drains", "run", r.key, "attempt", r.attempt, "reason", cause.Reason)
			r.cancel(cause)
		}
	}
}

// isDraining says whether the Agent stopped claiming.
func (a *Agent) isDraining() bool {
	a.claims.RLock()
	defer a.claims.RUnlock()
	return a.draining
}

// handBackAll stops every attempt whose agent is still running and that was
// not stopped already (a cancel or a delete keeps its own outcome), marking
// it to be handed back instead of judged.
func (a *Agent) handBackAll(logger interface {
	Info(string, ...any)
}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.running {
		if r.finishing || r.ctx.Err() != nil {
			continue
		}
		r.handedBack = true
		r.cancel(&executor.StopCause{Reason: harnessv1.ReasonHandedBack,
			Message: fmt.Sprintf("the node-agent on %s is shutting down and hands the attempt back", a.opts.NodeName)})
		logger.Info("handing back an attempt that did not finish within the shutdown grace", "run", r.key, "attempt", r.attempt)
	}
}

// markDraining sets the HarnessNode's Ready condition to False, reason
// Draining: the controller binds no more runs to this node until the next
// node-agent registers it again.
func (a *Agent) markDraining(ctx context.Context) error {
	now := metav1.NewTime(a.opts.Clock.Now())
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		node := &harnessv1.HarnessNode{}
		if err := a.client.Get(ctx, types.NamespacedName{Name: a.opts.NodeName}, node); err != nil {
			return err
		}
		meta.SetStatusCondition(&node.Status.Conditions, metav1.Condition{Type: harnessv1.ConditionNodeReady,
			Status: metav1.ConditionFalse, Reason: harnessv1.ReasonDraining, LastTransitionTime: now, ObservedGeneration: node.Generation,
			Message: "the node-agent is shutting down (its pod is being replaced or deleted): it claims no new run; its running attempts finish or are handed back"})
		return a.client.Status().Update(ctx, node)
	})
}

// handBack reports the stopped attempt as handed back: Ready=False, reason
// HandedBack, phase left Running, written only while the run is still this
// node's attempt. Its executor has returned: the agent is gone and its run
// dir removed. A run cancelled or deleted since the drain stopped its agent
// is not handed back: handBack returns its stop, and the caller writes the
// stopped outcome, so that the run ends as the user asked.
func (a *Agent) handBack(ctx context.Context, run *harnessv1.HarnessRun) (*executor.StopCause, error) {
	key := keyOf(run)
	msg := fmt.Sprintf("the node-agent on %s was shut down (its pod replaced or deleted) before attempt %d finished within its shutdown grace; it stopped the agent, removed the run dir and handed the attempt back",
		a.opts.NodeName, run.Status.Attempt)
	var written *harnessv1.HarnessRun
	var stop *executor.StopCause
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur := &harnessv1.HarnessRun{}
		if err := a.client.Get(ctx, key, cur); err != nil {
			return err
		}
		if cur.UID != run.UID || cur.Status.Attempt != run.Status.Attempt || cur.Status.Phase != harnessv1.RunRunning ||
			cur.Status.NodeName != a.opts.NodeName {
			return nil // the controller already ended or rebound this attempt
		}
		if stop = stopRequested(cur); stop != nil {
			return nil
		}
		base := cur.DeepCopy()
		cur.Status.ObservedGeneration = cur.Generation
		meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: harnessv1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: harnessv1.ReasonHandedBack, Message: msg, ObservedGeneration: cur.Generation,
			LastTransitionTime: metav1.NewTime(a.opts.Clock.Now())})
		cur.Status.LiveOutput = nil // the stream ended with the attempt
		if err := a.client.Status().Patch(ctx, cur, kube.MergeFromWithLock(base)); err != nil {
			return err
		}
		written = cur
		return nil
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("handing back %s: %w", key, err)
	}
	if written != nil {
		a.recorder.Eventf(written, nil, corev1.EventTypeNormal, harnessv1.ReasonHandedBack, "HandBack", "%s", msg)
	}
	return stop, nil
}
