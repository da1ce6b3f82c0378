package controllers_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

var (
	env *testenv.Env
	k8s client.Client // direct, uncached: what a user with kubectl sees
)

func TestMain(m *testing.M) {
	logOut := io.Discard
	if os.Getenv("HARNESSFACTS_TEST_LOG") != "" {
		logOut = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logOut), zap.UseDevMode(true)))
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s, err = client.New(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
	}
	if code == 0 {
		if err := goleak.Find(leakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newNamespace creates a namespace for one test: its runs and node Leases
// live there, and the test's controller watches only it, so tests do not
// see each other's runs.
func newNamespace(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := "t-" + hex.EncodeToString(b)
	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeRuns(t, ns) })
	return ns
}

// removeRuns deletes what is left of a test's runs, finalizers included
// (the test's controller is gone by then).
func removeRuns(t testing.TB, ns string) {
	ctx := context.Background()
	runs := &harnessv1.HarnessRunList{}
	if err := k8s.List(ctx, runs, client.InNamespace(ns)); err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	var wg sync.WaitGroup
	work := make(chan *harnessv1.HarnessRun)
	for range 8 {
		wg.Go(func() {
			for run := range work {
				if len(run.Finalizers) > 0 {
					base := run.DeepCopy()
					run.Finalizers = nil
					_ = k8s.Patch(ctx, run, client.MergeFrom(base))
				}
				_ = client.IgnoreNotFound(k8s.Delete(ctx, run))
			}
		})
	}
	for i := range runs.Items {
		work <- &runs.Items[i]
	}
	close(work)
	wg.Wait()
}

// controller is one running controller manager.
type controller struct {
	reconciler *controllers.HarnessRunReconciler
	registry   *prometheus.Registry
	// cache is the manager's client, reading from its cache.
	cache    client.Client
	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan error
}

func (c *controller) stop(t testing.TB) {
	c.stopOnce.Do(func() {
		c.cancel()
		if err := <-c.done; err != nil {
			t.Errorf("controller manager: %v", err)
		}
	})
}

// startController starts the controller as `harnessfacts controller` does,
// watching the runs and Leases of ns. wrap, if set, wraps the client the
// reconcilers use (fault injection).
func startController(t testing.TB, ns string, opts controllers.Options, wrap func(client.Client) client.Client) *controller {
	t.Helper()
	return startElectedController(t, ns, opts, wrap, false)
}

// startElectedController is startController, with leader election (a Lease
// in ns) when elect is set, as `harnessfacts controller` runs by default.
func startElectedController(t testing.TB, ns string, opts controllers.Options, wrap func(client.Client) client.Client, elect bool) *controller {
	t.Helper()
	return startClockedController(t, ns, opts, wrap, elect, clock.RealClock{})
}

// startClockedController is startElectedController with the reconciler's
// clock given (its requeues still wait real time).
func startClockedController(t testing.TB, ns string, opts controllers.Options, wrap func(client.Client) client.Client, elect bool, clk clock.PassiveClock) *controller {
	t.Helper()
	return startControllerOn(t, env.Config, ns, opts, wrap, elect, clk)
}

