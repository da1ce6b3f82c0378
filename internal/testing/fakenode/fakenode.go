// Package fakenode is a stand-in for the node-agent in tests: it registers a
// HarnessNode with adapters, slots and labels, heartbeats its Lease, claims
// the runs bound to it and writes their status the way the real node-agent
// does (phase Running with startTime, then a terminal phase with verdict and
// failure class, each with an Event), and obeys StopRequested. It runs no
// agent: how long a run takes and how it ends are options.
package fakenode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// ReportingController names the fake node-agent in the Events it records.
const ReportingController = "harnessfacts.io/fake-node-agent"

// Outcome is how a run ends on a fake node.
type Outcome struct {
	Phase   harnessv1.RunPhase
	Verdict harnessv1.Verdict
	Class   harnessv1.FailureClass
	Reason  string
	Message string
	// Usage, when set, is written to status.usage with the outcome, as the
	// node-agent writes what the model gateway counted.
	Usage *harnessv1.UsageStatus
	// Reward is the run's status.reward (a check's Harbor reward).
	Reward string
}

// The usual outcomes.
var (
	// Pass: the agent did the task and every check passed.
	Pass = Outcome{Phase: harnessv1.RunSucceeded, Verdict: harnessv1.VerdictPass, Reason: harnessv1.ReasonCompleted, Message: "the agent finished and every check passed"}
	// AgentFailed: the agent exited non-zero.
	AgentFailed = Outcome{Phase: harnessv1.RunSucceeded, Verdict: harnessv1.VerdictFail, Class: harnessv1.FailureAgent, Reason: harnessv1.ReasonAgentFailed, Message: "the agent exited with code 1"}
)

// Options describe a fake node and how its node-agent behaves.
type Options struct {
	// Name is the HarnessNode's (and its Lease's) name.
	Name string
	// Adapters maps the adapters found on the node to their CLI versions.
	Adapters map[harnessv1.Adapter]string
	// Slots is how many runs the node executes at once.
	Slots int32
	// Labels are the Node labels the HarnessNode mirrors.
	Labels map[string]string
	// LeaseNamespace holds the heartbeat Lease; it must exist.
	LeaseNamespace string
	// LeaseDuration is the Lease's duration (default 10s); the Lease is
	// renewed every quarter of it.
	LeaseDuration time.Duration
	// NotReady registers the node with Ready=False (no sandbox passed
	// preflight).
	NotReady bool
	// NoClaim leaves the runs bound to the node Scheduled, like a node-agent
	// that never gets to them.
	NoClaim bool
	// RunFor is how long a claimed run takes; negative means it never ends
	// by itself (a hung agent): only StopRequested or Finish ends it.
	RunFor time.Duration
	// Outcome decides how a run ends; Pass when nil.
	Outcome func(*harnessv1.HarnessRun) Outcome
	// Clock tells time for startTime, completionTime and the Lease; the real
	// clock when nil.
	Clock clock.Clock
}

// Node is a running fake node-agent.
type Node struct {
	opts   Options
	client client.Client
	cache  cache.Cache
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]

	cancel    context.CancelFunc
	heartbeat context.CancelFunc
	wg        sync.WaitGroup
	stopOnce  sync.Once

	mu        sync.Mutex
	started   map[types.NamespacedName]time.Time
	claims    int
	maxActive int
}

// Start registers the node, starts heartbeating and starts working on the
// runs bound to it (watched with a field selector on status.nodeName, as the
// real node-agent does). Stop it with Stop.
func Start(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, opts Options) (*Node, error) {
	if opts.Name == "" || opts.LeaseNamespace == "" {
		return nil, errors.New("fakenode: Name and LeaseNamespace are required")
	}
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration = 10 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Outcome == nil {
		opts.Outcome = func(*harnessv1.HarnessRun) Outcome { return Pass }
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	n := &Node{
		opts:   opts,
		client: c,
		// Retried at most a second apart, as the node-agent's own writes
		// are: the controllers' default backoff doubles without a bound
		// worth the name (1,000 s), and an API server away for a few
		// seconds put a run's next try 20-40 s off
		// (TestAPIServerOutageLosesNoNode failed so in CI).
		queue:   workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](5*time.Millisecond, time.Second)),
		started: map[types.NamespacedName]time.Time{},
	}
	if err := n.register(ctx); err != nil {
		return nil, err
	}
	n.cache, err = cache.New(cfg, cache.Options{
		Scheme: scheme,
		ByObject: map[client.Object]cache.ByObject{
			&harnessv1.HarnessRun{}: {Field: fields.OneTermEqualSelector("status.nodeName", opts.Name)},
		},
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, err
	}
	inf, err := n.cache.GetInformer(ctx, &harnessv1.HarnessRun{})
	if err != nil {
		return nil, err
	}
	enqueue := func(obj any) {
		if run, ok := obj.(*harnessv1.HarnessRun); ok {
			n.queue.Add(client.ObjectKeyFromObject(run))
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	hbCtx, hbCancel := context.WithCancel(runCtx)
	n.cancel, n.heartbeat = cancel, hbCancel
	n.wg.Add(3)
	go func() { defer n.wg.Done(); _ = n.cache.Start(runCtx) }()
	go func() { defer n.wg.Done(); n.heartbeatLoop(hbCtx) }()
	go func() { defer n.wg.Done(); n.work(runCtx) }()
	if !n.cache.WaitForCacheSync(ctx) {
		n.Stop()
		return nil, fmt.Errorf("fakenode %s: cache did not sync", opts.Name)
	}
	return n, nil
}

// Name is the node's name.
func (n *Node) Name() string { return n.opts.Name }

// Claims counts the runs this node claimed.
func (n *Node) Claims() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.claims
}

// MaxActive is the most non-terminal runs this node has seen bound to it at
// once: more than its slots means the controller overbooked it. The count is
// taken from the node-agent's watch, which delivers the runs' changes in
// order, so it is the true count at some moment.
func (n *Node) MaxActive() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.maxActive
}

