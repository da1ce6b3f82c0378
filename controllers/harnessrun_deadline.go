package controllers

import (
	"context"
	"fmt"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// defaultEpisodeSeconds is the schema default of limits.episodeSeconds, for a
// run stored before the default existed.
const defaultEpisodeSeconds = 360

// runDeadline is when a running run must have finished: its start, plus
// limits.episodeSeconds, plus the grace the node-agent gets to kill the agent
// and report. ok is false for a run not started yet.
func runDeadline(run *harnessv1.HarnessRun, grace time.Duration) (deadline time.Time, ok bool) {
	if run.Status.StartTime == nil {
		return time.Time{}, false
	}
	episode := run.Spec.Limits.EpisodeSeconds
	if episode <= 0 {
		episode = defaultEpisodeSeconds
	}
	return run.Status.StartTime.Add(time.Duration(episode)*time.Second + grace), true
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
	episode := time.Duration(run.Spec.Limits.EpisodeSeconds) * time.Second
	if episode <= 0 {
		episode = defaultEpisodeSeconds * time.Second
	}
	msg := fmt.Sprintf("the run did not finish within limits.episodeSeconds (%s) plus the controller's grace (%s) after it started at %s",
		episode, r.opts.DeadlineGrace, run.Status.StartTime.UTC().Format(time.RFC3339))
	p.fail(harnessv1.ReasonDeadlineExceeded, msg, harnessv1.VerdictError, harnessv1.FailureTimeout)
	return nil
}