// startControllerOn is startClockedController talking to the API server
// through cfg.
func startControllerOn(t testing.TB, cfg *rest.Config, ns string, opts controllers.Options, wrap func(client.Client) client.Client, elect bool, clk clock.PassiveClock) *controller {
	t.Helper()
	skip := true
	mopts := controllers.ManagerOptions(controllers.ManagerConfig{
		Scheme:                  env.Scheme,
		Namespaces:              []string{ns},
		LeaderElection:          elect,
		LeaderElectionNamespace: ns,
	})
	mopts.Metrics, mopts.HealthProbeBindAddress = metricsserver.Options{BindAddress: "0"}, "0"
	mopts.Controller = config.Controller{SkipNameValidation: &skip}
	mgr, err := ctrl.NewManager(cfg, mopts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := controllers.SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		t.Fatal(err)
	}
	c := mgr.GetClient()
	if wrap != nil {
		c = wrap(c)
	}
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	if opts.FixtureReader == nil {
		opts.FixtureReader = mgr.GetAPIReader()
	}
	r, err := controllers.NewHarnessRunReconciler(c, mgr.GetEventRecorder("harnessfacts-controller"), clk, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	h := &controller{reconciler: r, registry: reg, cache: mgr.GetClient(), cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- mgr.Start(ctx) }()
	t.Cleanup(func() { h.stop(t) })
	return h
}

// startNode starts a fake node-agent with its Lease in ns.
func startNode(t testing.TB, ns string, opts fakenode.Options) *fakenode.Node {
	t.Helper()
	return startNodeOn(t, env.Config, ns, opts)
}

// startNodeOn is startNode talking to the API server through cfg.
func startNodeOn(t testing.TB, cfg *rest.Config, ns string, opts fakenode.Options) *fakenode.Node {
	t.Helper()
	opts.LeaseNamespace = ns
	n, err := fakenode.Start(context.Background(), cfg, env.Scheme, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.Stop()
		if err := n.Deregister(context.Background()); err != nil {
			t.Errorf("deregistering %s: %v", n.Name(), err)
		}
	})
	return n
}

func create(t testing.TB, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := k8s.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
	}
}

func getRun(t testing.TB, ns, name string) *harnessv1.HarnessRun {
	t.Helper()
	run := &harnessv1.HarnessRun{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, run); err != nil {
		t.Fatalf("getting run %s: %v", name, err)
	}
	return run
}

// eventually polls cond until it returns nil or timeout passes; then it
// fails the test with cond's last error.
func eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitRun waits until the run satisfies cond (given as a description and a
// predicate) and returns it.
func waitRun(t testing.TB, ns, name string, timeout time.Duration, what string, cond func(*harnessv1.HarnessRun) bool) *harnessv1.HarnessRun {
	t.Helper()
	var run *harnessv1.HarnessRun
	eventually(t, timeout, func() error {
		run = &harnessv1.HarnessRun{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, run); err != nil {
			return err
		}
		if !cond(run) {
			return fmt.Errorf("run %s is not %s: phase %q node %q reason %q message %q", name, what,
				run.Status.Phase, run.Status.NodeName, run.Status.Reason, run.Status.Message)
		}
		return nil
	})
	return run
}

func phaseIs(p harnessv1.RunPhase) func(*harnessv1.HarnessRun) bool {
	return func(r *harnessv1.HarnessRun) bool { return r.Status.Phase == p }
}

// runEvents lists the Events about one run, oldest first.
func runEvents(t testing.TB, ns, name string) []eventsv1.Event {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Regarding.Kind == "HarnessRun" {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].EventTime.Before(&out[j].EventTime) })
	return out
}

func eventReasons(evs []eventsv1.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason)
	}
	return out
}

// metricValue reads a gauge or counter (or a histogram's count) from reg.
func metricValue(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelsMatch(m, labels) {
				switch {
				case m.Gauge != nil:
					return m.GetGauge().GetValue()
				case m.Counter != nil:
					return m.GetCounter().GetValue()
				case m.Histogram != nil:
					return float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

// withWatch lets a plain client.Client go through interceptor.NewClient,
// which wants a client.WithWatch; the reconcilers never watch through it.
type withWatch struct{ client.Client }

func (withWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("watch is not supported by this test client")
}

type eventsV1 = eventsv1.Event

type reasonsError struct{ got, want []string }

func (e *reasonsError) Error() string {
	return fmt.Sprintf("Event reasons %v, want %v", e.got, e.want)
}

type eventsV1List = eventsv1.EventList

// leakOptions ignores the goroutines that libraries start once per process
// and never stop; anything else still running after the tests is a leak.
func leakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
	}
}

// reconcileErrors reads controller-runtime's count of the passes of one
// controller that returned an error (each logged as "Reconciler error").
func reconcileErrors(tb testing.TB, controllerName string) float64 {
	tb.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_errors_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelsMatch(m, map[string]string{"controller": controllerName}) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