// MarkRestarted reports, for a run this node is running, that the node-agent
// restarted during the attempt: Ready=False with reason NodeAgentRestarted,
// phase left Running for the controller to retry or end.
func (n *Node) MarkRestarted(ctx context.Context, key types.NamespacedName) error {
	return n.markReady(ctx, key, harnessv1.ReasonNodeAgentRestarted, "the node-agent restarted and lost the agent's process")
}

// MarkHandedBack reports, for a run this node is running, that its
// node-agent, shutting down, stopped the attempt and handed it back:
// Ready=False with reason HandedBack, phase left Running for the controller
// to schedule again.
func (n *Node) MarkHandedBack(ctx context.Context, key types.NamespacedName) error {
	return n.markReady(ctx, key, harnessv1.ReasonHandedBack, "the node-agent was shutting down and handed the attempt back")
}

func (n *Node) markReady(ctx context.Context, key types.NamespacedName, reason, message string) error {
	run := &harnessv1.HarnessRun{}
	if err := n.client.Get(ctx, key, run); err != nil {
		return err
	}
	base := run.DeepCopy()
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: harnessv1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: reason, Message: message,
		ObservedGeneration: run.Generation, LastTransitionTime: metav1.NewTime(n.opts.Clock.Now())})
	n.forget(key)
	return n.client.Status().Patch(ctx, run, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// StopHeartbeat stops renewing the Lease, as when the node dies, while the
// rest keeps going (it has no effect on runs then, the node being lost).
func (n *Node) StopHeartbeat() { n.heartbeat() }

// Stop stops the fake node-agent: no heartbeat, no more status writes. The
// HarnessNode and its Lease stay, as when a node-agent is killed.
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		n.cancel()
		n.queue.ShutDown()
		n.wg.Wait()
	})
}

// Deregister deletes the HarnessNode and its Lease.
func (n *Node) Deregister(ctx context.Context) error {
	err1 := client.IgnoreNotFound(n.client.Delete(ctx, &harnessv1.HarnessNode{ObjectMeta: metav1.ObjectMeta{Name: n.opts.Name}}))
	err2 := client.IgnoreNotFound(n.client.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n.opts.Name, Namespace: n.opts.LeaseNamespace}}))
	return errors.Join(err1, err2)
}

// SetSlots changes the node's slots, as an operator or the node-agent would.
func (n *Node) SetSlots(ctx context.Context, slots int32) error {
	node := &harnessv1.HarnessNode{}
	if err := n.client.Get(ctx, types.NamespacedName{Name: n.opts.Name}, node); err != nil {
		return err
	}
	base := node.DeepCopy()
	node.Spec.Slots = slots
	return n.client.Patch(ctx, node, client.MergeFrom(base))
}

// Finish ends a run this node is running with outcome, as when the agent
// exits; for runs held with a negative RunFor.
func (n *Node) Finish(ctx context.Context, key types.NamespacedName, outcome Outcome) error {
	run := &harnessv1.HarnessRun{}
	if err := n.client.Get(ctx, key, run); err != nil {
		return err
	}
	if run.Status.NodeName != n.opts.Name || run.Status.Phase != harnessv1.RunRunning {
		return fmt.Errorf("fakenode %s: run %s is %s on %q, not Running here", n.opts.Name, key, run.Status.Phase, run.Status.NodeName)
	}
	return n.end(ctx, run, outcome, false)
}

