package controllers

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// The ledger's bookkeeping, as pure logic on a fake clock. The envtest
// TestConcurrentBindingRespectsSlots and the scale tests show the same
// against the API server; these name each rule.

var ledgerStart = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func newTestLedger() (*bindingLedger, *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(ledgerStart)
	return newBindingLedger(clk, time.Minute), clk
}

func runKey(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

func testNodes(slots ...int32) []nodeView {
	out := make([]nodeView, len(slots))
	for i, s := range slots {
		out[i] = nodeView{name: fmt.Sprintf("n%d", i+1), slots: s}
	}
	return out
}

// ledgerRun is a run as the cache would show it.
func ledgerRun(ns, name string, phase harnessv1.RunPhase, node string) *harnessv1.HarnessRun {
	r := &harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(ledgerStart)}}
	r.Status.Phase, r.Status.NodeName = phase, node
	return r
}

func chosenName(v *nodeView) string {
	if v == nil {
		return ""
	}
	return v.name
}

func TestLedgerReserveChoosesTheLeastLoadedNode(t *testing.T) {
	cases := []struct {
		name      string
		slots     []int32
		bound     map[string]int // runs the cache shows on each node
		want      string
		wantInUse int32
		wantTotal int32
	}{
		{name: "empty nodes: the one with more free slots", slots: []int32{1, 3}, want: "n2", wantTotal: 4},
		{name: "equal: by name", slots: []int32{2, 2}, want: "n1", wantTotal: 4},
		{name: "lowest share in use wins over fewer runs", slots: []int32{2, 10}, bound: map[string]int{"n1": 1, "n2": 3}, want: "n2", wantInUse: 4, wantTotal: 12},
		{name: "a full node is skipped", slots: []int32{1, 4}, bound: map[string]int{"n1": 1, "n2": 3}, want: "n2", wantInUse: 4, wantTotal: 5},
		{name: "all full", slots: []int32{1, 2}, bound: map[string]int{"n1": 1, "n2": 2}, want: "", wantInUse: 3, wantTotal: 3},
		{name: "over-full counts as full, not more", slots: []int32{1}, bound: map[string]int{"n1": 3}, want: "", wantInUse: 1, wantTotal: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newTestLedger()
			for node, n := range tc.bound {
				for i := range n {
					l.observe(ledgerRun("ns", fmt.Sprintf("%s-%d", node, i), harnessv1.RunRunning, node))
				}
			}
			chosen, inUse, total, _ := l.reserve(runKey("ns", "new"), testNodes(tc.slots...), 0)
			if got := chosenName(chosen); got != tc.want {
				t.Errorf("chosen %q, want %q", got, tc.want)
			}
			if inUse != tc.wantInUse || total != tc.wantTotal {
				t.Errorf("in use %d of %d, want %d of %d", inUse, total, tc.wantInUse, tc.wantTotal)
			}
			if node, ok := l.reservedFor(runKey("ns", "new")); ok != (tc.want != "") || node != tc.want {
				t.Errorf("reservedFor = %q, %v; want %q", node, ok, tc.want)
			}
		})
	}
}

// A reservation holds its slot until the cache shows the binding, and then
// the cache's run holds it, until the run ends: never both, never neither.
func TestLedgerReservationHoldsTheSlotUntilTheCacheShowsIt(t *testing.T) {
	l, _ := newTestLedger()
	one := testNodes(1)
	if c, _, _, _ := l.reserve(runKey("ns", "a"), one, 0); chosenName(c) != "n1" {
		t.Fatalf("first reservation: chosen %q", chosenName(c))
	}
	if c, inUse, _, _ := l.reserve(runKey("ns", "b"), one, 0); c != nil || inUse != 1 {
		t.Fatalf("second run got %q (in use %d) while the first held the only slot", chosenName(c), inUse)
	}
	l.confirm(runKey("ns", "a"), "n1")
	// The watch brings the binding back: the slot is now the cache's.
	l.observe(ledgerRun("ns", "a", harnessv1.RunScheduled, "n1"))
	if _, ok := l.reservedFor(runKey("ns", "a")); ok {
		t.Error("the reservation outlived the cache showing the binding")
	}
	if c, _, _, _ := l.reserve(runKey("ns", "b"), one, 0); c != nil {
		t.Fatal("a slot the cache shows taken was given again")
	}
	l.observe(ledgerRun("ns", "a", harnessv1.RunSucceeded, "n1"))
	if c, _, _, _ := l.reserve(runKey("ns", "b"), one, 0); chosenName(c) != "n1" {
		t.Fatalf("the slot of a finished run was not given back (chosen %q)", chosenName(c))
	}
}

