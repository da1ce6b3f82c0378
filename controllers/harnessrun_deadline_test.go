package controllers_test

import (
	"strings"
	"testing"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
)

func TestDeadline(t *testing.T) {
	ns := newNamespace(t)
	startController(t, ns, controllers.Options{DeadlineGrace: time.Second}, nil)
	// A hung agent: the node-agent heartbeats but the run never ends.
	startNode(t, ns, fakenode.Options{Name: "hung", Slots: 1, Adapters: codexOnly, RunFor: -1, LeaseDuration: 30 * time.Second,
		Labels: map[string]string{"kind": "hung"}})
	// A node-agent that claims the run and then is gone (its Lease is still
	// fresh for a while): the controller still ends the run on time.
	gone := startNode(t, ns, fakenode.Options{Name: "gone", Slots: 1, Adapters: codexOnly, RunFor: -1, LeaseDuration: 30 * time.Second,
		Labels: map[string]string{"kind": "gone"}})

	create(t,
		hftesting.MakeHarnessRun("overrun", ns).EpisodeSeconds(1).Retries(2).NodeSelector(map[string]string{"kind": "hung"}).Obj(),
		hftesting.MakeHarnessRun("abandoned", ns).EpisodeSeconds(1).Retries(2).NodeSelector(map[string]string{"kind": "gone"}).Obj())
	waitRun(t, ns, "abandoned", wait, "Running", phaseIs(harnessv1.RunRunning))
	gone.Stop()

	for _, name := range []string{"overrun", "abandoned"} {
		run := waitRun(t, ns, name, wait, "Failed", phaseIs(harnessv1.RunFailed))
		if run.Status.Reason != harnessv1.ReasonDeadlineExceeded || run.Status.FailureClass != harnessv1.FailureTimeout ||
			run.Status.Verdict != harnessv1.VerdictError || run.Status.Attempt != 1 {
			t.Errorf("run %s: reason %q class %q verdict %q attempt %d, want DeadlineExceeded, Timeout, Error, 1 (timeouts are not retried)",
				name, run.Status.Reason, run.Status.FailureClass, run.Status.Verdict, run.Status.Attempt)
		}
		if !strings.Contains(run.Status.Message, "limits.episodeSeconds (1s)") {
			t.Errorf("run %s: message %q should name limits.episodeSeconds", name, run.Status.Message)
		}
		// Not before start + episodeSeconds + grace.
		if got := run.Status.CompletionTime.Sub(run.Status.StartTime.Time); got < 2*time.Second-time.Millisecond {
			t.Errorf("run %s ended %s after its start, before episodeSeconds + grace (2s)", name, got)
		}
	}
}