// SetUsage writes status.usage of a run this node is running, as the
// node-agent does while its model gateway counts.
func (n *Node) SetUsage(ctx context.Context, key types.NamespacedName, usage harnessv1.UsageStatus) error {
	run := &harnessv1.HarnessRun{}
	if err := n.client.Get(ctx, key, run); err != nil {
		return err
	}
	if run.Status.NodeName != n.opts.Name || run.Status.Phase != harnessv1.RunRunning {
		return fmt.Errorf("fakenode %s: run %s is %s on %q, not Running here", n.opts.Name, key, run.Status.Phase, run.Status.NodeName)
	}
	base := run.DeepCopy()
	run.Status.Usage = usage.DeepCopy()
	return n.client.Status().Patch(ctx, run, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

func (n *Node) register(ctx context.Context) error {
	now := n.opts.Clock.Now()
	node := &harnessv1.HarnessNode{
		ObjectMeta: metav1.ObjectMeta{Name: n.opts.Name},
		Spec:       harnessv1.HarnessNodeSpec{Slots: n.opts.Slots},
	}
	if err := n.client.Create(ctx, node); err != nil {
		return fmt.Errorf("fakenode %s: registering: %w", n.opts.Name, err)
	}
	ready := metav1.Condition{Type: harnessv1.ConditionNodeReady, Status: metav1.ConditionTrue, Reason: harnessv1.ReasonHeartbeat,
		Message: "the node-agent heartbeats and bwrap passed preflight", LastTransitionTime: metav1.NewTime(now)}
	modes := []harnessv1.SandboxModeInfo{{Mode: "bwrap", Available: true}}
	if n.opts.NotReady {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, harnessv1.ReasonSandboxUnavailable, "no sandbox mode passed preflight"
		modes[0] = harnessv1.SandboxModeInfo{Mode: "bwrap", Available: false, Message: "bwrap: user namespaces are disabled"}
	}
	node.Status = harnessv1.HarnessNodeStatus{OS: "linux", Arch: "amd64", AgentVersion: "fake", Labels: n.opts.Labels,
		LeaseNamespace: n.opts.LeaseNamespace, SandboxModes: modes, Conditions: []metav1.Condition{ready}}
	for a, v := range n.opts.Adapters {
		node.Status.Adapters = append(node.Status.Adapters, harnessv1.AdapterInfo{Name: a, Version: v})
	}
	if err := n.client.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("fakenode %s: writing status: %w", n.opts.Name, err)
	}
	secs := int32(n.opts.LeaseDuration / time.Second)
	if secs < 1 {
		secs = 1
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: n.opts.Name, Namespace: n.opts.LeaseNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &n.opts.Name, LeaseDurationSeconds: &secs,
			AcquireTime: &metav1.MicroTime{Time: now}, RenewTime: &metav1.MicroTime{Time: now}},
	}
	if err := n.client.Create(ctx, lease); err != nil {
		return fmt.Errorf("fakenode %s: creating Lease: %w", n.opts.Name, err)
	}
	return nil
}

func (n *Node) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(max(n.opts.LeaseDuration/4, 50*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lease := &coordinationv1.Lease{}
		if err := n.client.Get(ctx, types.NamespacedName{Namespace: n.opts.LeaseNamespace, Name: n.opts.Name}, lease); err != nil {
			continue
		}
		lease.Spec.RenewTime = &metav1.MicroTime{Time: n.opts.Clock.Now()}
		_ = n.client.Update(ctx, lease)
	}
}

func (n *Node) work(ctx context.Context) {
	for {
		key, shutdown := n.queue.Get()
		if shutdown {
			return
		}
		err := n.process(ctx, key)
		switch {
		case err == nil:
			n.queue.Forget(key)
		case ctx.Err() != nil:
		default:
			n.queue.AddRateLimited(key)
		}
		n.queue.Done(key)
	}
}

// process acts on one run bound to this node, as the node-agent would.
func (n *Node) process(ctx context.Context, key types.NamespacedName) error {
	run := &harnessv1.HarnessRun{}
	if err := n.cache.Get(ctx, key, run); err != nil {
		if apierrors.IsNotFound(err) {
			n.forget(key)
			return nil
		}
		return err
	}
	n.countActive(ctx)
	if run.Status.NodeName != n.opts.Name || run.Status.Phase.Terminal() {
		n.forget(key)
		return nil
	}
	switch run.Status.Phase {
	case harnessv1.RunScheduled:
		if n.opts.NoClaim {
			return nil
		}
		return n.claim(ctx, run)
	case harnessv1.RunRunning:
		if c := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionStopRequested); c != nil && c.Status == metav1.ConditionTrue {
			return n.end(ctx, run, Outcome{Phase: harnessv1.RunFailed, Reason: c.Reason,
				Message: "the node-agent stopped the agent: " + c.Message}, true)
		}
		n.mu.Lock()
		started, mine := n.started[key]
		n.mu.Unlock()
		if !mine || n.opts.RunFor < 0 {
			return nil
		}
		if left := n.opts.RunFor - n.opts.Clock.Since(started); left > 0 {
			n.queue.AddAfter(key, left)
			return nil
		}
		return n.end(ctx, run, n.opts.Outcome(run), false)
	}
	return nil
}

