// Package nodeagent is the per-node daemon of HarnessFacts. It registers the
// node as a HarnessNode and heartbeats a Lease, watches only the HarnessRuns
// bound to its node (a field selector on status.nodeName), claims each bound
// attempt with optimistic concurrency, executes it through an Executor, and
// writes the outcome back as status and an evidence ConfigMap owned by the run.
//
// Status is written once per phase transition: Running when claimed, the
// terminal phase when done. An attempt is never executed twice: a claim is a
// status write conditioned on the resourceVersion the agent read, and a run
// found Running that this process did not claim (it was claimed before a
// restart) is reported with Ready=False, reason NodeAgentRestarted, and the
// controller ends it as Failed, class Infrastructure, or retries it.
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Options configure an Agent.
type Options struct {
	// NodeName names the HarnessNode and its Lease: the Kubernetes Node's name.
	NodeName string
	// LeaseNamespace holds the heartbeat Lease.
	LeaseNamespace string
	// LeaseDuration is how long the Lease stays fresh; it is renewed every
	// quarter of it. Default 40s.
	LeaseDuration time.Duration
	// Slots is how many runs execute at once.
	Slots int32
	// Adapters are the agent CLIs found on the node.
	Adapters []harnessv1.AdapterInfo
	// SandboxModes are the preflight results.
	SandboxModes []harnessv1.SandboxModeInfo
	// ExtraLabels are added to the labels mirrored from the Node.
	ExtraLabels map[string]string
	// Executor executes claimed attempts.
	Executor Executor
	// Clock tells time; the real clock when nil.
	Clock clock.WithTicker
}

// Agent is the node-agent of one node.
type Agent struct {
	opts      Options
	client    client.Client
	apiReader client.Reader
	recorder  events.EventRecorder

	mu        sync.Mutex
	executing map[types.UID]*execution
	// swept is closed once runs left Running by an earlier process were ended.
	swept chan struct{}
	wg    sync.WaitGroup
}

// execution is one attempt this process claimed and is executing.
type execution struct {
	key     types.NamespacedName
	attempt int32
	cancel  context.CancelCauseFunc
	// finishing is set once the agent is done and its outcome is being
	// written: the slot is free (the controller may already bind the next
	// run), but the run is still this process's, never an orphan.
	finishing bool
}

// StopCause is the cause of an execution's context when the run must stop.
type StopCause struct {
	// Reason is harnessv1.ReasonCancelled or harnessv1.ReasonDeleted.
	Reason string
	// Message says why in plain words.
	Message string
}

func (s *StopCause) Error() string { return s.Message }

// ManagerOptions returns the parts of a manager's options the node-agent
// needs: a cache that holds only the runs bound to this node (a field
// selector on status.nodeName, so a node never sees, or needs RBAC for, the
// cluster's other runs), and direct reads for everything else it touches
// (its own HarnessNode and Lease, fixture ConfigMaps, selected Secrets), which
// must never be cached cluster-wide.
func ManagerOptions(nodeName string) (cache.Options, client.Options) {
	return cache.Options{
			ByObject: map[client.Object]cache.ByObject{
				&harnessv1.HarnessRun{}: {Field: fields.OneTermEqualSelector("status.nodeName", nodeName)},
			},
			DefaultTransform: cache.TransformStripManagedFields(),
		}, client.Options{Cache: &client.CacheOptions{
			DisableFor: []client.Object{&harnessv1.HarnessNode{}, &coordinationv1.Lease{}, &corev1.ConfigMap{},
				&corev1.Secret{}, &corev1.Node{}},
		}}
}

