package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// SuiteOptions tune the HarnessSuite reconciler. The zero value is usable.
type SuiteOptions struct {
	// MaxConcurrentReconciles is the number of HarnessSuite workers.
	MaxConcurrentReconciles int
	// CreateWorkers is how many runs one reconcile creates at once.
	CreateWorkers int
	// ExpectationTTL bounds how long a run this controller created counts
	// as existing while the cache does not show it (a create whose outcome
	// was lost).
	ExpectationTTL time.Duration
	// Registerer receives the suite metrics (harnessfacts_suite_runs); none
	// when nil. Setup passes controller-runtime's registry.
	Registerer prometheus.Registerer
}

func (o SuiteOptions) withDefaults() SuiteOptions {
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = 4
	}
	if o.CreateWorkers <= 0 {
		o.CreateWorkers = 8
	}
	if o.ExpectationTTL <= 0 {
		// As the ReplicaSet controller's: long enough for a cache that lags
		// on a saturated machine, short enough that a lost create does
		// not stall a round for long.
		o.ExpectationTTL = 5 * time.Minute
	}
	return o
}

// CacheByObject is what the managers running the HarnessSuite reconciler
// must cache, merged into cache.Options.ByObject: only the ConfigMaps
// labelled harnessfacts.io/fixture=true, so the controller never holds the
// namespace's other ConfigMaps or the runs' evidence in memory.
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}:       {Label: labels.SelectorFromSet(labels.Set{harnessv1.LabelFixture: "true"}), Transform: cachedFixture},
		&harnessv1.HarnessRun{}:   {Transform: cachedRun},
		&harnessv1.HarnessSuite{}: {Transform: cachedSuite},
		&corev1.Node{}:            {Transform: cachedNode},
	}
}

// HarnessSuiteReconciler expands each HarnessSuite's matrix into HarnessRuns
// it owns (harnesssuite_matrix.go), at most spec.parallelism unfinished at
// once, hashes its fixtures (harnesssuite_fixtures.go), and sums the runs of
// the current round up into the status (harnesssuite_status.go). A new
// spec.revision starts a new round: the earlier round's summary goes to
// status.rounds and its runs are deleted.
//
// The runs of a suite are found through the IndexRunSuite cache index, never
// by listing the namespace's runs; runs it created that the cache does not
// show yet are remembered (expectations), so parallelism holds while the
// cache lags.
type HarnessSuiteReconciler struct {
	client   client.Client
	recorder events.EventRecorder
	clock    clock.PassiveClock
	opts     SuiteOptions

	mu       sync.Mutex
	expected map[types.NamespacedName]map[string]time.Time

	// progress is harnessfacts_suite_runs{namespace,suite,state}: the
	// current round's runs of each suite by state, as last written to its
	// status.
	progress *prometheus.GaugeVec
}

// NewHarnessSuiteReconciler returns a reconciler that reads through c (a
// cache-backed client with the indexes of SetupIndexes and the ConfigMap
// cache of CacheByObject), writes through c, records Events with recorder
// and tells time with clk.
func NewHarnessSuiteReconciler(c client.Client, recorder events.EventRecorder, clk clock.PassiveClock, opts SuiteOptions) *HarnessSuiteReconciler {
	return &HarnessSuiteReconciler{client: c, recorder: recorder, clock: clk, opts: opts.withDefaults(),
		expected: map[types.NamespacedName]map[string]time.Time{},
		progress: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "harnessfacts_suite_runs",
			Help: "The current round's runs of each HarnessSuite by state: total, finished, passed, failed, errored, running, pending."},
			[]string{"namespace", "suite", "state"})}
}

// SetupWithManager registers the "harnesssuite" controller: it reconciles a
// suite when its spec changes, when one of its runs changes (owner
// reference), and when a fixture ConfigMap of its namespace changes.
func (r *HarnessSuiteReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.opts.Registerer != nil {
		if err := r.opts.Registerer.Register(r.progress); err != nil {
			return fmt.Errorf("registering the suite metrics: %w", err)
		}
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("harnesssuite").
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles}).
		For(&harnessv1.HarnessSuite{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&harnessv1.HarnessRun{}).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.fixtureToSuites)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the harnesssuite controller: %w", err)
	}
	return nil
}

// fixtureToSuites maps a fixture ConfigMap to the suites of its namespace.
func (r *HarnessSuiteReconciler) fixtureToSuites(ctx context.Context, obj client.Object) []reconcile.Request {
	if obj.GetLabels()[harnessv1.LabelFixture] != "true" {
		return nil
	}
	suites := &harnessv1.HarnessSuiteList{}
	if err := r.client.List(ctx, suites, client.InNamespace(obj.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "listing suites for a fixture", "configMap", obj.GetName())
		return nil
	}
	out := make([]reconcile.Request, 0, len(suites.Items))
	for i := range suites.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&suites.Items[i])})
	}
	return out
}

// suitePass is what one Reconcile of a suite decided.
type suitePass struct {
	suite *harnessv1.HarnessSuite
	orig  *harnessv1.HarnessSuite
	now   metav1.Time

	events []runEvent
	// refused is the API server's refusal of a run this pass tried to
	// create (an admission policy, a quota, an invalid template), if any.
	refused string
}

func (p *suitePass) setCondition(condType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&p.suite.Status.Conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: message,
		ObservedGeneration: p.suite.Generation, LastTransitionTime: p.now,
	})
}

func (p *suitePass) event(eventType, reason, action, note string) {
	p.events = append(p.events, runEvent{eventType: eventType, reason: reason, action: action, note: note})
}

