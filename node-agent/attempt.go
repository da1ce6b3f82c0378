package nodeagent

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
)

// writeOutcomeFor bounds how long an attempt's outcome is tried to be
// written (the evidence, then the terminal status): past it the API server
// has been away longer than any run's deadline, and the controller has
// ended the run.
const writeOutcomeFor = 10 * time.Minute

// runAttempt has the executor carry out the claimed attempt and writes its
// outcome, whatever happens.
func (a *Agent) runAttempt(ctx context.Context, run *harnessv1.HarnessRun, r *running) {
	defer a.wg.Done()
	defer func() {
		r.cancel(nil)
		a.mu.Lock()
		delete(a.running, run.UID)
		idle := len(a.running) == 0
		a.mu.Unlock()
		if idle {
			a.idle.settle()
		}
	}()
	logger := log.FromContext(ctx).WithValues("run", r.key, "attempt", r.attempt)
	ctx = log.IntoContext(ctx, logger)

	out := a.outcome(ctx, run)
	// The executor cleans up behind (executor.Options.CleanBehind) while
	// the evidence is written; the slot is free only once it is done.
	defer out.WaitCleaned()
	a.mu.Lock()
	r.finishing = true
	handedBack := r.handedBack
	a.mu.Unlock()
	// The outcome must be written even when the run was cancelled; give it
	// its own bounded context, long enough to see the API server through
	// a restart or a webhook's outage (finish retries until it ends).
	writeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeOutcomeFor)
	defer cancel()
	if handedBack {
		// Stopped by the drain: whatever the agent did before it was
		// killed is not judged, and no evidence is written for it,
		// unless the run was cancelled or deleted meanwhile (below).
		out.WaitCleaned()
		stop, err := a.handBack(writeCtx, run)
		if err != nil {
			logger.Error(err, "handing back the attempt failed; the next node-agent reports it as orphaned")
		}
		if stop == nil {
			return
		}
		// Cancelled or deleted meanwhile: the run ends as that stop, as
		// if it had stopped the agent itself (the executor judged the
		// hand-back's stop just as it would have judged this one).
		if out.Status.Reason == harnessv1.ReasonHandedBack {
			out.Status.Reason = stop.Reason
			out.Status.Message = fmt.Sprintf("%s; the node-agent, shutting down, had stopped the agent to hand the attempt back (%s)",
				stop.Message, out.Status.Message)
		}
	}
	if err := a.finish(writeCtx, run, r, out); err != nil {
		logger.Error(err, "writing the outcome failed")
	}
}

// outcome has the executor carry out the attempt, and turns a panicking
// executor into an infrastructure failure instead of a run stuck Running.
func (a *Agent) outcome(ctx context.Context, run *harnessv1.HarnessRun) (res *executor.Outcome) {
	defer func() {
		if p := recover(); p != nil {
			log.FromContext(ctx).Error(fmt.Errorf("%v", p), "the executor panicked")
			res = &executor.Outcome{Status: harnessv1.HarnessRunStatus{Phase: harnessv1.RunFailed, Verdict: harnessv1.VerdictError,
				FailureClass: harnessv1.FailureInfrastructure, Reason: harnessv1.ReasonExecutorPanic,
				Message: fmt.Sprintf("the node-agent failed while executing the run: %v", p)}}
		}
	}()
	res = a.opts.Executor.Execute(ctx, run)
	if res == nil {
		res = &executor.Outcome{Status: harnessv1.HarnessRunStatus{Phase: harnessv1.RunFailed, Verdict: harnessv1.VerdictError,
			FailureClass: harnessv1.FailureInfrastructure, Reason: harnessv1.ReasonExecutorPanic, Message: "the executor returned no result"}}
	}
	return res
}
