//go:build linux

package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
)

// A run's end frees one slot, and wakes the oldest of the runs waiting
// only for a slot, as many as the node has free, not every one of them:
// with every waiting run woken at each end, the controller reconciled
// each of 300 runs queued on a node of two slots 124 times on average
// (9 with the bounded wake).
func TestAFreedSlotWakesNotEveryWaitingRun(t *testing.T) {
	ns := newNamespace(t)
	startNode(t, ns, fakenode.Options{Name: "narrow", Slots: 2, Adapters: codexOnly, RunFor: 5 * time.Millisecond, LeaseDuration: time.Minute})
	startController(t, ns, controllers.Options{}, nil)
	// Each run is reconciled a few times of its own (created, bound,
	// claimed, ended, its finalizer); a wake of every waiting run at each
	// end would add about half the queue's depth to each.
	if per := reconcilesPerQueuedRun(t, ns, 150); per > 25 {
		t.Errorf("%.1f reconciles a run for 150 runs queued on two slots: a freed slot woke every waiting run", per)
	}
}

// A woken run that cannot take the freed slot after all (its fixture
// ConfigMap does not exist: it waits for it without holding a slot) leaves
// the slot to the next run waiting for one, woken at the node's next
// heartbeat; nothing else would wake that run on an otherwise idle node.
func TestAWokenRunThatCannotGoLeavesTheSlotToTheNext(t *testing.T) {
	ns := newNamespace(t)
	startNode(t, ns, fakenode.Options{Name: "single", Slots: 1, Adapters: codexOnly, RunFor: -1, LeaseDuration: 2 * time.Second})
	startController(t, ns, controllers.Options{FixtureGrace: time.Minute}, nil)
	run := holdThenFree(t, ns, "Pending, the node full", func(r *harnessv1.HarnessRun) bool {
		c := meta.FindStatusCondition(r.Status.Conditions, harnessv1.ConditionScheduled)
		return r.Status.Phase == harnessv1.RunPending && c != nil && strings.Contains(c.Message, "full")
	})
	if run.Status.NodeName != "single" {
		t.Errorf("younger bound to %q, want single", run.Status.NodeName)
	}
}

// holdThenFree runs the liveness tests of the bounded wakes, on a node and
// a controller started in ns: a holder runs; an older run whose fixture is
// a ConfigMap never made, and a younger one, wait (waiting says for what:
// the fixture is looked for only once a slot is held); the holder ends.
// The older run is woken first and cannot go (it waits for its fixture
// without holding a slot or a share); the younger must be bound. It
// returns the younger run, bound, and fails if the older one is not
// Pending and unbound (it waits for its fixture, or again for what the
// younger now holds).
func holdThenFree(t *testing.T, ns, what string, waiting func(*harnessv1.HarnessRun) bool) *harnessv1.HarnessRun {
	t.Helper()
	create(t, hftesting.MakeHarnessRun("holder", ns).Obj())
	waitRun(t, ns, "holder", wait, "Running", phaseIs(harnessv1.RunRunning))
	older := hftesting.MakeHarnessRun("older", ns).Obj()
	older.Spec.Fixture = harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "never-made"}}
	create(t, older)
	waitRun(t, ns, "older", wait, what, waiting)
	create(t, hftesting.MakeHarnessRun("younger", ns).Obj())
	waitRun(t, ns, "younger", wait, what, waiting)

	cancelRun(t, ns, "holder")
	waitRun(t, ns, "holder", wait, "Failed", phaseIs(harnessv1.RunFailed))
	run := waitRun(t, ns, "younger", wait, "bound", func(r *harnessv1.HarnessRun) bool { return r.Status.NodeName != "" })
	if older := getRun(t, ns, "older"); older.Status.Phase != harnessv1.RunPending || older.Status.NodeName != "" {
		t.Errorf("the run without its fixture: phase %q, node %q; want Pending, unbound", older.Status.Phase, older.Status.NodeName)
	}
	return run
}

// reconcilesPerQueuedRun runs one run in ns to its end (the controller and
// the node warm), then queues runs more at once and returns the
// harnessrun controller's reconciles per queued run until every one has
// succeeded.
func reconcilesPerQueuedRun(t *testing.T, ns string, runs int) float64 {
	t.Helper()
	create(t, hftesting.MakeHarnessRun("first", ns).Obj())
	waitRun(t, ns, "first", wait, "Succeeded", phaseIs(harnessv1.RunSucceeded))
	before, _ := reconcileTime(t, "harnessrun")
	createRuns(t, ns, "q", runs, nil)
	waitSucceeded(t, ns, runs+1)
	after, _ := reconcileTime(t, "harnessrun")
	return float64(after-before) / float64(runs)
}

// waitSucceeded waits until n runs of ns have succeeded.
func waitSucceeded(t *testing.T, ns string, n int) {
	t.Helper()
	eventually(t, 2*time.Minute, func() error {
		list := &harnessv1.HarnessRunList{}
		if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		done := 0
		for _, r := range list.Items {
			if r.Status.Phase == harnessv1.RunSucceeded {
				done++
			}
		}
		if done != n {
			return fmt.Errorf("%d of %d runs succeeded", done, n)
		}
		return nil
	})
}
