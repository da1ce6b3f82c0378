package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Options tune the HarnessRun reconcilers. The zero value is usable: Default
// fills every unset field.
type Options struct {
	// DeadlineGrace is added to a run's start + limits.episodeSeconds before
	// the controller ends it with class Timeout: the node-agent kills the
	// agent at episodeSeconds and needs some time to collect and report.
	DeadlineGrace time.Duration

	// ClaimTimeout is how long a run may stay Scheduled on a node whose
	// node-agent is alive before the controller takes the attempt back (an
	// infrastructure failure, retried like a lost node): a node-agent claims
	// a run it can start within moments of its binding.
	ClaimTimeout time.Duration

	// DefaultLeaseDuration is how long a node Lease stays fresh when it does
	// not say (spec.leaseDurationSeconds unset).
	DefaultLeaseDuration time.Duration

	// MaxConcurrentReconciles is the number of HarnessRun workers. Binding
	// stays correct with any number (see bindingLedger). A binding pass is
	// two API round trips and little CPU, so workers mostly wait: 16 kept
	// runs waiting in the queue for a worker under a burst (1.3 s on average
	// in BenchmarkCreateToScheduled, load 14), 64 did not (62 ms).
	MaxConcurrentReconciles int

	// Registerer receives the controller's metrics; controller-runtime's
	// registry (served on the manager's metrics endpoint) when nil.
	Registerer prometheus.Registerer

	// ReservationTTL bounds how long a binding whose write had an ambiguous
	// outcome (a timeout, not a conflict) keeps its slot reserved while the
	// cache has not shown it.
	ReservationTTL time.Duration

	// EvidenceRepository, when set, is an OCI repository (registry/path)
	// where each finished run's evidence is pushed as an artifact, so that
	// it outlives the run (harnessrun_evidence.go). EvidenceReader reads the
	// evidence ConfigMaps, which the cache does not hold.
	EvidenceRepository string
	EvidenceReader     client.Reader

	// FixtureReader reads whether the fixture ConfigMap a run names exists
	// before the run is bound (fixtureMissing): the API server, since the
	// cache holds only suites' fixtures. Required; Setup gives the
	// manager's API reader.
	FixtureReader client.Reader
	// FixtureGrace is how long a run whose fixture ConfigMap does not exist
	// waits for it, Pending, before it ends BadFixture (15 s when unset).
	FixtureGrace time.Duration

	// EvidenceSigningKeySecret is the operator's signing key Secret
	// (--evidence-signing-key-secret), nil when the nodes sign with their
	// own keys. The store gate checks a receipt signed by it against its
	// public part: receipt.dsse.json is outside the receipt's digest, so
	// only the signature check tells the node's envelope from a swapped one.
	EvidenceSigningKeySecret *types.NamespacedName
}

// Default fills the unset fields of o.
func (o Options) Default() Options {
	if o.DeadlineGrace <= 0 {
		o.DeadlineGrace = 30 * time.Second
	}
	if o.ClaimTimeout <= 0 {
		o.ClaimTimeout = 2 * time.Minute
	}
	if o.DefaultLeaseDuration <= 0 {
		o.DefaultLeaseDuration = 40 * time.Second
	}
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = 64
	}
	if o.Registerer == nil {
		o.Registerer = ctrlmetrics.Registry
	}
	if o.ReservationTTL <= 0 {
		o.ReservationTTL = time.Minute
	}
	if o.FixtureGrace <= 0 {
		o.FixtureGrace = 15 * time.Second
	}
	return o
}

// HarnessRunReconciler sees every HarnessRun to a terminal phase: it binds
// Pending runs to nodes (dispatch), ends runs whose deadline passed
// (deadline) or whose node was lost (nodeloss, with retries), carries out the
// cancel protocol (cancel) and deletes finished runs after their TTL (ttl).
// Each concern is a step in its own file; Reconcile runs them in order and
// writes the status at most once.
type HarnessRunReconciler struct {
	client   client.Client
	recorder events.EventRecorder
	clock    clock.PassiveClock
	opts     Options

	ledger  *bindingLedger
	written *ownWrites
	// chargedPolicies: harnessrun_spend.go.
	chargedPolicies chargedPolicies
	nodes           *nodeSnapshot
	leases          *leaseClock
	metrics         *runMetrics
}

