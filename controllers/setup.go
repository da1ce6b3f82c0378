package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

type runQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// SetupWithManager registers two controllers with mgr:
//
//   - "harnessrun" reconciles HarnessRuns. Besides each run's own changes it
//     is fed by the run watch when a run frees a slot (the waiting runs that
//     could use it) and by "harnessnode-health".
//   - "harnessnode-health" follows each HarnessNode and its heartbeat Lease,
//     holds one timer per node for the Lease's expiry, and when a node turns
//     Ready or changes what it offers it queues the waiting runs that could
//     fit it; when a node is lost, the runs bound to it.
//
// Nothing polls: a run is looked at again because something it depends on
// changed, or at a deadline it computed (RequeueAfter).
//
// The cache indexes of SetupIndexes must be registered first.
func (r *HarnessRunReconciler) SetupWithManager(mgr ctrl.Manager) error {
	nw := &nodeWatcher{client: r.client, clock: r.clock, opts: r.opts, last: map[string]nodeState{}, snapshot: r.nodes}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("harnessrun").
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles}).
		WatchesRawSource(source.Kind(mgr.GetCache(), &harnessv1.HarnessRun{}, r.runEventHandler())).
		// A changed HarnessPolicy may let waiting runs go (fairShare).
		Watches(&harnessv1.HarnessPolicy{}, handler.EnqueueRequestsFromMapFunc(r.waitingOnPolicy)).
		WatchesRawSource(source.Func(func(_ context.Context, q runQueue) error {
			nw.setQueue(q)
			return nil
		})).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the harnessrun controller: %w", err)
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("harnessnode-health").
		For(&harnessv1.HarnessNode{}).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(nw.leaseToNode)).
		Complete(nw)
	if err != nil {
		return fmt.Errorf("setting up the harnessnode-health controller: %w", err)
	}
	return nil
}

// runEventHandler queues the run that changed, keeps the binding ledger up to
// date, and when a run gives its slot back (it finished, was sent back to
// Pending or deleted) queues the waiting runs that could use that node.
func (r *HarnessRunReconciler) runEventHandler() handler.TypedEventHandler[*harnessv1.HarnessRun, reconcile.Request] {
	req := func(run *harnessv1.HarnessRun) reconcile.Request {
		return reconcile.Request{NamespacedName: client.ObjectKeyFromObject(run)}
	}
	return handler.TypedFuncs[*harnessv1.HarnessRun, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*harnessv1.HarnessRun], q runQueue) {
			r.ledger.observe(e.Object)
			q.Add(req(e.Object))
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*harnessv1.HarnessRun], q runQueue) {
			r.ledger.observe(e.ObjectNew)
			q.Add(req(e.ObjectNew))
			old, cur := e.ObjectOld.Status, e.ObjectNew.Status
			if old.NodeName != "" && !old.Phase.Terminal() && (cur.Phase.Terminal() || cur.NodeName != old.NodeName) {
				enqueueWaitingFor(ctx, r.client, r.clock.Now(), r.opts.DefaultLeaseDuration, old.NodeName, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*harnessv1.HarnessRun], q runQueue) {
			r.ledger.forget(client.ObjectKeyFromObject(e.Object))
			if st := e.Object.Status; st.NodeName != "" && !st.Phase.Terminal() {
				enqueueWaitingFor(ctx, r.client, r.clock.Now(), r.opts.DefaultLeaseDuration, st.NodeName, q)
			}
		},
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[*harnessv1.HarnessRun], q runQueue) {
			q.Add(req(e.Object))
		},
	}
}

// enqueueWaitingFor queues the Pending runs that node could take (adapter,
// version, nodeSelector), if the node is Ready. They are found through the
// phase index; the queue folds repeated requests for a run into one.
func enqueueWaitingFor(ctx context.Context, c client.Reader, now time.Time, defaultLease time.Duration, nodeName string, q runQueue) {
	node := &harnessv1.HarnessNode{}
	if err := c.Get(ctx, types.NamespacedName{Name: nodeName}, node, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	var lease *coordinationv1.Lease
	if ns := node.Status.LeaseNamespace; ns != "" {
		l := &coordinationv1.Lease{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: nodeName}, l, client.UnsafeDisableDeepCopy); err == nil {
			lease = l
		}
	}
	v := viewOf(node, lease, now, defaultLease)
	if !v.ready {
		return
	}
	runs := &harnessv1.HarnessRunList{}
	if err := c.List(ctx, runs, client.MatchingFields{IndexRunPhase: string(harnessv1.RunPending)}, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "listing waiting runs", "node", nodeName)
		return
	}
	for i := range runs.Items {
		if fitsStatically(&runs.Items[i], v) {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&runs.Items[i])})
		}
	}
}

// nodeState is what nodeWatcher last saw of a node.
type nodeState struct {
	ready bool
	// offer sums up what the node offers runs: slots, labels, adapters.
	offer string
}

// nodeWatcher is the "harnessnode-health" reconciler. It writes nothing: it
// turns changes of nodes and the passing of Lease expiry times into work for
// the harnessrun controller.
type nodeWatcher struct {
	client client.Client
	clock  clock.PassiveClock
	opts   Options

	// snapshot is the harnessrun controller's reading of the nodes, made
	// stale by every change seen here.
	snapshot *nodeSnapshot

	mu    sync.Mutex
	queue runQueue
	last  map[string]nodeState
}

func (w *nodeWatcher) setQueue(q runQueue) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.queue = q
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
	node := &harnessv1.HarnessNode{}
	if err := w.client.Get(ctx, req.NamespacedName, node, client.UnsafeDisableDeepCopy); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("getting HarnessNode %s: %w", req.Name, err)
		}
		w.mu.Lock()
		delete(w.last, req.Name)
		w.mu.Unlock()
		w.enqueueBound(ctx, req.Name, q)
		return ctrl.Result{}, nil
	}
	h := readNodeHealth(ctx, w.client, req.Name, now, w.opts.DefaultLeaseDuration)
	v := viewOf(node, h.lease, now, w.opts.DefaultLeaseDuration)
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
		enqueueWaitingFor(ctx, w.client, now, w.opts.DefaultLeaseDuration, req.Name, q)
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

// Setup wires the whole controller into mgr as the binary runs it: the
// cache indexes, the HarnessRun reconciler (with its node watcher) and the
// HarnessSuite reconciler, on the real clock, with one event recorder.
// mgr's cache should be made with CacheByObject. Tests that need a fake
// clock wire the reconcilers themselves.
func Setup(ctx context.Context, mgr ctrl.Manager, runs Options, suites SuiteOptions) error {
	if err := SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	recorder := mgr.GetEventRecorder("harnessfacts-controller")
	r, err := NewHarnessRunReconciler(mgr.GetClient(), recorder, clock.RealClock{}, runs)
	if err != nil {
		return err
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	if suites.Registerer == nil {
		// The same registry as the run metrics: one endpoint for both.
		suites.Registerer = r.opts.Registerer
	}
	return NewHarnessSuiteReconciler(mgr.GetClient(), recorder, clock.RealClock{}, suites).SetupWithManager(mgr)
}