// New creates an Agent and adds it to mgr: the heartbeat, the claim
// reconciler and the sweep of runs orphaned by an earlier process. mgr's
// cache must hold only this node's runs (see CacheOptions).
func New(mgr manager.Manager, opts Options) (*Agent, error) {
	if opts.NodeName == "" || opts.LeaseNamespace == "" {
		return nil, errors.New("node-agent: the node name and the Lease namespace are required")
	}
	if opts.Executor == nil {
		return nil, errors.New("node-agent: an Executor is required")
	}
	if opts.Slots < 1 {
		return nil, fmt.Errorf("node-agent: slots must be at least 1, got %d", opts.Slots)
	}
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration = 40 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	a := &Agent{
		opts:      opts,
		client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		recorder:  mgr.GetEventRecorder("harnessfacts-node-agent"),
		executing: map[types.UID]*execution{},
		swept:     make(chan struct{}),
	}
	if err := mgr.Add(manager.RunnableFunc(a.start)); err != nil {
		return nil, err
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("node-agent").
		For(&harnessv1.HarnessRun{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Complete(reconcile.Func(a.reconcile))
	return a, err
}

// start creates the Lease, registers the node, reports the runs an earlier
// process left Running, and heartbeats until ctx ends; then it waits for the executions to write what
// they know.
func (a *Agent) start(ctx context.Context) error {
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("node", a.opts.NodeName))
	// The Lease first: a HarnessNode that says Ready has a fresh Lease.
	if err := a.renewLease(ctx); err != nil {
		return err
	}
	if err := a.register(ctx); err != nil {
		return err
	}
	if err := a.sweep(ctx); err != nil {
		return err
	}
	close(a.swept)
	err := a.heartbeat(ctx)
	a.wg.Wait()
	return err
}

// sweep ends the runs an earlier node-agent process claimed on this node and
// never finished: their agent died with it (bwrap --die-with-parent), so the
// attempt cannot be trusted and is not executed again.
func (a *Agent) sweep(ctx context.Context) error {
	var runs harnessv1.HarnessRunList
	if err := a.client.List(ctx, &runs); err != nil { // the cache holds only this node's runs
		return fmt.Errorf("listing this node's runs: %w", err)
	}
	for i := range runs.Items {
		run := &runs.Items[i]
		if run.Status.NodeName != a.opts.NodeName || run.Status.Phase != harnessv1.RunRunning {
			continue
		}
		if err := a.markOrphaned(ctx, run); err != nil {
			return err
		}
	}
	return nil
}

// markOrphaned reports an attempt this process did not claim (an earlier
// process did, and died with its agent): Ready=False with reason
// NodeAgentRestarted, phase unchanged. The controller then ends the run
// (Failed, class Infrastructure) or retries it while spec.retries allows;
// the attempt itself is never executed again.
func (a *Agent) markOrphaned(ctx context.Context, run *harnessv1.HarnessRun) error {
	if c := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionReady); c != nil &&
		c.Reason == harnessv1.ReasonNodeAgentRestarted {
		return nil
	}
	base := run.DeepCopy()
	msg := fmt.Sprintf("the node-agent on %s restarted during attempt %d; the attempt's agent was killed with it and its run dir removed",
		a.opts.NodeName, run.Status.Attempt)
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: harnessv1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: harnessv1.ReasonNodeAgentRestarted, Message: msg, ObservedGeneration: run.Generation,
		LastTransitionTime: metav1.NewTime(a.opts.Clock.Now())})
	err := a.client.Status().Patch(ctx, run, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // the next version comes through the watch
	}
	if err != nil {
		return fmt.Errorf("reporting the orphaned attempt of %s: %w", client.ObjectKeyFromObject(run), err)
	}
	a.recorder.Eventf(run, nil, corev1.EventTypeWarning, harnessv1.ReasonNodeAgentRestarted, "Recover", "%s", msg)
	return nil
}

func (a *Agent) executingCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.executing)
}

// slotsBusy counts the executions whose agent is still running.
func (a *Agent) slotsBusy() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, e := range a.executing {
		if !e.finishing {
			n++
		}
	}
	return n
}

