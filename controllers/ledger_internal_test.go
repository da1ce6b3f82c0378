package controllers

import (
	"slices"
	"strings"
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
	reasons := map[types.NamespacedName]string{}
	for _, w := range l.waitingRuns() {
		reasons[w.key] = w.reason
	}
	if reasons[key("share")] != PendingFairShare || reasons[key("c")] != PendingFull {
		t.Errorf("waiting runs' reasons %v: the fair-share run or c waits for something else", reasons)
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

// wakeForShare wakes, in each namespace whose fair share has room by the
// ledger's count (its runs on nodes, reserved, and woken not dispatched
// yet), its oldest runs waiting for it, as many as there is room for; none
// of a namespace at its share.
func TestWakeForShareWakesTheOldestOfANamespaceWithRoom(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	l := newBindingLedger(clk, time.Minute)
	key := func(ns, n string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: n} }
	waiting := func(ns, n string, reason string) {
		l.observe(&harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}})
		l.setPending(key(ns, n), reason)
		clk.SetTime(clk.Now().Add(time.Second))
	}
	bound := func(ns, n, node string) {
		l.observe(&harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n},
			Status: harnessv1.HarnessRunStatus{Phase: harnessv1.RunRunning, NodeName: node}})
	}
	// share: a reserve of a run of ns under a share of limit, refused
	// while the namespace is at it, as dispatch makes them.
	share := func(ns string, limit int32) {
		if chosen, _, _, _ := l.reserve(key(ns, "probe"), []nodeView{{name: "big", slots: 100}}, limit); chosen != nil {
			l.release(key(ns, "probe"), chosen.name)
		}
	}
	// a: share 2, both on nodes; b: share 1, on a node.
	bound("a", "on1", "n")
	bound("a", "on2", "m")
	bound("b", "on", "n")
	share("a", 2)
	share("b", 1)
	waiting("a", "3", PendingFairShare)
	waiting("b", "2", PendingFairShare)
	waiting("a", "1", PendingFairShare)
	waiting("a", "2", PendingFairShare)
	waiting("a", "slot", PendingFull)
	all := []types.NamespacedName{key("a", "1"), key("a", "2"), key("a", "3"), key("a", "slot"), key("b", "2")}
	if got := l.wakeForShare(all); got != nil {
		t.Fatalf("every namespace at its share: woke %v", got)
	}
	// One of a's ends: its oldest run waiting for the share, not b's.
	bound("a", "on1", "")
	if got := l.wakeForShare(all); !slices.Equal(got, []types.NamespacedName{key("a", "3")}) {
		t.Fatalf("a's share freed by one: woke %v, want a/3", got)
	}
	// Woken and not dispatched: it holds the room it was woken for.
	if got := l.wakeForShare(all); got != nil {
		t.Fatalf("a/3 woken, not dispatched: woke %v", got)
	}
	// Dispatched without going (say its fixture is missing): the room
	// is free again, and a/3 still the oldest.
	l.dispatched(key("a", "3"))
	if got := l.wakeForShare(all); !slices.Equal(got, []types.NamespacedName{key("a", "3")}) {
		t.Fatalf("a/3 dispatched, still waiting: woke %v, want a/3", got)
	}
	// A raised share (found by a dispatch) and a second end: two rooms,
	// the next two oldest; b's end wakes b's.
	l.dispatched(key("a", "3"))
	share("a", 3)
	bound("b", "on", "")
	got := l.wakeForShare(all)
	slices.SortFunc(got, func(x, y types.NamespacedName) int { return strings.Compare(x.String(), y.String()) })
	if want := []types.NamespacedName{key("a", "1"), key("a", "3"), key("b", "2")}; !slices.Equal(got, want) {
		t.Fatalf("a with two rooms, b with one: woke %v, want %v", got, want)
	}
	// A run reserved by this controller, not in the cache yet, holds a room.
	l.dispatched(key("a", "1"))
	l.dispatched(key("a", "3"))
	if chosen, _, _, _ := l.reserve(key("a", "1"), []nodeView{{name: "n", slots: 5}}, 3); chosen == nil {
		t.Fatal("a/1 could not be reserved")
	}
	if got := l.wakeForShare(all); !slices.Equal(got, []types.NamespacedName{key("a", "3")}) {
		t.Fatalf("a/1 reserved: woke %v, want a/3 alone", got)
	}
	// b's last reserve found no share (its policy gone, or no longer
	// selecting it): every run of b still marked as waiting for one goes.
	waiting("b", "3", PendingFairShare)
	l.dispatched(key("b", "2"))
	bound("b", "on", "n")
	share("b", 0)
	got = l.wakeForShare(append(all, key("b", "3")))
	if want := []types.NamespacedName{key("b", "2"), key("b", "3")}; !slices.Equal(got, want) {
		t.Fatalf("b without a share: woke %v, want %v", got, want)
	}
}

// The wakes look through the runs the ledger last saw Pending (a run
// without a phase reads as Pending, one being deleted too), the object
// each event brought, with why it waits; never a run that left Pending or
// was forgotten.
func TestWaitingRunsAreThoseLastSeenPending(t *testing.T) {
	l := newBindingLedger(clocktesting.NewFakePassiveClock(time.Unix(1000, 0)), time.Minute)
	run := func(n string, phase harnessv1.RunPhase) *harnessv1.HarnessRun {
		return &harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: n}, Status: harnessv1.HarnessRunStatus{Phase: phase}}
	}
	key := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: n} }
	seen := func() map[string]waitingRun {
		out := map[string]waitingRun{}
		for _, w := range l.waitingRuns() {
			if w.key != key(w.run.Name) {
				t.Fatalf("%v holds the run %s", w.key, w.run.Name)
			}
			out[w.key.Name] = w
		}
		return out
	}
	fresh, pending, deleting := run("fresh", ""), run("pending", harnessv1.RunPending), run("deleting", harnessv1.RunPending)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1000, 0)}
	for _, r := range []*harnessv1.HarnessRun{fresh, pending, deleting, run("running", harnessv1.RunRunning), run("done", harnessv1.RunSucceeded)} {
		l.observe(r)
	}
	l.setPending(key("pending"), PendingFull)
	got := seen()
	if len(got) != 3 || got["fresh"].run != fresh || got["pending"].run != pending || got["deleting"].run != deleting ||
		got["pending"].reason != PendingFull || got["fresh"].reason != "" {
		t.Fatalf("waiting runs %v; want fresh, pending (Full) and deleting, as observed", got)
	}
	// A newer version replaces the older; a run bound leaves; a run
	// forgotten leaves.
	newer := run("fresh", harnessv1.RunPending)
	l.observe(newer)
	l.observe(run("pending", harnessv1.RunScheduled))
	l.forget(key("deleting"))
	if got := seen(); len(got) != 1 || got["fresh"].run != newer {
		t.Fatalf("after an update, a binding and a deletion: %v; want fresh's newer version alone", got)
	}
}
