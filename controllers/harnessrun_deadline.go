package controllers

import (
	"context"
	"fmt"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// episodeBound is the longest the run's episode may be, as the controller
// knows it: the episodeSeconds its node-agent resolved (status.limits), else
// the run's own. Before the node-agent has read the fixture, a run that sets
// none may get any episode its fixture asks for, so the bound is the
// strictest HarnessPolicy ceiling, else the schema's maximum.
func episodeBound(run *harnessv1.HarnessRun) time.Duration {
	episode := run.Spec.Limits.EpisodeSeconds
	switch c := run.Status.LimitCeilings; {
	case run.Status.Limits != nil && run.Status.Limits.EpisodeSeconds > 0:
		episode = run.Status.Limits.EpisodeSeconds
	case episode > 0:
	case c != nil && c.MaxEpisodeSeconds != nil:
		episode = *c.MaxEpisodeSeconds
	default:
		episode = harnessv1.MaxEpisodeSeconds
	}
	return time.Duration(episode) * time.Second
}

// checksBound is the longest the run's checks may take after its agent, as
// the controller knows it: each of the status.plannedChecks within the
// limits.probeSeconds its node-agent resolved. Before they are written it
// is nothing; the episode's bound is the schema's or a ceiling's then.
// Without it, a run whose agent used most of its episode and whose checks
// took more than the grace was ended DeadlineExceeded, class Timeout, its
// checks cut off, though every step stayed within its limit.
func checksBound(run *harnessv1.HarnessRun) time.Duration {
	if run.Status.Limits == nil {
		return 0
	}
	return time.Duration(run.Status.PlannedChecks) * time.Duration(run.Status.Limits.ProbeSeconds) * time.Second
}

// runDeadline is when a running run must have finished: its start, plus its
// episode's bound and its checks', plus the grace the node-agent gets to
// set up, kill the agent and report. ok is false for a run not started
// yet.
func runDeadline(run *harnessv1.HarnessRun, grace time.Duration) (deadline time.Time, ok bool) {
	if run.Status.StartTime == nil {
		return time.Time{}, false
	}
	return run.Status.StartTime.Add(episodeBound(run) + checksBound(run) + grace), true
}

// reconcileDeadline ends a Running run that overran its deadline with class
// Timeout, whether or not its node-agent still reports: the controller, not
// the node-agent, guarantees that every run ends. Before the deadline it asks
// to be called again at the deadline.
func (r *HarnessRunReconciler) reconcileDeadline(ctx context.Context, p *pass) error {
	run := p.run
	if run.Status.Phase != harnessv1.RunRunning {
		return nil
	}
	deadline, ok := runDeadline(run, r.opts.DeadlineGrace)
	if !ok {
		return nil
	}
	if left := deadline.Sub(p.now.Time); left > 0 {
		p.requeue(left)
		return nil
	}
	// A node lost before the deadline is the real cause; node loss says so.
	if h := r.nodeHealthOf(ctx, run.Status.NodeName); h.lost && h.lostAt.Before(deadline) {
		return nil
	}
	episode, checks := episodeBound(run), ""
	if n := run.Status.PlannedChecks; n > 0 && run.Status.Limits != nil {
		checks = fmt.Sprintf(", its %d checks' limits.probeSeconds (%s each)", n, time.Duration(run.Status.Limits.ProbeSeconds)*time.Second)
	}
	msg := fmt.Sprintf("the run did not finish within limits.episodeSeconds (%s)%s plus the controller's grace (%s) after it started at %s",
		episode, checks, r.opts.DeadlineGrace, run.Status.StartTime.UTC().Format(time.RFC3339))
	p.fail(harnessv1.ReasonDeadlineExceeded, msg, harnessv1.VerdictError, harnessv1.FailureTimeout)
	return nil
}
