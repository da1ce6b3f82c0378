package controllers

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// bindingLedger is the controller's memory of the bindings it made that the
// cache may not show yet, and of the runs waiting for a node.
//
// Why it exists: a node's load is read from the informer cache, which lags
// behind our own writes. Two workers binding at once, or one worker binding
// twice in a row before the first write comes back through the watch, would
// both see the same free slot. The ledger closes that gap the way
// kube-scheduler's "assumed pods" do: a slot is reserved in memory, under one
// lock, before the binding is written, and stays counted until the cache
// shows the run on that node (or the run is gone). Binding decisions are
// quick in-memory work, so one lock costs little; the API writes happen
// outside it, in parallel.
//
// The ledger also keeps, from the same watch events, each node's non-terminal
// runs and the number of runs in each phase, so a binding decision and a
// metrics scrape cost a few map lookups instead of copying runs out of the
// cache.
//
// A restarted or newly elected controller starts with an empty ledger; the
// informer's initial list replays every run into observe before any worker
// starts (controller-runtime waits for the handler to sync), so its counts
// are complete, and every binding that was written is among them.
type bindingLedger struct {
	clock clock.PassiveClock
	ttl   time.Duration

	mu sync.Mutex
	// byRun: the node a run was bound (or is being bound) to.
	byRun map[types.NamespacedName]reservation
	// byNode: the same, by node.
	byNode map[string]map[types.NamespacedName]struct{}
	// firstSeen: when this controller first saw a run waiting, for the
	// scheduling latency metric.
	firstSeen map[types.NamespacedName]time.Time
	// pending: why each waiting run fits no node, for the pending metric.
	pending map[types.NamespacedName]string
	// woken: the runs waiting for a slot (pending Full) or for their
	// namespace's fair share (pending FairShare) that a wake picked and
	// that have not been dispatched since (wakeOldest, wakeForShare).
	woken map[types.NamespacedName]struct{}
	// shareLimit: each namespace's fair share (maxRunsInFlight) as its
	// last reserve found it; none for a namespace without one
	// (wakeForShare).
	shareLimit map[string]int32
	// active: the non-terminal runs the cache shows bound to each node;
	// activeNode the reverse.
	active     map[string]map[types.NamespacedName]struct{}
	activeNode map[types.NamespacedName]string
	// phase of each run in the cache, and the runs per phase.
	phase      map[types.NamespacedName]harnessv1.RunPhase
	phaseCount map[harnessv1.RunPhase]int
	// waiting: the runs the cache shows Pending, as the cache holds them
	// (read here, never changed), for the wakes (waitingRuns).
	waiting map[types.NamespacedName]*harnessv1.HarnessRun
}

type reservation struct {
	node string
	// confirmed: the write succeeded (or may have); the reservation lasts
	// until the cache shows it, or ttl after at.
	confirmed bool
	at        time.Time
}

func newBindingLedger(clk clock.PassiveClock, ttl time.Duration) *bindingLedger {
	return &bindingLedger{
		clock:     clk,
		ttl:       ttl,
		byRun:     map[types.NamespacedName]reservation{},
		byNode:    map[string]map[types.NamespacedName]struct{}{},
		firstSeen: map[types.NamespacedName]time.Time{},
		pending:   map[types.NamespacedName]string{},
		woken:     map[types.NamespacedName]struct{}{},

		shareLimit: map[string]int32{},

		active:     map[string]map[types.NamespacedName]struct{}{},
		activeNode: map[types.NamespacedName]string{},
		phase:      map[types.NamespacedName]harnessv1.RunPhase{},
		phaseCount: map[harnessv1.RunPhase]int{},
		waiting:    map[types.NamespacedName]*harnessv1.HarnessRun{},
	}
}

// loadLocked is the number of slots in use on node: the runs the cache shows
// there plus the reservations it does not show yet. l.mu must be held.
func (l *bindingLedger) loadLocked(node string) int32 {
	n := int32(len(l.active[node]))
	for run := range l.byNode[node] {
		if l.expiredLocked(l.byRun[run]) {
			l.dropLocked(run)
			continue
		}
		if _, seen := l.active[node][run]; !seen {
			n++
		}
	}
	return n
}