// NewHarnessRunReconciler returns a reconciler that reads through c (a
// cache-backed client with the indexes of SetupIndexes), writes through c,
// records Events with recorder and tells time with clk.
func NewHarnessRunReconciler(c client.Client, recorder events.EventRecorder, clk clock.PassiveClock, opts Options) (*HarnessRunReconciler, error) {
	opts = opts.Default()
	if opts.FixtureReader == nil {
		// The cached client would answer NotFound for every fixture not a
		// suite's, or start a watch of every ConfigMap's metadata.
		return nil, errors.New("controllers: Options.FixtureReader is required (the manager's API reader)")
	}
	r := &HarnessRunReconciler{
		client:   c,
		recorder: recorder,
		clock:    clk,
		opts:     opts,
		ledger:   newBindingLedger(clk, opts.ReservationTTL),
		written:  newOwnWrites(),
		nodes:    &nodeSnapshot{},
		leases:   newLeaseClock(clk),
	}
	m, err := newRunMetrics(r.ledger, opts.Registerer, clk.Now())
	if err != nil {
		return nil, err
	}
	r.metrics = m
	return r, nil
}

// pass is what one Reconcile decided: the status to write, the Events to
// record once that write succeeded, and when to look again.
type pass struct {
	run  *harnessv1.HarnessRun
	orig *harnessv1.HarnessRun
	now  metav1.Time

	events       []runEvent
	requeueAfter time.Duration
	// reserved is the node a slot was reserved on for this run; the
	// reservation is released unless the status write succeeds.
	reserved string
	// scheduled is true when this pass binds the run.
	scheduled bool
	// pendingSince is when the run started waiting, for the latency metric.
	pendingSince time.Time
	// quiet is true when the pass has nothing to say yet: a new run that
	// has waited for a slot less than pendingQuietFor. It writes nothing,
	// not even the Finished condition.
	quiet bool
}

type runEvent struct {
	eventType string
	reason    string
	action    string
	note      string
	related   runtime.Object
}

func (p *pass) requeue(d time.Duration) {
	if d <= 0 {
		d = time.Millisecond
	}
	if p.requeueAfter == 0 || d < p.requeueAfter {
		p.requeueAfter = d
	}
}

func (p *pass) event(eventType, reason, action, note string, related runtime.Object) {
	p.events = append(p.events, runEvent{eventType: eventType, reason: reason, action: action, note: note, related: related})
}

// setCondition sets a condition on the run, with the run's generation.
func (p *pass) setCondition(condType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&p.run.Status.Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: p.run.Generation,
		LastTransitionTime: p.now,
	})
}

// fail ends the run: phase Failed with reason and message, Ready=False, and
// the verdict and failure class (empty for a cancel, which judges nothing).
func (p *pass) fail(reason, message string, verdict harnessv1.Verdict, class harnessv1.FailureClass) {
	st := &p.run.Status
	st.Phase = harnessv1.RunFailed
	st.Reason = reason
	st.Message = message
	st.Verdict = verdict
	st.FailureClass = class
	st.CompletionTime = p.now.DeepCopy()
	st.LiveOutput = nil
	p.setCondition(harnessv1.ConditionReady, metav1.ConditionFalse, reason, message)
	p.event(corev1.EventTypeWarning, reason, "Fail", message, nil)
}

