//go:build linux

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

// A namespace's fair share is counted over every node: a run of it that
// ends on one node lets its next run go on another, one the ended run's
// node does not fit. The end's wake looked only at the runs that fit the
// ended run's node, and the other node's heartbeats only at the runs that
// wait for a slot: the run waited for something else to wake it (a
// HarnessPolicy change, the cache's resync hours later).
func TestAFreedShareReachesARunThatFitsAnotherNode(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	fairShare(t, ns, 1)
	zone := "share-zone-" + ns
	startNode(t, ns, fakenode.Options{Name: "x-" + ns, Slots: 2, Adapters: codexOnly, RunFor: -1, Labels: map[string]string{zone: "x"}})
	y := startNode(t, ns, fakenode.Options{Name: "y-" + ns, Slots: 2, Adapters: codexOnly, RunFor: -1, Labels: map[string]string{zone: "y"}})
	startController(t, ns, controllers.Options{}, nil)

	create(t, hftesting.MakeHarnessRun("holder", ns).NodeSelector(map[string]string{zone: "y"}).Obj())
	waitRun(t, ns, "holder", wait, "Running", phaseIs(harnessv1.RunRunning))
	create(t, hftesting.MakeHarnessRun("waiter", ns).NodeSelector(map[string]string{zone: "x"}).Obj())
	waitRun(t, ns, "waiter", wait, "Pending for the namespace's fair share", waitsForShare)

	if err := y.Finish(ctx, client.ObjectKey{Namespace: ns, Name: "holder"}, fakenode.Pass); err != nil {
		t.Fatal(err)
	}
	run := waitRun(t, ns, "waiter", wait, "bound", func(r *harnessv1.HarnessRun) bool { return r.Status.NodeName != "" })
	if run.Status.NodeName != "x-"+ns {
		t.Errorf("waiter bound to %q, want x-%s", run.Status.NodeName, ns)
	}
}

// A run's end frees one share of its namespace, and wakes the oldest of
// the runs waiting for it, not every one: with every waiting run that fits
// the node woken at each end, the controller reconciled each of 150 runs
// held at a share of 2 on a node of 10 slots about half the queue's depth
// times.
func TestAFreedShareWakesNotEveryWaitingRun(t *testing.T) {
	ns := newNamespace(t)
	fairShare(t, ns, 2)
	startNode(t, ns, fakenode.Options{Name: "wide-" + ns, Slots: 10, Adapters: codexOnly, RunFor: 5 * time.Millisecond, LeaseDuration: time.Minute})
	startController(t, ns, controllers.Options{}, nil)
	per := reconcilesPerQueuedRun(t, ns, 150)
	t.Logf("%.1f reconciles a run", per)
	if per > 25 {
		t.Errorf("%.1f reconciles a run for 150 runs held at a share of 2: a freed share woke every waiting run", per)
	}
}

// A run woken for a freed share that cannot take it after all (its
// fixture ConfigMap does not exist: it waits for it without holding a
// share) leaves the share to the next run waiting for one, woken at the
// next heartbeat of a node with a free slot; nothing else would wake that
// run on an otherwise idle node.
func TestARunWokenForAShareThatCannotGoLeavesItToTheNext(t *testing.T) {
	ns := newNamespace(t)
	fairShare(t, ns, 1)
	startNode(t, ns, fakenode.Options{Name: "roomy-" + ns, Slots: 3, Adapters: codexOnly, RunFor: -1, LeaseDuration: 2 * time.Second})
	startController(t, ns, controllers.Options{FixtureGrace: time.Minute}, nil)
	holdThenFree(t, ns, "Pending for the namespace's fair share", waitsForShare)
}

// A namespace relabelled out of its HarnessPolicy's selector has no share
// any more; its runs still marked as waiting for one all go once one of
// them finds that (at its namespace's next end), within a node's
// heartbeat, not one per end of a run (namespaces are not watched).
func TestRunsHeldAtAShareGoWhenThePolicyNoLongerSelectsTheirNamespace(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	fairShare(t, ns, 1)
	node := startNode(t, ns, fakenode.Options{Name: "open-" + ns, Slots: 4, Adapters: codexOnly, RunFor: -1, LeaseDuration: 2 * time.Second})
	startController(t, ns, controllers.Options{}, nil)
	create(t, hftesting.MakeHarnessRun("holder", ns).Obj())
	waitRun(t, ns, "holder", wait, "Running", phaseIs(harnessv1.RunRunning))
	for _, name := range []string{"w1", "w2", "w3"} {
		create(t, hftesting.MakeHarnessRun(name, ns).Obj())
		waitRun(t, ns, name, wait, "Pending for the namespace's fair share", waitsForShare)
	}
	labelNamespace(t, ns, nil)
	// The controller reads namespaces from its cache, a watch apart from
	// the runs': the relabel reaches it before the holder's end does.
	time.Sleep(2 * time.Second)
	if err := node.Finish(ctx, client.ObjectKey{Namespace: ns, Name: "holder"}, fakenode.Pass); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"w1", "w2", "w3"} {
		waitRun(t, ns, name, wait, "bound", func(r *harnessv1.HarnessRun) bool { return r.Status.NodeName != "" })
	}
}

// A run that ends on a node no longer Ready (here cordoned to no slots, as
// in a drain) frees its namespace's share all the same: the run held at
// that share, fitting another node, is bound at once, not at that node's
// next heartbeat (minutes apart here).
func TestAShareFreedOnANodeNotReadyWakesItsNamespace(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	fairShare(t, ns, 1)
	zone := "share-zone-" + ns
	x := startNode(t, ns, fakenode.Options{Name: "x-" + ns, Slots: 2, Adapters: codexOnly, RunFor: -1, Labels: map[string]string{zone: "x"}})
	startNode(t, ns, fakenode.Options{Name: "y-" + ns, Slots: 2, Adapters: codexOnly, RunFor: -1, LeaseDuration: 10 * time.Minute, Labels: map[string]string{zone: "y"}})
	startController(t, ns, controllers.Options{}, nil)

	create(t, hftesting.MakeHarnessRun("holder", ns).NodeSelector(map[string]string{zone: "x"}).Obj())
	waitRun(t, ns, "holder", wait, "Running", phaseIs(harnessv1.RunRunning))
	create(t, hftesting.MakeHarnessRun("waiter", ns).NodeSelector(map[string]string{zone: "y"}).Obj())
	waitRun(t, ns, "waiter", wait, "Pending for the namespace's fair share", waitsForShare)

	if err := x.SetSlots(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := x.Finish(ctx, client.ObjectKey{Namespace: ns, Name: "holder"}, fakenode.Pass); err != nil {
		t.Fatal(err)
	}
	run := waitRun(t, ns, "waiter", 10*time.Second, "bound", func(r *harnessv1.HarnessRun) bool { return r.Status.NodeName != "" })
	if run.Status.NodeName != "y-"+ns {
		t.Errorf("waiter bound to %q, want y-%s", run.Status.NodeName, ns)
	}
}
