package testenv

import (
	"context"
	"slices"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// FinishedRunEvents lists the Events in run's namespace once the
// node-agent has posted those of the run's end. It posts them after the
// terminal status, and client-go's events/v1 recorder sends each on a
// goroutine of its own: a run can be seen finished before its Events are
// there, in any order. So it waits for the Event about run named for its
// final phase, then until a listing adds nothing (at most 15 s, then it
// fails). A test that looks for a secret in Events would otherwise pass
// for want of them.
func FinishedRunEvents(t testing.TB, c client.Client, run *harnessv1.HarnessRun) []eventsv1.Event {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	seen := -1
	for {
		var events eventsv1.EventList
		if err := c.List(context.Background(), &events, client.InNamespace(run.Namespace)); err != nil {
			t.Fatal(err)
		}
		final := slices.ContainsFunc(events.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Name == run.Name && e.Reason == string(run.Status.Phase)
		})
		switch {
		case final && len(events.Items) == seen:
			return events.Items
		case time.Now().After(deadline):
			t.Fatalf("HarnessRun %s/%s ended %s, but no Event says so within 15 s", run.Namespace, run.Name, run.Status.Phase)
		case final:
			seen = len(events.Items)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
