package controllers

import (
	"context"
	"fmt"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
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
//   - "harnessnode-health", the node watcher (harnessnode_watcher.go),
//     follows each HarnessNode and its heartbeat Lease and turns their
//     changes into work for "harnessrun".
//
// Nothing polls: a run is looked at again because something it depends on
// changed, or at a deadline it computed (RequeueAfter).
//
// The cache indexes of SetupIndexes must be registered first.
func (r *HarnessRunReconciler) SetupWithManager(mgr ctrl.Manager) error {
	nw := newNodeWatcher(r.client, r.clock, r.nodeReader(), r.nodes, r.ledger)
	err := ctrl.NewControllerManagedBy(mgr).
		Named("harnessrun").
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles}).
		WatchesRawSource(source.Kind(mgr.GetCache(), &harnessv1.HarnessRun{}, r.runEventHandler())).
		// A changed HarnessPolicy may let waiting runs go (fairShare,
		// spend); a charge to its spend does not.
		Watches(&harnessv1.HarnessPolicy{}, handler.EnqueueRequestsFromMapFunc(r.waitingOnPolicy), builder.WithPredicates(policyMayFree)).
		// The node watcher feeds this controller's queue.
		WatchesRawSource(nw.runSource()).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the harnessrun controller: %w", err)
	}
	return nw.setupWithManager(mgr)
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
			r.written.observe(req(e.Object).NamespacedName, e.Object.ResourceVersion)
			q.Add(req(e.Object))
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*harnessv1.HarnessRun], q runQueue) {
			r.ledger.observe(e.ObjectNew)
			r.written.observe(req(e.ObjectNew).NamespacedName, e.ObjectNew.ResourceVersion)
			q.Add(req(e.ObjectNew))
			old, cur := e.ObjectOld.Status, e.ObjectNew.Status
			if old.NodeName != "" && !old.Phase.Terminal() && (cur.Phase.Terminal() || cur.NodeName != old.NodeName) {
				enqueueWaitingFor(ctx, r.nodeReader(), r.ledger, r.clock.Now(), old.NodeName, q, true)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*harnessv1.HarnessRun], q runQueue) {
			r.ledger.forget(client.ObjectKeyFromObject(e.Object))
			r.written.forget(client.ObjectKeyFromObject(e.Object))
			if runTokens(e.Object) > 0 {
				// Gone before it was charged (its author stripped the
				// finalizer, or deleted it as it ended): charged now, from
				// its last status. Off the event loop: it writes.
				go r.chargeDeleted(e.Object.DeepCopy()) // harnessrun_spend.go
			}
			if st := e.Object.Status; st.NodeName != "" && !st.Phase.Terminal() {
				enqueueWaitingFor(ctx, r.nodeReader(), r.ledger, r.clock.Now(), st.NodeName, q, true)
			}
		},
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[*harnessv1.HarnessRun], q runQueue) {
			q.Add(req(e.Object))
		},
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
	if runs.EvidenceRepository != "" && runs.EvidenceReader == nil {
		runs.EvidenceReader = mgr.GetAPIReader()
	}
	if runs.FixtureReader == nil {
		runs.FixtureReader = mgr.GetAPIReader()
	}
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
