package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// nodeState is what nodeWatcher last saw of a node.
type nodeState struct {
	ready bool
	// offer sums up what the node offers runs: slots, labels, adapters.
	offer string
}

// nodeWatcher is the "harnessnode-health" reconciler. It follows each
// HarnessNode and its heartbeat Lease, holds one timer per node for the
// Lease's expiry, and when a node turns Ready or changes what it offers it
// queues the waiting runs that could fit it; when a node is lost, the runs
// bound to it. It writes nothing: it turns changes of nodes and the passing
// of Lease expiry times into work for the harnessrun controller, whose queue
// it is handed through runSource.
type nodeWatcher struct {
	client client.Client
	clock  clock.PassiveClock
	nodes  nodeReader
	// ledger is the harnessrun controller's: which runs wait for a slot,
	// and how many slots each node has free.
	ledger *bindingLedger

	// snapshot is the harnessrun controller's reading of the nodes, made
	// stale by every change seen here.
	snapshot *nodeSnapshot

	mu    sync.Mutex
	queue runQueue
	last  map[string]nodeState
}

func newNodeWatcher(c client.Client, clk clock.PassiveClock, nodes nodeReader, snapshot *nodeSnapshot, ledger *bindingLedger) *nodeWatcher {
	return &nodeWatcher{client: c, clock: clk, nodes: nodes, snapshot: snapshot, ledger: ledger, last: map[string]nodeState{}}
}

// setupWithManager registers the watcher as the "harnessnode-health"
// controller: a HarnessNode, or the Lease it heartbeats through, changed.
func (w *nodeWatcher) setupWithManager(mgr ctrl.Manager) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("harnessnode-health").
		For(&harnessv1.HarnessNode{}).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(w.leaseToNode)).
		// A Node's labels are what runs' nodeSelectors are matched
		// against (nodeReader.labelsOf): a relabelled Node is judged
		// again at once, not at its node-agent's next write. Its other
		// updates (the kubelet's status, every few seconds) are not.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(sameName), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Complete(w)
	if err != nil {
		return fmt.Errorf("setting up the harnessnode-health controller: %w", err)
	}
	return nil
}

// runSource is the source through which the watcher reaches the harnessrun
// controller's queue: it hands the watcher that queue when the controller
// starts, and sends nothing itself.
func (w *nodeWatcher) runSource() source.TypedSource[reconcile.Request] {
	return source.Func(func(_ context.Context, q runQueue) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.queue = q
		return nil
	})
}

// sameName maps a Node to the HarnessNode of its name.
func sameName(_ context.Context, obj client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: obj.GetName()}}}
}

// leaseToNode maps a Lease to the HarnessNode that heartbeats through it.
func (w *nodeWatcher) leaseToNode(ctx context.Context, obj client.Object) []reconcile.Request {
	node := &harnessv1.HarnessNode{}
	if err := w.client.Get(ctx, types.NamespacedName{Name: obj.GetName()}, node, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	if node.Status.LeaseNamespace != obj.GetNamespace() {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: node.Name}}}
}

// Reconcile implements reconcile.Reconciler for a HarnessNode name.
func (w *nodeWatcher) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	w.mu.Lock()
	q := w.queue
	w.mu.Unlock()
	if q == nil {
		// The harnessrun controller has not started yet; it looks at every
		// run when it does, so only the timer matters until then.
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	w.snapshot.changed()
	now := w.clock.Now()
	v, err := w.nodes.get(ctx, req.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if v.gone {
		w.mu.Lock()
		delete(w.last, req.Name)
		w.mu.Unlock()
		w.enqueueBound(ctx, req.Name, q)
		return ctrl.Result{}, nil
	}
	v = v.at(now)
	h := v.health(now)
	cur := nodeState{ready: v.ready, offer: fmt.Sprintf("%d/%v/%v", v.slots, v.labels, v.adapters)}

	w.mu.Lock()
	prev, seen := w.last[req.Name]
	w.last[req.Name] = cur
	w.mu.Unlock()

	if seen && prev.ready && !cur.ready || h.lost {
		// Its runs judge the loss themselves (harnessrun_nodeloss.go).
		w.enqueueBound(ctx, req.Name, q)
	}
	if cur.ready && (!seen || !prev.ready || prev.offer != cur.offer) {
		log.FromContext(ctx).V(1).Info("node can take runs", "node", req.Name, "slots", v.slots)
		enqueueWaitingFor(ctx, w.nodes, w.ledger, now, req.Name, q, false)
	} else if cur.ready {
		wakeForFreeSlots(w.ledger, v, q)
	}
	if h.fresh {
		// Look again just after the Lease would expire; a renewal brings
		// the node back earlier through the Lease watch.
		return ctrl.Result{RequeueAfter: h.expiresAt.Sub(now) + 50*time.Millisecond}, nil
	}
	return ctrl.Result{}, nil
}

func (w *nodeWatcher) enqueueBound(ctx context.Context, nodeName string, q runQueue) {
	runs := &harnessv1.HarnessRunList{}
	if err := w.client.List(ctx, runs, client.MatchingFields{IndexRunActiveNode: nodeName}, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "listing the runs of a node", "node", nodeName)
		return
	}
	for i := range runs.Items {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&runs.Items[i])})
	}
}

