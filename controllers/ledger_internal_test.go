package controllers

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// A freed slot wakes, of the runs waiting only for a slot, the oldest
// ones, as many as the node has free slots, each once until its next
// dispatch; runs that wait for anything else are not its to pick.
func TestWakeOldestPicksTheOldestRunsWaitingForASlot(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	l := newBindingLedger(clk, time.Minute)
	key := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: n} }
	waiting := func(n string, reason string) {
		l.observe(&harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: n}})
		l.setPending(key(n), reason)
		clk.SetTime(clk.Now().Add(time.Second))
	}
	bound := func(n, node string) {
		l.observe(&harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: n},
			Status: harnessv1.HarnessRunStatus{Phase: harnessv1.RunRunning, NodeName: node}})
	}
	// In the order they were first seen waiting: c, a, share, b, d.
	waiting("c", PendingFull)
	waiting("a", PendingFull)
	waiting("share", PendingFairShare)
	waiting("b", PendingFull)
	waiting("d", PendingFull)
	all := []types.NamespacedName{key("a"), key("b"), key("c"), key("d"), key("share")}

	// A node of 3 slots running 2 runs: one slot free, the oldest woken.
	bound("x", "n")
	bound("y", "n")
	if got := l.wakeOldest("n", 3, 1, all); !slices.Equal(got, []types.NamespacedName{key("c")}) {
		t.Fatalf("one free slot woke %v, want the oldest, c", got)
	}
	// Woken and not dispatched since: a second slot freeing wakes the next.
	bound("y", "")
	if got := l.wakeOldest("n", 3, 1, all); !slices.Equal(got, []types.NamespacedName{key("a"), key("b")}) {
		t.Fatalf("two free slots, c woken already, woke %v; want a and b", got)
	}
	// The node full by the ledger's count, a slot the caller saw free.
	bound("z", "n")
	bound("w", "n")
	if got := l.wakeOldest("n", 3, 1, all); !slices.Equal(got, []types.NamespacedName{key("d")}) {
		t.Fatalf("at least one: woke %v, want d", got)
	}
	if got := l.wakeOldest("n", 3, 0, all); got != nil {
		t.Fatalf("no free slot and none seen: woke %v", got)
	}
	// Dispatched again (c still waits for a slot): it can be woken again;
	// one bound or gone is never picked.
	l.dispatched(key("c"))
	bound("a", "n2")
	l.forget(key("b"))
	bound("z", "")
	bound("w", "")
	if got := l.wakeOldest("n", 3, 0, all); !slices.Equal(got, []types.NamespacedName{key("c")}) {
		t.Fatalf("after c's dispatch, a bound and b gone, woke %v; want c alone (d not dispatched since)", got)
	}
	if l.waitsForSlot(key("share")) || !l.waitsForSlot(key("c")) {
		t.Error("waitsForSlot: the fair-share run counted as waiting for a slot, or c not")
	}
	// Bound by this controller, the cache not showing it yet: it waits for
	// nothing, and a slot freeing before the cache catches up wakes the
	// run behind it, not it again.
	l.dispatched(key("c"))
	l.dispatched(key("d"))
	if chosen, _, _, _ := l.reserve(key("c"), []nodeView{{name: "n3", slots: 1}}, 0); chosen == nil {
		t.Fatal("c could not be reserved a slot on an empty node")
	}
	if got := l.wakeOldest("n", 3, 1, all); !slices.Equal(got, []types.NamespacedName{key("d")}) {
		t.Fatalf("c reserved on n3, woke %v; want d", got)
	}
}
