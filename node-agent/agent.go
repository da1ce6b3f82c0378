// Package nodeagent is the per-node daemon of HarnessFacts. It registers the
// node as a HarnessNode and heartbeats a Lease, watches only the HarnessRuns
// bound to its node (a field selector on status.nodeName), claims each bound
// attempt with optimistic concurrency, has an Executor carry it out (package
// executor, which writes nothing to the API server), and writes the outcome
// back as status and an evidence ConfigMap owned by the run.
//
// Files: agent.go (the Agent, its start and its work queue), setup.go (its
// view of the API server, API, and the wiring of the real executor),
// register.go and lease.go (the HarnessNode and the heartbeat), claim.go
// (the reconciler: claim and stop), attempt.go (one claimed attempt),
// writeback.go (status and evidence), orphans.go (attempts an earlier
// process left), drain.go (stopping: no new claim, attempts finish or are
// handed back), sources.go (fixtures and Secret keys from the controller's
// run source).
//
// Status is written once per phase transition: Running when claimed, the
// terminal phase when done. An attempt is never carried out twice: a claim
// is a status write conditioned on the resourceVersion the agent read, and a
// run found Running that this process did not claim (it was claimed before a
// restart) is reported with Ready=False, reason NodeAgentRestarted, and the
// controller ends it as Failed, class Infrastructure, or retries it.
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
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
	// Executor carries out claimed attempts.
	Executor Executor
	// Clock tells time; the real clock when nil.
	Clock clock.WithTicker
	// LiveEndpoint, when set, is recorded in each claimed run's
	// status.liveOutput.
	LiveEndpoint *LiveEndpoint
	// HandBackAfter is how long, once the Agent is stopping (Start's
	// context ended: SIGTERM, its pod replaced or deleted), the attempts it
	// runs may still finish. Those still running then are stopped and
	// handed back (reason HandedBack), to be scheduled again without using
	// a retry. Keep it below the process's shutdown grace by the
	// time a stopped agent's cleanup and a status write take; zero hands
	// them back at once.
	HandBackAfter time.Duration
	// EvidenceKey, when set, is the public part of the receipt signing
	// key, published in HarnessNode status.
	EvidenceKey *harnessv1.EvidenceKey
	// CacheSyncTimeout bounds the wait for the cache's first lists at
	// start (an informer whose list is refused, for want of RBAC, retries
	// for ever); default a minute.
	CacheSyncTimeout time.Duration
}

// LiveEndpoint is the node-agent's log server (package livelog).
type LiveEndpoint struct {
	// BaseURL is https://HOST:PORT, reachable by those who follow runs.
	BaseURL string
	// CertificateSHA256 is the hex SHA-256 of the server certificate's DER.
	CertificateSHA256 string
}

// Agent is the node-agent of one node.
type Agent struct {
	opts     Options
	client   *kube.Client
	cache    *kube.Cache
	recorder *kube.Recorder
	// queue holds the runs to reconcile; a run is never reconciled by two
	// workers at once.
	queue workqueue.TypedRateLimitingInterface[types.NamespacedName]
	// closers are called once the attempts are done (the executor's Close).
	closers []func() error

	mu      sync.Mutex
	running map[types.UID]*running
	// claims is held (read) by each claim from its check of draining
	// until its attempt is counted in wg, and (write) by drain to set
	// draining: no attempt starts once the drain waits for them.
	claims   sync.RWMutex
	draining bool
	// swept is closed once runs left Running by an earlier process were ended.
	swept chan struct{}
	wg    sync.WaitGroup
	idle  *idleMemory
}

// Executor carries out one claimed attempt and returns its outcome; it
// writes nothing to the API server. When the run must stop, ctx is
// cancelled with an *executor.StopCause. *executor.Executor is the real
// one; tests script others.
type Executor interface {
	Execute(ctx context.Context, run *harnessv1.HarnessRun) *executor.Outcome
}

// workers is how many runs are reconciled at once: claims and stops are
// short, the attempts themselves run in their own goroutines.
const workers = 2