// reconcile acts on one run bound to this node.
func (a *Agent) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	select {
	case <-a.swept:
	case <-ctx.Done():
		return reconcile.Result{}, nil
	}
	run := &harnessv1.HarnessRun{}
	if err := a.client.Get(ctx, req.NamespacedName, run); err != nil {
		if apierrors.IsNotFound(err) {
			a.stopByKey(req.NamespacedName, &StopCause{Reason: harnessv1.ReasonDeleted, Message: "the run was deleted"})
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	a.mu.Lock()
	exe := a.executing[run.UID]
	a.mu.Unlock()

	if run.Status.NodeName != a.opts.NodeName || run.Status.Phase.Terminal() {
		if exe != nil {
			exe.cancel(&StopCause{Reason: harnessv1.ReasonStopped, Message: "the run is no longer bound to this node"})
		}
		return reconcile.Result{}, nil
	}
	if cause := stopRequested(run); cause != nil && exe != nil {
		exe.cancel(cause)
		return reconcile.Result{}, nil
	}

	switch run.Status.Phase {
	case harnessv1.RunScheduled:
		if stopRequested(run) != nil {
			return reconcile.Result{}, nil // the controller ends runs never claimed
		}
		return a.claim(ctx, run)
	case harnessv1.RunRunning:
		if exe == nil || exe.attempt != run.Status.Attempt {
			// Claimed by an earlier process of this node-agent (or a
			// previous attempt): never execute an attempt twice.
			return reconcile.Result{}, a.markOrphaned(ctx, run)
		}
	}
	return reconcile.Result{}, nil
}

// stopRequested says whether the run must stop, and why.
func stopRequested(run *harnessv1.HarnessRun) *StopCause {
	switch {
	case !run.DeletionTimestamp.IsZero():
		return &StopCause{Reason: harnessv1.ReasonDeleted, Message: "the run was deleted while it ran"}
	case run.Spec.Cancel:
		return &StopCause{Reason: harnessv1.ReasonCancelled, Message: "spec.cancel stopped the run"}
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionStopRequested); c != nil && c.Status == metav1.ConditionTrue {
		reason := c.Reason
		if reason != harnessv1.ReasonDeleted {
			reason = harnessv1.ReasonCancelled
		}
		return &StopCause{Reason: reason, Message: "the controller asked to stop the run: " + c.Message}
	}
	return nil
}

func (a *Agent) stopByKey(key types.NamespacedName, cause *StopCause) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, exe := range a.executing {
		if exe.key == key {
			exe.cancel(cause)
		}
	}
}

// claim starts the bound attempt: phase Running with startTime, written only
// if nobody changed the run since this agent read it.
func (a *Agent) claim(ctx context.Context, run *harnessv1.HarnessRun) (reconcile.Result, error) {
	if a.slotsBusy() >= int(a.opts.Slots) {
		// The controller never binds more runs than slots; this only
		// happens while a finished run's status is on its way.
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}

	now := metav1.NewTime(a.opts.Clock.Now())
	base := run.DeepCopy()
	st := &run.Status
	st.Phase, st.StartTime, st.Reason = harnessv1.RunRunning, &now, harnessv1.ReasonRunning
	st.Message = fmt.Sprintf("the node-agent on %s started attempt %d", a.opts.NodeName, st.Attempt)
	st.ObservedGeneration = run.Generation
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: harnessv1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: harnessv1.ReasonRunning, Message: st.Message, ObservedGeneration: run.Generation, LastTransitionTime: now})
	if err := a.client.Status().Patch(ctx, run, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil // a newer version comes through the watch
		}
		return reconcile.Result{}, fmt.Errorf("claiming %s: %w", client.ObjectKeyFromObject(run), err)
	}
	a.recorder.Eventf(run, nil, corev1.EventTypeNormal, string(harnessv1.RunRunning), "Start", "%s", st.Message)

	execCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	exe := &execution{key: client.ObjectKeyFromObject(run), attempt: st.Attempt, cancel: cancel}
	a.mu.Lock()
	a.executing[run.UID] = exe
	a.mu.Unlock()
	a.wg.Add(1)
	go a.execute(execCtx, run.DeepCopy(), exe)
	return reconcile.Result{}, nil
}

