package controllers

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// The deadline arithmetic with an injected clock: before the deadline the
// step asks to be called at the deadline; at it, the run fails with class
// Timeout. (The envtest TestDeadline covers the same against the API.)
func TestReconcileDeadlineWithFakeClock(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name        string
		phase       harnessv1.RunPhase
		episode     int32
		resolved    int32 // status.limits.episodeSeconds
		checks      int32 // status.plannedChecks, each within status.limits.probeSeconds (20 s)
		ceiling     int32 // status.limitCeilings.maxEpisodeSeconds
		elapsed     time.Duration
		wantFailed  bool
		wantRequeue time.Duration
	}{
		{name: "just started", phase: harnessv1.RunRunning, episode: 360, elapsed: 0, wantRequeue: 390 * time.Second},
		{name: "inside the grace", phase: harnessv1.RunRunning, episode: 360, elapsed: 370 * time.Second, wantRequeue: 20 * time.Second},
		{name: "at the deadline", phase: harnessv1.RunRunning, episode: 360, elapsed: 390 * time.Second, wantFailed: true},
		// A run that sets no episode gets its fixture's, which only the
		// node-agent knows: until it says (status.limits), the bound is the
		// strictest ceiling, else the schema's maximum.
		{name: "episode unset", phase: harnessv1.RunRunning, episode: 0, elapsed: 389 * time.Second, wantRequeue: 86400*time.Second + 30*time.Second - 389*time.Second},
		{name: "episode unset under a ceiling", phase: harnessv1.RunRunning, ceiling: 300, elapsed: 320 * time.Second, wantRequeue: 10 * time.Second},
		{name: "episode the node-agent resolved", phase: harnessv1.RunRunning, resolved: 60, ceiling: 300, elapsed: 89 * time.Second, wantRequeue: time.Second},
		{name: "past the resolved episode", phase: harnessv1.RunRunning, resolved: 60, elapsed: 90 * time.Second, wantFailed: true},
		// Checks run after the agent, each within probeSeconds: three of
		// 20 s after an episode of 60 s.
		{name: "checks after the episode", phase: harnessv1.RunRunning, resolved: 60, checks: 3, elapsed: 120 * time.Second, wantRequeue: 30 * time.Second},
		{name: "past the checks' bound", phase: harnessv1.RunRunning, resolved: 60, checks: 3, elapsed: 150 * time.Second, wantFailed: true},
		{name: "scheduled runs have no deadline yet", phase: harnessv1.RunScheduled, episode: 1, elapsed: time.Hour},
	}
	scheme := runtime.NewScheme()
	if err := harnessv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(start.Add(tc.elapsed))
			r := &HarnessRunReconciler{clock: clk, opts: Options{DeadlineGrace: 30 * time.Second}.Default(), client: nil}
			run := &harnessv1.HarnessRun{}
			run.Spec.Limits.EpisodeSeconds = tc.episode
			if tc.resolved > 0 {
				run.Status.Limits = &harnessv1.Limits{EpisodeSeconds: tc.resolved, ProbeSeconds: 20}
			}
			run.Status.PlannedChecks = tc.checks
			if tc.ceiling > 0 {
				run.Status.LimitCeilings = &harnessv1.LimitCeilings{PolicyLimits: harnessv1.PolicyLimits{MaxEpisodeSeconds: &tc.ceiling}}
			}
			run.Status.Phase = tc.phase
			if tc.phase == harnessv1.RunRunning {
				run.Status.StartTime = &metav1.Time{Time: start}
			}
			p := &pass{run: run, orig: run.DeepCopy(), now: metav1.NewTime(clk.Now())}
			r.client = fake.NewClientBuilder().WithScheme(scheme).Build()
			if err := r.reconcileDeadline(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			if failed := run.Status.Phase == harnessv1.RunFailed; failed != tc.wantFailed {
				t.Fatalf("failed = %v, want %v", failed, tc.wantFailed)
			}
			if tc.wantFailed && (run.Status.FailureClass != harnessv1.FailureTimeout || run.Status.Reason != harnessv1.ReasonDeadlineExceeded) {
				t.Errorf("class %q reason %q, want Timeout, DeadlineExceeded", run.Status.FailureClass, run.Status.Reason)
			}
			if p.requeueAfter != tc.wantRequeue {
				t.Errorf("requeueAfter = %s, want %s", p.requeueAfter, tc.wantRequeue)
			}
		})
	}
}
