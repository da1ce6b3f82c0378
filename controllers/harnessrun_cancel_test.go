package controllers_test

import (
	"context"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
)

func cancelRun(t *testing.T, ns, name string) {
	t.Helper()
	run := getRun(t, ns, name)
	base := run.DeepCopy()
	run.Spec.Cancel = true
	if err := k8s.Patch(context.Background(), run, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

func deleteRun(t *testing.T, ns, name string) {
	t.Helper()
	if err := k8s.Delete(context.Background(), getRun(t, ns, name)); err != nil {
		t.Fatal(err)
	}
}

func waitGone(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, wait, func() error {
		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &harnessv1.HarnessRun{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return &reasonsError{got: []string{"still there"}, want: []string{"gone"}}
	})
}

func TestCancelAndDelete(t *testing.T) {
	ns := newNamespace(t)
	// codex runs go Running and stay there until stopped; aider runs are
	// bound to a node-agent that never claims them.
	startNode(t, ns, fakenode.Options{Name: "busy", Slots: 4, Adapters: codexOnly, RunFor: -1})
	startNode(t, ns, fakenode.Options{Name: "idle", Slots: 4, NoClaim: true, Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterAider: "0.80"}})
	startController(t, ns, controllers.Options{}, nil)
	mk := hftesting.MakeHarnessRun
	create(t,
		mk("cancel-pending", ns).Adapter(harnessv1.AdapterGemini).Obj(), // no node has gemini
		mk("cancel-running", ns).Obj(),
		mk("delete-running", ns).Obj(),
		mk("delete-scheduled", ns).Adapter(harnessv1.AdapterAider).Obj())
	waitRun(t, ns, "cancel-pending", wait, "Pending", phaseIs(harnessv1.RunPending))
	waitRun(t, ns, "cancel-running", wait, "Running", phaseIs(harnessv1.RunRunning))
	waitRun(t, ns, "delete-running", wait, "Running", phaseIs(harnessv1.RunRunning))
	waitRun(t, ns, "delete-scheduled", wait, "Scheduled", phaseIs(harnessv1.RunScheduled))

	// Never claimed: the controller ends it.
	cancelRun(t, ns, "cancel-pending")
	run := waitRun(t, ns, "cancel-pending", wait, "Failed without finalizer", func(r *harnessv1.HarnessRun) bool {
		return r.Status.Phase == harnessv1.RunFailed && len(r.Finalizers) == 0
	})
	if run.Status.Reason != harnessv1.ReasonCancelled || run.Status.Verdict != "" ||
		!meta.IsStatusConditionTrue(run.Status.Conditions, harnessv1.ConditionStopRequested) {
		t.Errorf("cancelled pending run: reason %q verdict %q conditions %+v; want Cancelled, no verdict, StopRequested", run.Status.Reason, run.Status.Verdict, run.Status.Conditions)
	}

	// Running: the controller asks, the node-agent stops it and reports.
	cancelRun(t, ns, "cancel-running")
	run = waitRun(t, ns, "cancel-running", wait, "Failed without finalizer", func(r *harnessv1.HarnessRun) bool {
		return r.Status.Phase == harnessv1.RunFailed && len(r.Finalizers) == 0
	})
	stop := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionStopRequested)
	ready := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionReady)
	if run.Status.Reason != harnessv1.ReasonCancelled || stop == nil || stop.Reason != harnessv1.ReasonCancelled ||
		ready == nil || ready.Reason != harnessv1.ReasonStopped {
		t.Errorf("cancelled running run: reason %q StopRequested %+v Ready %+v; want Cancelled, StopRequested/Cancelled, Ready/Stopped", run.Status.Reason, stop, ready)
	}
	eventually(t, wait, func() error {
		return wantReasons(runEvents(t, ns, "cancel-running"), "Scheduled", "Running", harnessv1.ConditionStopRequested, "Failed")
	})

	// Deleting a running run: it stays until its node-agent let go of it.
	deleteRun(t, ns, "delete-running")
	waitGone(t, ns, "delete-running")
	evs := runEvents(t, ns, "delete-running")
	if reasons := eventReasons(evs); !slices.Contains(reasons, harnessv1.ConditionStopRequested) || !slices.Contains(reasons, "Failed") {
		t.Errorf("a deleted running run went away without being stopped by its node-agent: Events %v", reasons)
	}

	// Deleting a bound but unclaimed run: the controller ends it at once.
	deleteRun(t, ns, "delete-scheduled")
	waitGone(t, ns, "delete-scheduled")
	eventually(t, 5*time.Second, func() error {
		return wantReasons(runEvents(t, ns, "delete-scheduled"), "Scheduled", harnessv1.ReasonDeleted)
	})
}