// execute runs the attempt and writes its outcome, whatever happens.
func (a *Agent) execute(ctx context.Context, run *harnessv1.HarnessRun, exe *execution) {
	defer a.wg.Done()
	defer func() {
		exe.cancel(nil)
		a.mu.Lock()
		delete(a.executing, run.UID)
		a.mu.Unlock()
	}()
	logger := log.FromContext(ctx).WithValues("run", exe.key, "attempt", exe.attempt)
	ctx = log.IntoContext(ctx, logger)

	res := a.executeSafely(ctx, run)
	a.mu.Lock()
	exe.finishing = true
	a.mu.Unlock()
	// The outcome must be written even when the run was cancelled; give it
	// its own bounded context.
	writeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := a.finish(writeCtx, run, res); err != nil {
		logger.Error(err, "writing the outcome failed")
	}
}

// executeSafely turns a panicking executor into an infrastructure failure
// instead of a run stuck Running.
func (a *Agent) executeSafely(ctx context.Context, run *harnessv1.HarnessRun) (res *Result) {
	defer func() {
		if p := recover(); p != nil {
			log.FromContext(ctx).Error(fmt.Errorf("%v", p), "the executor panicked")
			res = &Result{Status: harnessv1.HarnessRunStatus{Phase: harnessv1.RunFailed, Verdict: harnessv1.VerdictError,
				FailureClass: harnessv1.FailureInfrastructure, Reason: harnessv1.ReasonExecutorPanic,
				Message: fmt.Sprintf("the node-agent failed while executing the run: %v", p)}}
		}
	}()
	res = a.opts.Executor.Execute(ctx, run)
	if res == nil {
		res = &Result{Status: harnessv1.HarnessRunStatus{Phase: harnessv1.RunFailed, Verdict: harnessv1.VerdictError,
			FailureClass: harnessv1.FailureInfrastructure, Reason: harnessv1.ReasonExecutorPanic, Message: "the executor returned no result"}}
	}
	return res
}

// finish writes the evidence ConfigMap (owned by the run) and then the
// terminal status, in one status write.
func (a *Agent) finish(ctx context.Context, run *harnessv1.HarnessRun, res *Result) error {
	key := client.ObjectKeyFromObject(run)
	if res.Evidence != nil {
		name, err := a.writeEvidence(ctx, run, res.Evidence)
		if err != nil {
			// The receipt digest stays in status; the evidence itself is
			// lost, and status says so.
			res.Status.Message += "; writing the evidence ConfigMap failed: " + err.Error()
		} else if res.Status.Evidence != nil {
			res.Status.Evidence.ConfigMapName = name
		}
	}
	var written *harnessv1.HarnessRun
	// The first try writes over the run as this process last wrote it (the
	// claim); only when someone changed it since is it read again.
	cur := run.DeepCopy()
	fresh := false
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if fresh {
			cur = &harnessv1.HarnessRun{}
			if err := a.apiReader.Get(ctx, key, cur); err != nil {
				return err
			}
		}
		fresh = true
		if cur.UID != run.UID || cur.Status.Attempt != run.Status.Attempt || cur.Status.Phase.Terminal() ||
			cur.Status.NodeName != a.opts.NodeName {
			return nil // the controller already ended or rebound this attempt
		}
		apply(cur, res, a.opts.Clock.Now())
		if err := a.client.Status().Update(ctx, cur); err != nil {
			return err
		}
		written = cur
		return nil
	})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("writing the outcome of %s: %w", key, err)
	}
	if written == nil {
		return nil
	}
	eventType := corev1.EventTypeNormal
	if written.Status.Verdict != harnessv1.VerdictPass {
		eventType = corev1.EventTypeWarning
	}
	a.recorder.Eventf(written, nil, eventType, string(written.Status.Phase), "Finish", "%s", written.Status.Message)
	for _, w := range res.Warnings {
		a.recorder.Eventf(written, nil, corev1.EventTypeWarning, w.Reason, "Execute", "%s", w.Message)
	}
	return nil
}