// setActiveLocked records that the cache shows run bound to node ("" for
// none, or terminal).
func (l *bindingLedger) setActiveLocked(run types.NamespacedName, node string) {
	old := l.activeNode[run]
	if old == node {
		return
	}
	if old != "" {
		delete(l.active[old], run)
		if len(l.active[old]) == 0 {
			delete(l.active, old)
		}
		delete(l.activeNode, run)
	}
	if node != "" {
		if l.active[node] == nil {
			l.active[node] = map[types.NamespacedName]struct{}{}
		}
		l.active[node][run] = struct{}{}
		l.activeNode[run] = node
	}
}

func (l *bindingLedger) setPhaseLocked(run types.NamespacedName, phase harnessv1.RunPhase) {
	old, ok := l.phase[run]
	if ok && old == phase {
		return
	}
	if ok {
		l.phaseCount[old]--
	}
	if phase == "" {
		delete(l.phase, run)
		return
	}
	l.phase[run] = phase
	l.phaseCount[phase]++
}

// phaseCounts counts the runs in the cache by phase.
func (l *bindingLedger) phaseCounts() map[harnessv1.RunPhase]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[harnessv1.RunPhase]int, len(l.phaseCount))
	for p, n := range l.phaseCount {
		out[p] = n
	}
	return out
}

// reserve picks the least-loaded node among fit (lowest share of slots in
// use, then most free slots, then name) and reserves a slot on it for run.
// It returns nil when every node is full, with the slots in use and in total,
// or when the run's namespace already has nsLimit runs on nodes (0: no
// limit), with that number. Counting and reserving happen under one lock, so
// two workers never exceed a node's slots or a namespace's limit.
func (l *bindingLedger) reserve(run types.NamespacedName, fit []nodeView, nsLimit int32) (chosen *nodeView, inUse, total, inFlight int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.shareLimit, run.Namespace)
	if nsLimit > 0 {
		l.shareLimit[run.Namespace] = nsLimit
		if inFlight = l.namespaceLoadLocked(run.Namespace); inFlight >= nsLimit {
			return nil, 0, 0, inFlight
		}
	}
	var bestLoad int32
	for i := range fit {
		n := &fit[i]
		load := l.loadLocked(n.name)
		inUse += min(load, n.slots)
		total += n.slots
		if load >= n.slots {
			continue
		}
		if chosen == nil || lessLoaded(load, n, bestLoad, chosen) {
			chosen, bestLoad = n, load
		}
	}
	if chosen != nil {
		l.reserveLocked(run, chosen.name)
	}
	return chosen, inUse, total, inFlight
}

func lessLoaded(loadA int32, a *nodeView, loadB int32, b *nodeView) bool {
	// Compare loadA/slotsA with loadB/slotsB without division.
	if x, y := int64(loadA)*int64(b.slots), int64(loadB)*int64(a.slots); x != y {
		return x < y
	}
	if fa, fb := a.slots-loadA, b.slots-loadB; fa != fb {
		return fa > fb
	}
	return a.name < b.name
}

// namespaceLoadLocked is the number of namespace's runs on nodes: those the
// cache shows bound and not finished, plus the reservations it does not show
// yet. l.mu must be held.
func (l *bindingLedger) namespaceLoadLocked(namespace string) int32 {
	var n int32
	l.eachOnNodesLocked(func(run types.NamespacedName) {
		if run.Namespace == namespace {
			n++
		}
	})
	return n
}

// eachOnNodesLocked calls f with each run on a node: bound and not
// finished as the cache shows, or reserved and not shown yet. l.mu must
// be held.
func (l *bindingLedger) eachOnNodesLocked(f func(types.NamespacedName)) {
	for run := range l.activeNode {
		f(run)
	}
	for run, res := range l.byRun {
		if l.expiredLocked(res) {
			continue
		}
		if _, seen := l.activeNode[run]; !seen {
			f(run)
		}
	}
}

// reserveLocked reserves a slot on node for run. l.mu must be held.
func (l *bindingLedger) reserveLocked(run types.NamespacedName, node string) {
	l.dropLocked(run)
	l.byRun[run] = reservation{node: node, at: l.clock.Now()}
	if l.byNode[node] == nil {
		l.byNode[node] = map[types.NamespacedName]struct{}{}
	}
	l.byNode[node][run] = struct{}{}
	delete(l.pending, run)
}

// release gives back a reservation whose write certainly failed.
func (l *bindingLedger) release(run types.NamespacedName, node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.byRun[run]; ok && r.node == node && !r.confirmed {
		l.dropLocked(run)
	}
}