func TestLedgerReleaseAndConfirm(t *testing.T) {
	l, clk := newTestLedger()
	one := testNodes(1)

	// A write that certainly failed gives the slot back.
	l.reserve(runKey("ns", "a"), one, 0)
	l.release(runKey("ns", "a"), "n1")
	if c, _, _, _ := l.reserve(runKey("ns", "b"), one, 0); chosenName(c) != "n1" {
		t.Fatal("a released reservation still held its slot")
	}

	// A write that succeeded (or may have) is not released by a later
	// failure report, and holds the slot while the cache lags...
	l.confirm(runKey("ns", "b"), "n1")
	l.release(runKey("ns", "b"), "n1")
	clk.Step(time.Minute)
	if c, _, _, _ := l.reserve(runKey("ns", "c"), one, 0); c != nil {
		t.Fatal("a confirmed reservation was released, or expired at its TTL rather than after it")
	}
	// ...but not forever: a write that never landed frees it after the TTL.
	clk.Step(time.Second)
	if _, ok := l.reservedFor(runKey("ns", "b")); ok {
		t.Error("a confirmed reservation outlived its TTL")
	}
	if c, _, _, _ := l.reserve(runKey("ns", "c"), one, 0); chosenName(c) != "n1" {
		t.Fatal("an expired reservation still held its slot")
	}

	// An unconfirmed reservation (its write still in flight) never expires.
	clk.Step(time.Hour)
	if node, ok := l.reservedFor(runKey("ns", "c")); !ok || node != "n1" {
		t.Errorf("an in-flight reservation expired: %q, %v", node, ok)
	}

	// Confirming or releasing for another node changes nothing.
	l.release(runKey("ns", "c"), "elsewhere")
	if _, ok := l.reservedFor(runKey("ns", "c")); !ok {
		t.Error("release for another node dropped the reservation")
	}
}

func TestLedgerNamespaceLimit(t *testing.T) {
	l, _ := newTestLedger()
	many := testNodes(10)
	l.observe(ledgerRun("team-a", "running", harnessv1.RunRunning, "n1"))
	l.observe(ledgerRun("team-a", "done", harnessv1.RunSucceeded, "n1"))
	l.reserve(runKey("team-a", "reserved"), many, 0)

	c, _, _, inFlight := l.reserve(runKey("team-a", "next"), many, 2)
	if c != nil || inFlight != 2 {
		t.Errorf("team-a at its limit of 2: chosen %q, in flight %d; want none, 2", chosenName(c), inFlight)
	}
	if c, _, _, inFlight := l.reserve(runKey("team-a", "next"), many, 3); c == nil || inFlight != 2 {
		t.Errorf("team-a under a limit of 3: chosen %q, in flight %d; want a node, 2", chosenName(c), inFlight)
	}
	if c, _, _, inFlight := l.reserve(runKey("team-b", "first"), many, 1); c == nil || inFlight != 0 {
		t.Errorf("team-b is not limited by team-a's runs: chosen %q, in flight %d", chosenName(c), inFlight)
	}
}