// apply merges the executor's outcome into the run's status.
func apply(run *harnessv1.HarnessRun, res *Result, now time.Time) {
	t := metav1.NewTime(now)
	st := &run.Status
	out := res.Status
	st.Phase, st.Verdict, st.FailureClass = out.Phase, out.Verdict, out.FailureClass
	st.Reason, st.Message = out.Reason, out.Message
	st.CompletionTime = &t
	st.ObservedGeneration = run.Generation
	st.Sandbox, st.Agent, st.MCP, st.Network = out.Sandbox, out.Agent, out.MCP, out.Network
	st.Checks, st.Artifacts, st.Evidence = out.Checks, out.Artifacts, out.Evidence
	for _, c := range out.Conditions {
		c.ObservedGeneration = run.Generation
		if c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = t
		}
		meta.SetStatusCondition(&st.Conditions, c)
	}
	ready := metav1.Condition{Type: harnessv1.ConditionReady, Status: metav1.ConditionFalse, Reason: out.Reason,
		Message: truncate(out.Message, 32768), ObservedGeneration: run.Generation, LastTransitionTime: t}
	if out.Verdict == harnessv1.VerdictPass && out.Phase == harnessv1.RunSucceeded {
		ready.Status = metav1.ConditionTrue
	}
	switch ready.Reason {
	case "":
		ready.Reason = harnessv1.ReasonCompleted
	case harnessv1.ReasonCancelled, harnessv1.ReasonDeleted:
		// The cancel protocol: StopRequested keeps its reason, Ready says
		// the node-agent stopped the run.
		ready.Reason = harnessv1.ReasonStopped
	}
	meta.SetStatusCondition(&st.Conditions, ready)
}

// writeEvidence creates (or, for a retried write, updates) the run's
// evidence ConfigMap, owned by the run so it goes when the run goes.
func (a *Agent) writeEvidence(ctx context.Context, run *harnessv1.HarnessRun, ev *Evidence) (string, error) {
	fill := func(cm *corev1.ConfigMap) error {
		cm.Labels = map[string]string{
			LabelRunUID:  string(run.UID),
			LabelAttempt: fmt.Sprint(run.Status.Attempt),
		}
		cm.Data, cm.BinaryData = ev.Data, ev.BinaryData
		return controllerutil.SetControllerReference(run, cm, a.client.Scheme())
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: EvidenceName(run), Namespace: run.Namespace}}
	if err := fill(cm); err != nil {
		return "", err
	}
	// Create first: the ConfigMap exists already only when an earlier
	// write of this same outcome was cut off.
	err := a.client.Create(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: EvidenceName(run), Namespace: run.Namespace}}
		_, err = controllerutil.CreateOrUpdate(ctx, a.client, cm, func() error { return fill(cm) })
	}
	return cm.Name, err
}

// Labels on evidence ConfigMaps.
const (
	LabelRunUID  = "harnessfacts.io/run-uid"
	LabelAttempt = "harnessfacts.io/attempt"
)

// EvidenceName is the name of the evidence ConfigMap of the run's current
// attempt.
func EvidenceName(run *harnessv1.HarnessRun) string {
	suffix := fmt.Sprintf("-evidence-%d", run.Status.Attempt)
	name := run.Name
	if len(name)+len(suffix) > 253 {
		name = name[:253-len(suffix)]
	}
	return name + suffix
}

// truncate keeps at most n bytes of s, cut at a character boundary: the API
// server would turn half a UTF-8 character into garbage.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