// New creates the Agent of api's node; Start runs it.
func New(api *API, opts Options) (*Agent, error) {
	if opts.NodeName == "" || opts.LeaseNamespace == "" {
		return nil, errors.New("node-agent: the node name and the Lease namespace are required")
	}
	if opts.NodeName != api.node {
		return nil, fmt.Errorf("node-agent: the API's cache holds the runs of node %q, not %q", api.node, opts.NodeName)
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
	if opts.CacheSyncTimeout <= 0 {
		opts.CacheSyncTimeout = time.Minute
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	a := &Agent{
		opts:     opts,
		client:   api.Client,
		cache:    api.Cache,
		recorder: kube.NewRecorder(api.Client, "harnessfacts-node-agent", log.Log.WithName("events")),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "node-agent"}),
		running: map[types.UID]*running{},
		swept:   make(chan struct{}),
	}
	a.idle = newIdleMemory(opts.Clock, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.running) > 0
	})
	enqueue := func(obj any) {
		if name, err := cache.DeletionHandlingObjectToName(obj); err == nil {
			a.queue.Add(types.NamespacedName{Namespace: name.Namespace, Name: name.Name})
		}
	}
	_, err := api.Cache.Informer(&harnessv1.HarnessRun{}).AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	return a, err
}

// Start runs the Agent until ctx ends (SIGTERM, its pod replaced or
// deleted), then drains: no new claim, the running attempts finish or are
// handed back (Options.HandBackAfter). The cache and the Events outlive ctx
// until the drain is done, as a controller-runtime manager stops its
// caches last.
func (a *Agent) Start(ctx context.Context) (err error) {
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithName("node-agent"))
	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	events := make(chan struct{})
	go func() {
		defer close(events)
		a.recorder.Run(bg, 5*time.Second)
	}()
	var wg sync.WaitGroup
	// However Start ends: the workers stop, then the executor's run dirs
	// go, then the cache and the Events.
	defer func() {
		a.queue.ShutDown()
		wg.Wait()
		for _, c := range a.closers {
			err = errors.Join(err, c())
		}
		stopBg()
		<-events
	}()
	a.cache.Start(bg)
	if err := a.syncCache(ctx); err != nil {
		return err
	}
	for range workers {
		wg.Go(func() { a.work(ctx) })
	}
	return a.start(ctx)
}

// work reconciles queued runs until the queue shuts down, as a
// controller-runtime controller's worker does: an error (or a panic,
// which controller-runtime recovers too) is retried with backoff, a
// result's RequeueAfter after that long.
func (a *Agent) work(ctx context.Context) {
	logger := log.FromContext(ctx)
	for {
		key, quit := a.queue.Get()
		if quit {
			return
		}
		res, err := a.reconcileSafely(log.IntoContext(ctx, logger.WithValues("run", key.String())), key)
		switch {
		case err != nil:
			logger.Error(err, "reconciling a run; retrying", "run", key.String())
			a.queue.AddRateLimited(key)
		case res.RequeueAfter > 0:
			a.queue.Forget(key)
			a.queue.AddAfter(key, res.RequeueAfter)
		default:
			a.queue.Forget(key)
		}
		a.queue.Done(key)
	}
}

// reconcileSafely is reconcile with a panic turned into an error: one
// run's bad state must not kill the node-agent and every run it holds.
func (a *Agent) reconcileSafely(ctx context.Context, key types.NamespacedName) (res result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic reconciling %s: %v\n%s", key, p, debug.Stack())
		}
	}()
	return a.reconcile(ctx, key)
}

// result says when to reconcile a run again.
type result struct {
	RequeueAfter time.Duration
}

// start creates the Lease, registers the node, reports the runs an earlier
// process left Running, and heartbeats until ctx ends; then it waits for the
// attempts to write what they know.
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
	a.idle.settle()
	// The heartbeat outlives ctx until the attempts are drained: a Lease
	// left to expire meanwhile would have the controller judge the node
	// lost and retry the attempts it is still running.
	beatCtx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	beat := make(chan error, 1)
	go func() { beat <- a.heartbeat(beatCtx) }()
	<-ctx.Done()
	a.drain(beatCtx)
	stopBeat()
	return <-beat
}

// keyOf names obj.
func keyOf(obj kube.Object) types.NamespacedName {
	return types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
}