// Many workers reserving at once never give more slots than there are.
func TestLedgerConcurrentReservations(t *testing.T) {
	l, _ := newTestLedger()
	fit := testNodes(3, 2, 5)
	var wg sync.WaitGroup
	var mu sync.Mutex
	perNode := map[string]int{}
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c, _, _, _ := l.reserve(runKey("ns", fmt.Sprintf("r%d", i)), fit, 0); c != nil {
				mu.Lock()
				perNode[c.name]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if diff := cmp.Diff(map[string]int{"n1": 3, "n2": 2, "n3": 5}, perNode); diff != "" {
		t.Errorf("reservations per node (-slots +given):\n%s", diff)
	}
}

func TestLedgerCountsAndForget(t *testing.T) {
	l, clk := newTestLedger()
	l.observe(ledgerRun("ns", "new", "", ""))
	l.observe(ledgerRun("ns", "waiting", harnessv1.RunPending, ""))
	l.observe(ledgerRun("ns", "running", harnessv1.RunRunning, "n1"))
	l.setPending(runKey("ns", "new"), PendingFull)
	l.setPending(runKey("ns", "waiting"), PendingNoAdapter)

	want := map[harnessv1.RunPhase]int{harnessv1.RunPending: 2, harnessv1.RunRunning: 1}
	if diff := cmp.Diff(want, l.phaseCounts()); diff != "" {
		t.Errorf("phase counts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{PendingFull: 1, PendingNoAdapter: 1}, l.pendingCounts()); diff != "" {
		t.Errorf("pending counts (-want +got):\n%s", diff)
	}

	// Binding a waiting run takes it out of the pending reasons.
	l.reserve(runKey("ns", "waiting"), testNodes(4), 0)
	if diff := cmp.Diff(map[string]int{PendingFull: 1}, l.pendingCounts()); diff != "" {
		t.Errorf("pending counts after binding (-want +got):\n%s", diff)
	}

	// A phase change moves the count; the old phase is not kept.
	clk.Step(time.Second)
	l.observe(ledgerRun("ns", "running", harnessv1.RunFailed, "n1"))
	want = map[harnessv1.RunPhase]int{harnessv1.RunPending: 2, harnessv1.RunRunning: 0, harnessv1.RunFailed: 1}
	if diff := cmp.Diff(want, l.phaseCounts()); diff != "" {
		t.Errorf("phase counts after a run failed (-want +got):\n%s", diff)
	}

	// A deleted run leaves nothing behind.
	for _, name := range []string{"new", "waiting", "running"} {
		l.forget(runKey("ns", name))
	}
	want = map[harnessv1.RunPhase]int{harnessv1.RunPending: 0, harnessv1.RunRunning: 0, harnessv1.RunFailed: 0}
	if diff := cmp.Diff(want, l.phaseCounts()); diff != "" {
		t.Errorf("phase counts after forget (-want +got):\n%s", diff)
	}
	if got := l.pendingCounts(); len(got) != 0 {
		t.Errorf("pending counts after forget: %v", got)
	}
	if _, ok := l.reservedFor(runKey("ns", "waiting")); ok {
		t.Error("a forgotten run kept its reservation")
	}
	if c, _, _, _ := l.reserve(runKey("ns", "x"), testNodes(1), 0); c == nil {
		t.Error("a forgotten run kept its slot")
	}
}

func TestLedgerPendingSince(t *testing.T) {
	l, clk := newTestLedger()
	run := ledgerRun("ns", "r", harnessv1.RunPending, "")

	// Not seen waiting by this controller: its creation.
	if got := l.pendingSince(runKey("ns", "r"), run); !got.Equal(ledgerStart) {
		t.Errorf("unseen run: %s, want its creation %s", got, ledgerStart)
	}
	// Seen waiting later (a restarted controller): when it was seen.
	clk.Step(time.Minute)
	l.observe(run)
	clk.Step(time.Minute)
	l.observe(run) // seen again: the first sighting counts
	if got, want := l.pendingSince(runKey("ns", "r"), run), ledgerStart.Add(time.Minute); !got.Equal(want) {
		t.Errorf("seen run: %s, want first seen %s", got, want)
	}
	// Sent back to Pending for a retry after that: the retry.
	retried := run.DeepCopy()
	retry := metav1.NewTime(ledgerStart.Add(5 * time.Minute))
	meta.SetStatusCondition(&retried.Status.Conditions, metav1.Condition{Type: harnessv1.ConditionScheduled, Status: metav1.ConditionFalse,
		Reason: harnessv1.ReasonRetrying, LastTransitionTime: retry})
	if got := l.pendingSince(runKey("ns", "r"), retried); !got.Equal(retry.Time) {
		t.Errorf("retried run: %s, want the retry %s", got, retry.Time)
	}
	// Once bound (confirmed) the sighting is dropped.
	l.reserve(runKey("ns", "r"), testNodes(1), 0)
	l.confirm(runKey("ns", "r"), "n1")
	if got := l.pendingSince(runKey("ns", "r"), run); !got.Equal(ledgerStart) {
		t.Errorf("after binding: %s, want its creation %s", got, ledgerStart)
	}
}