// Reconcile implements reconcile.Reconciler. A conflict on any of the
// pass's optimistic writes (its status, a finalizer patch made from a cache
// the node-agent's write had not reached yet) is the ordinary course of
// optimistic concurrency, not a fault: the pass is tried again shortly
// with the newer run, and controller-runtime logs no "Reconciler error".
func (r *HarnessRunReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := r.reconcile(ctx, req)
	if apierrors.IsConflict(err) {
		log.FromContext(ctx).V(1).Info("a write conflicted; will retry with the newer run", "run", req.NamespacedName, "error", err.Error())
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}

func (r *HarnessRunReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	run := &harnessv1.HarnessRun{}
	if err := r.client.Get(ctx, req.NamespacedName, run); err != nil {
		if apierrors.IsNotFound(err) {
			r.ledger.forget(req.NamespacedName)
			r.written.forget(req.NamespacedName)
			r.metrics.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting HarnessRun %s: %w", req.NamespacedName, err)
	}
	if r.written.stale(req.NamespacedName, run.ResourceVersion) {
		// The cache is behind this controller's own last write of the run
		// (ownwrites.go): nothing to decide from a status already replaced.
		// The watch event of that write queues the run again.
		return ctrl.Result{}, nil
	}

	if finishedMarked(run) {
		// Ended Finished by its node-agent: counted now, as the pass may
		// stop at the finalizer step (a run this pass ends is counted after
		// the write, in afterWrite).
		r.metrics.observeFinished(run)
	}
	p := &pass{run: run, orig: run.DeepCopy(), now: metav1.NewTime(r.clock.Now())}
	defer func() {
		if p.reserved != "" {
			r.ledger.release(req.NamespacedName, p.reserved)
		}
	}()

	// A finished run's evidence is stored beyond it first, in a pass of its
	// own: the finalizer step below ends the passes of finished runs.
	if stored, err := r.storeEvidence(ctx, p); stored || err != nil {
		return r.result(p), err
	}

	// Deletion and the finalizer first: they decide whether anything else
	// happens in this pass.
	done, err := r.reconcileFinalizer(ctx, p)
	if err != nil || done {
		return r.result(p), err
	}

	if !run.Status.Phase.Terminal() {
		steps := []func(context.Context, *pass) error{
			r.reconcileStop,     // harnessrun_cancel.go
			r.reconcileDeadline, // harnessrun_deadline.go
			r.reconcileNodeLoss, // harnessrun_nodeloss.go
			r.reconcileDispatch, // harnessrun_dispatch.go
		}
		for _, step := range steps {
			if err := step(ctx, p); err != nil {
				return ctrl.Result{}, err
			}
			if p.run.Status.Phase.Terminal() {
				break
			}
		}
	}

	if !p.quiet {
		r.markFinished(p) // harnessrun_finished.go
	}

	if err := r.writeStatus(ctx, p); err != nil {
		if p.scheduled && !definitiveFailure(err) {
			// The binding may have been written (a timeout, a lost
			// connection): keep the slot reserved until the cache shows the
			// run or the reservation expires, so it cannot be given twice.
			r.ledger.confirm(req.NamespacedName, p.reserved)
			p.reserved = ""
		}
		if apierrors.IsConflict(err) {
			// Someone (the node-agent, or our own earlier write the cache
			// has not shown yet) changed the run: the watch delivers the
			// newer version, and the pass is also tried again shortly.
			// Not an error: an operator would read controller-runtime's
			// "Reconciler error" as a fault, and it is the ordinary
			// course of optimistic concurrency.
			logger.V(1).Info("status write conflicted; will retry with the newer run", "run", req.NamespacedName)
			if p.scheduled {
				r.metrics.bindingConflicts.Inc()
			}
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, err
	}
	r.afterWrite(ctx, p)
	return r.result(p), nil
}

// conflictRetry is when a pass whose status write conflicted is tried
// again, if the watch has not brought the newer version by then.
const conflictRetry = 200 * time.Millisecond

// definitiveFailure reports whether a failed write certainly changed nothing.
func definitiveFailure(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsInvalid(err) || apierrors.IsNotFound(err) ||
		apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) || apierrors.IsUnauthorized(err)
}

func (r *HarnessRunReconciler) result(p *pass) ctrl.Result {
	return ctrl.Result{RequeueAfter: p.requeueAfter}
}

// writeStatus writes the run's status once, if this pass changed it, under
// optimistic concurrency: the patch carries the resourceVersion the pass read,
// so a write based on a stale read fails with a conflict instead of
// overwriting the node-agent's or binding a run twice.
func (r *HarnessRunReconciler) writeStatus(ctx context.Context, p *pass) error {
	if equalStatus(&p.orig.Status, &p.run.Status) {
		return nil
	}
	p.run.Status.ObservedGeneration = p.run.Generation
	// A message over its schema bound would fail the whole write, and the
	// run could never end.
	p.run.Status.Fit()
	patch := client.MergeFromWithOptions(p.orig, client.MergeFromWithOptimisticLock{})
	if err := r.client.Status().Patch(ctx, p.run, patch); err != nil {
		return fmt.Errorf("writing status of HarnessRun %s/%s: %w", p.run.Namespace, p.run.Name, err)
	}
	r.written.wrote(client.ObjectKeyFromObject(p.run), p.run.ResourceVersion)
	return nil
}

// afterWrite records what a successful status write did: the binding stays
// reserved until the cache shows it, Events are recorded, metrics observed.
func (r *HarnessRunReconciler) afterWrite(ctx context.Context, p *pass) {
	key := client.ObjectKeyFromObject(p.run)
	if p.scheduled {
		r.ledger.confirm(key, p.reserved)
		p.reserved = ""
		r.metrics.schedulingLatency.Observe(r.clock.Since(p.pendingSince).Seconds())
	}
	for _, e := range p.events {
		r.recorder.Eventf(p.run, e.related, e.eventType, e.reason, e.action, "%s", e.note)
	}
	if finishedMarked(p.run) {
		r.metrics.observeFinished(p.run)
	}
	if p.orig.Status.Phase != p.run.Status.Phase {
		log.FromContext(ctx).Info("phase changed", "run", key, "from", effectivePhase(p.orig), "to", p.run.Status.Phase,
			"reason", p.run.Status.Reason, "node", p.run.Status.NodeName, "attempt", p.run.Status.Attempt)
	}
}

// equalStatus reports whether a pass left the status as it was.
// meta.SetStatusCondition keeps the transition time of a condition whose
// status did not change, so an unchanged condition compares equal.
func equalStatus(a, b *harnessv1.HarnessRunStatus) bool {
	return apiequality.Semantic.DeepEqual(a, b)
}