// enqueueWaitingFor queues the Pending runs that node could take (adapter,
// version, nodeSelector), if the node is Ready. They are the ledger's
// (waitingRuns); the queue folds repeated requests for a run into one.
//
// freed is set when a run on node has just left it (it ended, was sent
// back or moved, or was deleted): a slot of node freed, and a share of the
// run's namespace. Then of the runs the ledger knows to wait only for a
// slot, wakeOldest picks as many as the node has free slots, at least one;
// of the runs waiting for their namespace's fair share, wakeForShare picks
// as many as their namespace has shares free, whatever node they fit (a
// share is counted over every node); runs waiting for a spend budget are
// left (an end charges what its run used, it never lowers a namespace's
// spending; a HarnessPolicy change wakes them); every other waiting run
// that fits is queued (a run never judged yet, or one waiting for its
// fixture). When not (the node became ready, or offers something else),
// every waiting run that fits is queued.
func enqueueWaitingFor(ctx context.Context, nodes nodeReader, ledger *bindingLedger, now time.Time, nodeName string, q runQueue, freed bool) {
	v, err := nodes.get(ctx, nodeName)
	if err != nil {
		log.FromContext(ctx).Error(err, "reading a node that freed a slot", "node", nodeName)
	}
	// A node that is not Ready (cordoned, draining, lost) takes no run,
	// but the share its run held is free all the same: the runs waiting
	// for it are woken whatever the node.
	ready := err == nil && v.at(now).ready
	if !ready && !freed {
		return
	}
	var forSlot, forShare []types.NamespacedName
	for _, w := range ledger.waitingRuns() {
		reason := ""
		if freed {
			reason = w.reason
		}
		switch {
		case reason == PendingFairShare:
			forShare = append(forShare, w.key)
		case reason == PendingSpend:
		case !ready || !fitsStatically(w.run, v):
		case reason == PendingFull:
			forSlot = append(forSlot, w.key)
		default:
			q.Add(reconcile.Request{NamespacedName: w.key})
		}
	}
	if freed {
		if ready {
			for _, key := range ledger.wakeOldest(nodeName, v.slots, 1, forSlot) {
				q.Add(reconcile.Request{NamespacedName: key})
			}
		}
		for _, key := range ledger.wakeForShare(forShare) {
			q.Add(reconcile.Request{NamespacedName: key})
		}
	}
}

// wakeForFreeSlots wakes, where the ledger counts free slots on node, the
// oldest runs waiting only for a slot that fit it (wakeOldest), and in each
// namespace with a fair share free, the oldest runs waiting for it that
// fit the node (wakeForShare): the net under the wake at a run's end,
// should a run it woke have gone, or turned out to wait for something
// else, and left the slot or the share free. Called at each of the node's
// heartbeats; it looks through the waiting runs only when a slot is free.
func wakeForFreeSlots(ledger *bindingLedger, v nodeView, q runQueue) {
	if ledger.freeSlots(v.name, v.slots) <= 0 {
		return
	}
	var fit []types.NamespacedName
	for _, w := range ledger.waitingRuns() {
		if fitsStatically(w.run, v) {
			fit = append(fit, w.key)
		}
	}
	for _, key := range ledger.wakeOldest(v.name, v.slots, 0, fit) {
		q.Add(reconcile.Request{NamespacedName: key})
	}
	for _, key := range ledger.wakeForShare(fit) {
		q.Add(reconcile.Request{NamespacedName: key})
	}
}