// confirm keeps a reservation whose write succeeded (or may have) until the
// cache shows it.
func (l *bindingLedger) confirm(run types.NamespacedName, node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.byRun[run]; ok && r.node == node {
		l.byRun[run] = reservation{node: node, confirmed: true, at: l.clock.Now()}
	}
	delete(l.firstSeen, run)
}

// reservedFor returns the node a run is reserved on, if any.
func (l *bindingLedger) reservedFor(run types.NamespacedName) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.byRun[run]
	if ok && l.expiredLocked(r) {
		l.dropLocked(run)
		return "", false
	}
	return r.node, ok
}

func (l *bindingLedger) expiredLocked(r reservation) bool {
	return r.confirmed && l.clock.Since(r.at) > l.ttl
}

func (l *bindingLedger) dropLocked(run types.NamespacedName) {
	if r, ok := l.byRun[run]; ok {
		delete(l.byNode[r.node], run)
		if len(l.byNode[r.node]) == 0 {
			delete(l.byNode, r.node)
		}
		delete(l.byRun, run)
	}
}

// observe updates the ledger from a run the cache now holds: a reservation
// the cache shows (or that no longer matters) is dropped.
func (l *bindingLedger) observe(run *harnessv1.HarnessRun) {
	key := types.NamespacedName{Namespace: run.Namespace, Name: run.Name}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.byRun[key]; ok && (run.Status.NodeName == r.node || run.Status.Phase.Terminal()) {
		l.dropLocked(key)
	}
	node := run.Status.NodeName
	if run.Status.Phase.Terminal() {
		node = ""
	}
	l.setActiveLocked(key, node)
	l.setPhaseLocked(key, effectivePhase(run))
	if effectivePhase(run) == harnessv1.RunPending {
		l.waiting[key] = run
	} else {
		delete(l.waiting, key)
	}
	if effectivePhase(run) == harnessv1.RunPending && run.DeletionTimestamp == nil {
		if _, ok := l.firstSeen[key]; !ok {
			l.firstSeen[key] = l.clock.Now()
		}
	} else {
		delete(l.firstSeen, key)
		delete(l.pending, key)
		delete(l.woken, key)
	}
}

// forget drops everything about a deleted run.
func (l *bindingLedger) forget(run types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropLocked(run)
	l.setActiveLocked(run, "")
	l.setPhaseLocked(run, "")
	delete(l.waiting, run)
	delete(l.firstSeen, run)
	delete(l.pending, run)
	delete(l.woken, run)
}

// waitingRun is a run the cache shows Pending, as the cache holds it (to
// read, never to change), with why the ledger last found it waiting (""
// when it has not judged it since this controller saw it).
type waitingRun struct {
	key    types.NamespacedName
	run    *harnessv1.HarnessRun
	reason string
}

// waitingRuns are the runs the cache shows Pending, as observe last saw
// them: what the wakes look through at a run's end and a node's
// heartbeat. Listing them from the cache's phase index instead copied
// every waiting run at each of those (with 8,600 runs waiting, 28 ms and
// 17 MB each, BenchmarkCreateToScheduled). A run that turned Pending
// after the last event observe saw is queued by its own event.
func (l *bindingLedger) waitingRuns() []waitingRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]waitingRun, 0, len(l.waiting))
	for key, run := range l.waiting {
		out = append(out, waitingRun{key: key, run: run, reason: l.pending[key]})
	}
	return out
}

// setPending records why a run waits.
func (l *bindingLedger) setPending(run types.NamespacedName, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending[run] = reason
}

// dispatched forgets that a freed slot or share woke run: its dispatch
// judged it again (bound, waiting again, or waiting for something else).
func (l *bindingLedger) dispatched(run types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.woken, run)
}

// wakeOldest picks, of runs (those fitting node), the ones this ledger
// knows to wait only for a slot and that no freed slot has woken since
// their last dispatch, oldest first (by when this controller first saw
// them waiting), as many as node has slots free by this ledger's count,
// and at least least (a slot the caller saw free a moment ago), and marks
// them woken.
//
// Why not all of them: a freed slot takes one run, and waking every run
// that waits for a node at each run's end costs the controller a pass
// over every one of them each time (with 300 runs queued on a node of two
// slots, 124 reconciles a run). Runs already woken and not yet dispatched
// are passed over, so that slots freeing together on several nodes wake
// different runs. A woken run that turns out to wait for something else
// (its namespace's fair share, a spend budget, its fixture) leaves the
// slot free; the node's next heartbeat wakes the next one (nodeWatcher).
func (l *bindingLedger) wakeOldest(node string, slots int32, least int, runs []types.NamespacedName) []types.NamespacedName {
	l.mu.Lock()
	defer l.mu.Unlock()
	free := max(int(slots-l.loadLocked(node)), least)
	if free <= 0 {
		return nil
	}
	var pick []types.NamespacedName
	for _, r := range runs {
		if _, done := l.woken[r]; !done && l.pending[r] == PendingFull {
			pick = append(pick, r)
		}
	}
	return l.wakeLocked(pick, free)
}

