package nodeagent

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
	"github.com/harnessfacts/harnessfacts/node-agent/livelog"
)

// running is an attempt this process claimed and is carrying out.
type running struct {
	key     types.NamespacedName
	attempt int32
	// ctx is the attempt's context, cancelled with a StopCause when it
	// must stop.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// handedBack is set, while the agent still runs, by a drain that stops
	// the attempt to hand it back: its outcome is not judged.
	handedBack bool
	// finishing is set once the agent is done and its outcome is being
	// written: the slot is free (the controller may already bind the next
	// run), but the run is still this process's, never an orphan.
	finishing bool

	// writeMu orders the attempt's status writes after its claim (its
	// limits, its outcome), each of which starts from last: the run as
	// this process last wrote it, so that none conflicts with another of
	// its own (limits.go).
	writeMu sync.Mutex
	last    *harnessv1.HarnessRun
	// limits are the attempt's settled limits while not yet written, and
	// checks how many checks its fixture names.
	limits *harnessv1.ResolvedLimits
	checks int32
	// underWay: the attempt has been running for underWayAfter.
	underWay bool
	// ended: the outcome is being written; nothing else is.
	ended bool
}

func (a *Agent) runningCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.running)
}

// slotsBusy counts the attempts whose agent is still running.
func (a *Agent) slotsBusy() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, e := range a.running {
		if !e.finishing {
			n++
		}
	}
	return n
}

// reconcile acts on one run bound to this node.
func (a *Agent) reconcile(ctx context.Context, key types.NamespacedName) (result, error) {
	select {
	case <-a.swept:
	case <-ctx.Done():
		return result{}, nil
	}
	if a.isDraining() {
		// Stopping: no new claim, and a run Running under another attempt
		// may be the next node-agent's, already started on this node.
		return result{}, nil
	}
	run := &harnessv1.HarnessRun{}
	if err := a.cache.Get(ctx, key, run); err != nil {
		if apierrors.IsNotFound(err) {
			a.stopByKey(key, &executor.StopCause{Reason: harnessv1.ReasonDeleted, Message: "the run was deleted"})
			return result{}, nil
		}
		return result{}, err
	}
	a.mu.Lock()
	r := a.running[run.UID]
	a.mu.Unlock()

	if run.Status.NodeName != a.opts.NodeName || run.Status.Phase.Terminal() {
		if r != nil {
			r.cancel(&executor.StopCause{Reason: harnessv1.ReasonStopped, Message: "the run is no longer bound to this node"})
		}
		return result{}, nil
	}
	if cause := stopRequested(run); cause != nil && r != nil {
		r.cancel(cause)
		return result{}, nil
	}

	switch run.Status.Phase {
	case harnessv1.RunScheduled:
		if stopRequested(run) != nil {
			return result{}, nil // the controller ends runs never claimed
		}
		return a.claim(ctx, run)
	case harnessv1.RunRunning:
		if r == nil || r.attempt != run.Status.Attempt {
			// Claimed by an earlier process of this node-agent (or a
			// previous attempt): never execute an attempt twice.
			return result{}, a.markOrphaned(ctx, run)
		}
	}
	return result{}, nil
}

// stopRequested says whether the run must stop, and why.
func stopRequested(run *harnessv1.HarnessRun) *executor.StopCause {
	switch {
	case !run.DeletionTimestamp.IsZero():
		return &executor.StopCause{Reason: harnessv1.ReasonDeleted, Message: "the run was deleted while it ran"}
	case run.Spec.Cancel:
		return &executor.StopCause{Reason: harnessv1.ReasonCancelled, Message: "spec.cancel stopped the run"}
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionStopRequested); c != nil && c.Status == metav1.ConditionTrue {
		reason := c.Reason
		if reason != harnessv1.ReasonDeleted {
			reason = harnessv1.ReasonCancelled
		}
		return &executor.StopCause{Reason: reason, Message: "the controller asked to stop the run: " + c.Message}
	}
	return nil
}

func (a *Agent) stopByKey(key types.NamespacedName, cause *executor.StopCause) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.running {
		if r.key == key {
			r.cancel(cause)
		}
	}
}

// claim starts the bound attempt: phase Running with startTime, written only
// if nobody changed the run since this agent read it.
func (a *Agent) claim(ctx context.Context, run *harnessv1.HarnessRun) (result, error) {
	// Held until the attempt is counted in wg, so that a drain that begins
	// meanwhile waits for it (see drain).
	a.claims.RLock()
	defer a.claims.RUnlock()
	if a.draining {
		return result{}, nil
	}
	if a.slotsBusy() >= int(a.opts.Slots) {
		// The controller never binds more runs than slots; this only
		// happens while a finished run's status is on its way.
		return result{RequeueAfter: 100 * time.Millisecond}, nil
	}

	violations, err := policyViolations(ctx, a.cache, run)
	if err != nil {
		return result{}, err
	}
	if len(violations) > 0 {
		return a.refuse(ctx, run, violations)
	}

	now := metav1.NewTime(a.opts.Clock.Now())
	base := run.DeepCopy()
	st := &run.Status
	st.Phase, st.StartTime, st.Reason = harnessv1.RunRunning, &now, harnessv1.ReasonRunning
	st.Message = fmt.Sprintf("the node-agent on %s started attempt %d", a.opts.NodeName, st.Attempt)
	st.ObservedGeneration = run.Generation
	if ep := a.opts.LiveEndpoint; ep != nil {
		st.LiveOutput = &harnessv1.LiveOutput{URL: ep.BaseURL + livelog.Path(run.Namespace, run.Name), CertificateSHA256: ep.CertificateSHA256}
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: harnessv1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: harnessv1.ReasonRunning, Message: st.Message, ObservedGeneration: run.Generation, LastTransitionTime: now})
	// Once sent, the claim is seen through even if the node-agent begins
	// stopping meanwhile: a claim the API server took but whose answer a
	// cancelled context dropped left the run Running with no attempt until
	// the next node-agent's sweep (TestDrainSeesAClaimThrough; seen once in
	// TestDrainLetsAnAttemptFinish under load). The drain waits for this
	// claim (the claims lock), then for its attempt, which it hands back if
	// it cannot finish.
	if ctx.Err() != nil {
		return result{}, nil
	}
	writeCtx, cancelWrite := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancelWrite()
	if err := a.client.Status().Patch(writeCtx, run, kube.MergeFromWithLock(base)); err != nil {
		if isGone(err) {
			return result{}, nil // a newer version comes through the watch
		}
		return result{}, fmt.Errorf("claiming %s: %w", keyOf(run), err)
	}
	// Its Running Event comes once the attempt has lasted (watchUnderWay):
	// a short one's terminal Event tells its whole story.

	attemptCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	r := &running{key: keyOf(run), attempt: st.Attempt, ctx: attemptCtx, cancel: cancel, last: run.DeepCopy()}
	a.mu.Lock()
	a.running[run.UID] = r
	a.mu.Unlock()
	a.wg.Add(1)
	go a.runAttempt(attemptCtx, run.DeepCopy(), r)
	go a.watchUnderWay(r)
	return result{}, nil
}

// isGone: the run changed (a newer version comes through the watch) or was
// deleted since it was read.
func isGone(err error) bool { return apierrors.IsConflict(err) || apierrors.IsNotFound(err) }
