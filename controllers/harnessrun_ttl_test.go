package controllers_test

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
)

func TestTTLAfterFinished(t *testing.T) {
	ns := newNamespace(t)
	startController(t, ns, controllers.Options{}, nil)
	startNode(t, ns, fakenode.Options{Name: "quick", Slots: 2, Adapters: codexOnly})
	create(t,
		hftesting.MakeHarnessRun("ephemeral", ns).TTL(1).Obj(),
		hftesting.MakeHarnessRun("kept", ns).Obj())
	waitRun(t, ns, "kept", wait, "Succeeded", phaseIs(harnessv1.RunSucceeded))
	waitGone(t, ns, "ephemeral")
	// The deletion came no earlier than the TTL after the run finished:
	// its node-agent's last Event is at least a second before now.
	evs := runEvents(t, ns, "ephemeral")
	if len(evs) == 0 || evs[len(evs)-1].Reason != "Succeeded" {
		t.Fatalf("Events of the deleted run: %v, want it to have Succeeded", eventReasons(evs))
	}
	if age := time.Since(evs[len(evs)-1].EventTime.Time); age < time.Second-50*time.Millisecond {
		t.Errorf("run deleted %s after it finished, before its TTL of 1s", age)
	}

	// A run without a TTL stays; setting one later (allowed after
	// creation) deletes it.
	time.Sleep(1500 * time.Millisecond)
	kept := getRun(t, ns, "kept")
	base := kept.DeepCopy()
	zero := int32(0)
	kept.Spec.TTLSecondsAfterFinished = &zero
	if err := k8s.Patch(context.Background(), kept, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "kept")
}