// wakeLocked marks the oldest n of runs woken (by when this controller
// first saw them waiting; ties by name) and returns them. l.mu must be
// held.
func (l *bindingLedger) wakeLocked(runs []types.NamespacedName, n int) []types.NamespacedName {
	slices.SortFunc(runs, func(a, b types.NamespacedName) int {
		if c := l.firstSeen[a].Compare(l.firstSeen[b]); c != 0 {
			return c
		}
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	runs = runs[:min(n, len(runs))]
	for _, r := range runs {
		l.woken[r] = struct{}{}
	}
	return runs
}

// wakeForShare picks, of runs, the ones this ledger knows to wait for
// their namespace's fair share (pending FairShare) and that no wake has
// picked since their last dispatch: in each namespace with shares free by
// this ledger's count (its limit as its last reserve found it, less its
// runs on nodes and its runs woken and not dispatched yet, which may take
// one), the oldest, as many as are free; in a namespace whose last
// reserve found no limit (its policy gone, or no longer selecting it),
// every one; and marks them woken.
//
// Why not all of them: a share frees when a run of its namespace leaves a
// node, and takes one run; waking every run that waits for it cost the
// controller a pass over a namespace's whole queue at each end of one of
// its runs (and the runs of every other namespace at its share that fit
// the node, whose shares that end did not change). A woken run that
// cannot go after all (its fixture, every node it fits full) leaves the
// share free; the next heartbeat of a node with a free slot wakes the
// next one that fits it (nodeWatcher).
func (l *bindingLedger) wakeForShare(runs []types.NamespacedName) []types.NamespacedName {
	l.mu.Lock()
	defer l.mu.Unlock()
	waiting := map[string][]types.NamespacedName{}
	for _, r := range runs {
		if _, done := l.woken[r]; !done && l.pending[r] == PendingFairShare {
			waiting[r.Namespace] = append(waiting[r.Namespace], r)
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	taken := map[string]int32{}
	l.eachOnNodesLocked(func(run types.NamespacedName) { taken[run.Namespace]++ })
	for r := range l.woken {
		taken[r.Namespace]++
	}
	var pick []types.NamespacedName
	for ns, runs := range waiting {
		limit, limited := l.shareLimit[ns]
		if !limited {
			pick = append(pick, l.wakeLocked(runs, len(runs))...)
		} else if free := limit - taken[ns]; free > 0 {
			pick = append(pick, l.wakeLocked(runs, int(free))...)
		}
	}
	return pick
}

// freeSlots is how many of node's slots (slots in all) this ledger counts
// free.
func (l *bindingLedger) freeSlots(node string, slots int32) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(slots - l.loadLocked(node))
}

// pendingCounts counts the waiting runs by reason.
func (l *bindingLedger) pendingCounts() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, reason := range l.pending {
		out[reason]++
	}
	return out
}

// firstSeenWaiting is when this controller first saw the run waiting, on
// its own clock, if it did.
func (l *bindingLedger) firstSeenWaiting(run types.NamespacedName) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.firstSeen[run]
	return t, ok
}

// pendingSince is when the run started waiting for this attempt: when this
// controller first saw it waiting, or (after a restart) when it was created
// or sent back to Pending, whichever is later.
func (l *bindingLedger) pendingSince(run types.NamespacedName, obj *harnessv1.HarnessRun) time.Time {
	since := obj.CreationTimestamp.Time
	if c := meta.FindStatusCondition(obj.Status.Conditions, harnessv1.ConditionScheduled); c != nil &&
		c.Reason == harnessv1.ReasonRetrying && c.LastTransitionTime.After(since) {
		since = c.LastTransitionTime.Time
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.firstSeen[run]; ok && t.After(since) {
		since = t
	}
	return since
}