func (n *Node) countActive(ctx context.Context) {
	runs := &harnessv1.HarnessRunList{}
	if err := n.cache.List(ctx, runs, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	active := 0
	for i := range runs.Items {
		if !runs.Items[i].Status.Phase.Terminal() {
			active++
		}
	}
	n.mu.Lock()
	n.maxActive = max(n.maxActive, active)
	n.mu.Unlock()
}

func (n *Node) forget(key types.NamespacedName) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.started, key)
}

// claim starts the bound attempt: phase Running with startTime.
func (n *Node) claim(ctx context.Context, run *harnessv1.HarnessRun) error {
	now := metav1.NewTime(n.opts.Clock.Now())
	base := run.DeepCopy()
	run.Status.Phase = harnessv1.RunRunning
	run.Status.StartTime = &now
	run.Status.Reason = harnessv1.ReasonRunning
	run.Status.Message = fmt.Sprintf("the node-agent on %s started attempt %d", n.opts.Name, run.Status.Attempt)
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: harnessv1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: harnessv1.ReasonRunning, Message: run.Status.Message, ObservedGeneration: run.Generation, LastTransitionTime: now})
	if err := n.client.Status().Patch(ctx, run, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		// A conflict too is tried again (the queue's backoff), with the
		// run as the cache has it then: its watch, cut by an API server
		// away for a while, may deliver the newer version only once its
		// relist's backoff is over.
		return err
	}
	key := client.ObjectKeyFromObject(run)
	n.mu.Lock()
	n.started[key] = now.Time
	n.claims++
	n.mu.Unlock()
	n.record(ctx, run, corev1.EventTypeNormal, string(harnessv1.RunRunning), "Start", run.Status.Message)
	if n.opts.RunFor >= 0 {
		n.queue.AddAfter(key, n.opts.RunFor)
	}
	return nil
}

// end writes the run's terminal status; stopped marks a run ended because
// StopRequested asked for it.
func (n *Node) end(ctx context.Context, run *harnessv1.HarnessRun, o Outcome, stopped bool) error {
	now := metav1.NewTime(n.opts.Clock.Now())
	base := run.DeepCopy()
	st := &run.Status
	st.Phase, st.Verdict, st.FailureClass, st.Reason, st.Message = o.Phase, o.Verdict, o.Class, o.Reason, o.Message
	if o.Usage != nil {
		st.Usage = o.Usage.DeepCopy()
	}
	st.Reward = o.Reward
	st.CompletionTime = &now
	ready := metav1.Condition{Type: harnessv1.ConditionReady, Status: metav1.ConditionFalse, Reason: o.Reason, Message: o.Message,
		ObservedGeneration: run.Generation, LastTransitionTime: now}
	if stopped {
		ready.Reason = harnessv1.ReasonStopped
	} else if o.Verdict == harnessv1.VerdictPass {
		ready.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	if err := n.client.Status().Patch(ctx, run, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err // a conflict too: tried again, as claim's
	}
	n.forget(client.ObjectKeyFromObject(run))
	eventType := corev1.EventTypeNormal
	if o.Phase == harnessv1.RunFailed || o.Verdict != harnessv1.VerdictPass {
		eventType = corev1.EventTypeWarning
	}
	n.record(ctx, run, eventType, string(o.Phase), "Finish", o.Message)
	return nil
}

// record writes an events.k8s.io Event about run, as the node-agent does for
// the phase changes it makes.
func (n *Node) record(ctx context.Context, run *harnessv1.HarnessRun, eventType, reason, action, note string) {
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", run.Name, time.Now().UnixNano()), Namespace: run.Namespace},
		EventTime:           metav1.NewMicroTime(n.opts.Clock.Now()),
		ReportingController: ReportingController,
		ReportingInstance:   n.opts.Name,
		Action:              action,
		Reason:              reason,
		Type:                eventType,
		Note:                note,
		Regarding: corev1.ObjectReference{APIVersion: harnessv1.GroupVersion.String(), Kind: "HarnessRun",
			Namespace: run.Namespace, Name: run.Name, UID: run.UID},
	}
	_ = n.client.Create(ctx, ev) // Events are best effort, as for the real node-agent.
}