// Reconcile implements reconcile.Reconciler.
func (r *HarnessSuiteReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	suite := &harnessv1.HarnessSuite{}
	if err := r.client.Get(ctx, req.NamespacedName, suite); err != nil {
		if apierrors.IsNotFound(err) {
			r.forgetSuite(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting HarnessSuite %s: %w", req.NamespacedName, err)
	}
	if suite.DeletionTimestamp != nil {
		// Its runs go with it (owner references); creating more would
		// race the garbage collector.
		return ctrl.Result{}, nil
	}
	p := &suitePass{suite: suite, orig: suite.DeepCopy(), now: metav1.NewTime(r.clock.Now())}

	r.reconcileRound(p)                                 // harnesssuite_status.go
	fixtures, problem, err := r.resolveFixtures(ctx, p) // harnesssuite_fixtures.go
	if err != nil {
		return ctrl.Result{}, err
	}
	runs, err := r.suiteRuns(ctx, suite)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.deleteEarlierRounds(ctx, p, runs); err != nil { // harnesssuite_matrix.go
		return ctrl.Result{}, err
	}
	plan := planRuns(suite, fixtures)
	created, createErr := r.createRuns(ctx, p, plan, runs, problem == "") // harnesssuite_matrix.go
	own, foreign := ownRuns(suite, plan, runs, r.client.Scheme())         // harnesssuite_own.go
	if len(foreign) > 0 && p.refused == "" {
		p.refused = foreignRunsMessage(foreign)
	}
	r.summarize(p, plan, fixtures, own, created, problem) // harnesssuite_status.go

	if err := r.writeStatus(ctx, p); err != nil {
		if apierrors.IsConflict(err) {
			// As for a run (conflictRetry): the newer suite comes with the
			// watch; not a fault to log.
			log.FromContext(ctx).V(1).Info("status write conflicted; will retry with the newer suite", "suite", req.NamespacedName)
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, err
	}
	r.observeProgress(p.suite)
	for _, e := range p.events {
		r.recorder.Eventf(p.suite, nil, e.eventType, e.reason, e.action, "%s", e.note)
	}
	if createErr != nil {
		return ctrl.Result{}, createErr
	}
	return ctrl.Result{RequeueAfter: r.expectationRecheck(req.NamespacedName)}, nil
}

// suiteRuns returns the runs the suite owns, from the IndexRunSuite index.
func (r *HarnessSuiteReconciler) suiteRuns(ctx context.Context, suite *harnessv1.HarnessSuite) ([]*harnessv1.HarnessRun, error) {
	list := &harnessv1.HarnessRunList{}
	if err := r.client.List(ctx, list, client.InNamespace(suite.Namespace),
		client.MatchingFields{IndexRunSuite: string(suite.UID)}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the runs of HarnessSuite %s/%s: %w", suite.Namespace, suite.Name, err)
	}
	out := make([]*harnessv1.HarnessRun, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// writeStatus writes the suite's status once, if the pass changed it.
func (r *HarnessSuiteReconciler) writeStatus(ctx context.Context, p *suitePass) error {
	if apiequality.Semantic.DeepEqual(&p.orig.Status, &p.suite.Status) {
		return nil
	}
	p.suite.Status.ObservedGeneration = p.suite.Generation
	p.suite.Status.Fit()
	patch := client.MergeFromWithOptions(p.orig, client.MergeFromWithOptimisticLock{})
	if err := r.client.Status().Patch(ctx, p.suite, patch); err != nil {
		return fmt.Errorf("writing status of HarnessSuite %s/%s: %w", p.suite.Namespace, p.suite.Name, err)
	}
	return nil
}

// expect remembers that run name of suite key was created (or may have
// been), until the cache shows it or ExpectationTTL passes.
func (r *HarnessSuiteReconciler) expect(key types.NamespacedName, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.expected[key]
	if m == nil {
		m = map[string]time.Time{}
		r.expected[key] = m
	}
	m[name] = r.clock.Now()
}

// pendingExpectations drops the expectations the cache now shows (seen) or
// that expired, and returns the names still expected.
func (r *HarnessSuiteReconciler) pendingExpectations(key types.NamespacedName, seen func(string) bool) map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	out := map[string]bool{}
	for name, at := range r.expected[key] {
		if seen(name) || now.Sub(at) > r.opts.ExpectationTTL {
			delete(r.expected[key], name)
			continue
		}
		out[name] = true
	}
	if len(r.expected[key]) == 0 {
		delete(r.expected, key)
	}
	return out
}

// expectationRecheck is when to look again so that a create whose run never
// shows up in the cache stops counting: never, when nothing is expected (the
// runs' own events bring the suite back).
func (r *HarnessSuiteReconciler) expectationRecheck(key types.NamespacedName) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.expected[key]) == 0 {
		return 0
	}
	return r.opts.ExpectationTTL
}

func (r *HarnessSuiteReconciler) forgetSuite(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.expected, key)
	r.progress.DeletePartialMatch(prometheus.Labels{"namespace": key.Namespace, "suite": key.Name})
}

// observeProgress sets harnessfacts_suite_runs from the suite's status.
func (r *HarnessSuiteReconciler) observeProgress(s *harnessv1.HarnessSuite) {
	c := s.Status.Counts
	for state, n := range map[string]int32{"total": c.Total, "finished": c.Finished, "passed": c.Passed, "failed": c.Failed,
		"errored": c.Errored, "running": c.Running, "pending": c.Pending} {
		r.progress.WithLabelValues(s.Namespace, s.Name, state).Set(float64(n))
	}
}
