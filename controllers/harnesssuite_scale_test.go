//go:build linux

package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
)

// suiteCalls counts the API requests of the HarnessSuite reconciler. Reads
// go to the cache; a Get or List reaching here is counted too, but is
// served by the cache, not the API server.
type suiteCalls struct {
	creates, alreadyExists, statusWrites, deleteAll, other atomic.Int64
}

func (c *suiteCalls) wrap(cl client.Client) client.Client {
	return interceptor.NewClient(withWatch{cl}, interceptor.Funcs{
		Create: func(ctx context.Context, w client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			c.creates.Add(1)
			err := w.Create(ctx, obj, opts...)
			if apierrors.IsAlreadyExists(err) {
				c.alreadyExists.Add(1)
			}
			return err
		},
		DeleteAllOf: func(ctx context.Context, w client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			c.deleteAll.Add(1)
			return w.DeleteAllOf(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, w client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			c.other.Add(1)
			return w.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, w client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			c.other.Add(1)
			return w.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, w client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			c.other.Add(1)
			return w.Delete(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, w client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			c.statusWrites.Add(1)
			return w.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
}

// scaleResult is what one run of the scale suite measured.
type scaleResult struct {
	runs, maxActive        int
	parallelism            int
	createAll              time.Duration // suite created → the last run seen created
	complete               time.Duration // suite created → suite Complete seen
	lastRunDone            time.Time     // the test's run watch saw the last run finish
	lastOutcome            time.Time     // a fake node decided the last outcome
	suiteSaysDone          time.Time
	calls                  *suiteCalls
	processCPU, apiCPU     time.Duration
	apiCPUKnown            bool
	suiteUpdatesSeen       int64
	maxActivePerNodeExceed bool
}

// runScaleSuite runs a suite of agents × fixtures × repeats runs over nodes
// fake nodes and watches it: every run's creation and completion and the
// suite's status, from an informer (what `kubectl get -w` shows).
func runScaleSuite(tb testing.TB, agents, fixtures, repeats, parallelism, nodes, slots int, runFor time.Duration) scaleResult {
	tb.Helper()
	ctx := context.Background()
	ns := newNamespace(tb)
	var names []string
	for i := range fixtures {
		cm := fixtureCM(ns, fmt.Sprintf("fixture-%02d", i), fmt.Sprintf("task %d", i))
		create(tb, cm)
	}
	for i := range agents {
		names = append(names, fmt.Sprintf("agent-%d", i))
	}
	// The last moment a fake node decided a run's outcome: it writes the
	// terminal status right after, so the suite showing completion after
	// this includes that write's latency.
	var outcomeMu sync.Mutex
	var lastOutcome time.Time
	var fakes []*fakenode.Node
	for i := range nodes {
		fakes = append(fakes, startNode(tb, ns, fakenode.Options{Name: fmt.Sprintf("scale-%02d-%s", i, ns), Slots: int32(slots), Adapters: codexOnly,
			RunFor: runFor, LeaseDuration: time.Minute, Outcome: func(run *harnessv1.HarnessRun) fakenode.Outcome {
				outcomeMu.Lock()
				lastOutcome = time.Now()
				outcomeMu.Unlock()
				// Roughly one in three fails, deterministically.
				if r, _ := strconv.Atoi(run.Annotations[harnessv1.AnnotationSuiteRepeat]); r%3 == 2 {
					return fakenode.AgentFailed
				}
				return fakenode.Pass
			}}))
	}
	calls := &suiteCalls{}
	startSuiteControllerWith(tb, ns, calls.wrap)

	total := agents * fixtures * repeats
	var (
		mu            sync.Mutex
		active        = map[string]bool{}
		seen          = map[string]bool{}
		maxActive     int
		lastCreated   time.Time
		lastDone      time.Time
		done          = map[string]bool{}
		suiteDoneAt   time.Time
		suiteUpdates  int64
		completeCh    = make(chan struct{})
		completeClose sync.Once
	)
	onRun := func(obj any) {
		run, ok := obj.(*harnessv1.HarnessRun)
		if !ok {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if !seen[run.Name] {
			seen[run.Name] = true
			lastCreated = now
		}
		if run.Status.Phase.Terminal() {
			delete(active, run.Name)
			if !done[run.Name] {
				done[run.Name] = true
				lastDone = now
			}
		} else {
			active[run.Name] = true
		}
		maxActive = max(maxActive, len(active))
	}
	onSuite := func(obj any) {
		s, ok := obj.(*harnessv1.HarnessSuite)
		if !ok {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		suiteUpdates++
		if meta.IsStatusConditionTrue(s.Status.Conditions, harnessv1.SuiteConditionComplete) && int(s.Status.Counts.Finished) == total {
			if suiteDoneAt.IsZero() {
				suiteDoneAt = now
			}
			completeClose.Do(func() { close(completeCh) })
		}
	}
	watcher, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		tb.Fatal(err)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	for obj, h := range map[client.Object]func(any){&harnessv1.HarnessRun{}: onRun, &harnessv1.HarnessSuite{}: onSuite} {
		inf, err := watcher.GetInformer(ctx, obj)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: h, UpdateFunc: func(_, o any) { h(o) }}); err != nil {
			tb.Fatal(err)
		}
	}
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); _ = watcher.Start(watchCtx) }()
	defer func() { stopWatch(); <-watchDone }()
	if !watcher.WaitForCacheSync(ctx) {
		tb.Fatal("the scale test's informer did not sync")
	}

	cpu0 := processCPU()
	api0, apiKnown := apiServerCPU()
	suite := makeSuite(ns, "scale", names, int32(repeats), int32(parallelism))
	start := time.Now()
	create(tb, suite)
	select {
	case <-completeCh:
	case <-time.After(10 * time.Minute):
		s := getSuite(tb, ns, "scale")
		tb.Fatalf("the suite did not complete in 10 minutes: progress %s, counts %+v, conditions %v", s.Status.Progress, s.Status.Counts, conditionSummary(s.Status.Conditions))
	}
	cpu := processCPU() - cpu0
	// The suite's watch and the runs' are two streams: the suite's Complete
	// can arrive while this informer is still behind on the runs' events
	// (it was 199 runs behind once, on a loaded machine). Wait until it has
	// seen every run finish, as `kubectl get -w` would a moment later.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		caughtUp := len(done) >= total
		mu.Unlock()
		if caughtUp || time.Now().After(deadline) {
			break
		}
	}
	outcomeMu.Lock()
	defer outcomeMu.Unlock()
	api1, _ := apiServerCPU()
	stopWatch()
	mu.Lock()
	defer mu.Unlock()
	res := scaleResult{runs: len(seen), maxActive: maxActive, parallelism: parallelism,
		createAll: lastCreated.Sub(start), complete: suiteDoneAt.Sub(start), lastRunDone: lastDone, lastOutcome: lastOutcome, suiteSaysDone: suiteDoneAt,
		calls: calls, processCPU: cpu, apiCPU: api1 - api0, apiCPUKnown: apiKnown, suiteUpdatesSeen: suiteUpdates}
	for _, n := range fakes {
		if n.MaxActive() > slots {
			res.maxActivePerNodeExceed = true
		}
	}
	return res
}

// processCPU is the user + system CPU time of this process: the controller,
// the fake nodes and the test's informers (the API server and etcd are
// other processes).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// apiServerCPU is the CPU time of the kube-apiserver processes started by
// this process (envtest's), read from /proc.
func apiServerCPU() (time.Duration, bool) {
	self := strconv.Itoa(os.Getpid())
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var total time.Duration
	found := false
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || !strings.Contains(s[:i], "(kube-apiserver") {
			continue
		}
		f := strings.Fields(s[i+2:])
		// After the name: state ppid ... utime is field 14, stime 15 of
		// the whole line, here 11 and 12 (0-based) of f.
		if len(f) < 13 || f[1] != self {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(ut+st) * time.Second / 100 // USER_HZ
		found = true
	}
	return total, found
}

// TestSuiteAtScale: 2,000 runs (4 agents × 5 fixtures × 100 repeats) over
// 20 fake nodes complete; the suite never has more than parallelism runs
// unfinished, creates each run exactly once, and its status writes stay a
// small multiple of the runs.
func TestSuiteAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 runs take a minute or two on a real API server")
	}
	res := runScaleSuite(t, 4, 5, 100, 200, 20, 10, 20*time.Millisecond)
	if res.runs != 2000 {
		t.Errorf("%d runs were created, want 2000", res.runs)
	}
	if res.maxActive > res.parallelism {
		t.Errorf("%d runs of the suite were unfinished at once; parallelism is %d", res.maxActive, res.parallelism)
	}
	if res.maxActivePerNodeExceed {
		t.Error("a fake node had more runs than slots")
	}
	// A create may be sent again for a run that exists (AlreadyExists) when
	// the cache lags very far; never is a run created twice.
	if got := res.calls.creates.Load() - res.calls.alreadyExists.Load(); got != 2000 {
		t.Errorf("the suite controller created %d runs for 2000", got)
	}
	if got := res.calls.statusWrites.Load(); got > 2*2000 {
		t.Errorf("the suite controller wrote its status %d times for 2000 runs", got)
	}
	if got := res.calls.deleteAll.Load() + res.calls.other.Load(); got != 0 {
		t.Errorf("the suite controller sent %d other writes", got)
	}
	t.Logf("2000 runs: all created %s after the suite, suite Complete %s after it (%s after the last run finished); %d creates (%d AlreadyExists), %d status writes; max %d unfinished",
		res.createAll.Round(time.Millisecond), res.complete.Round(time.Millisecond), res.suiteSaysDone.Sub(res.lastOutcome).Round(time.Millisecond),
		res.calls.creates.Load(), res.calls.alreadyExists.Load(), res.calls.statusWrites.Load(), res.maxActive)
}

// BenchmarkSuite2000: the 2,000-run suite of TestSuiteAtScale (4 agents × 5
// fixtures × 100 repeats, parallelism 200, 20 fake nodes with 10 slots, each
// run 20 ms). It reports the time from the suite's creation to the last run
// created and to the suite Complete, the delay between the last run's
// completion and the suite status showing it (both seen through a watch),
// the suite controller's status writes, the CPU of this process (the
// controller, the 20 fake nodes and the watch) and of kube-apiserver, and
// the heap once the suite is complete (fake nodes stopped). It does its
// work once whatever b.N is:
//
//	KUBEBUILDER_ASSETS=$(hack/control-plane.sh) go test -run '^$' -bench Suite2000 -benchtime 1x ./controllers/
func BenchmarkSuite2000(b *testing.B) {
	b.ResetTimer()
	res := runScaleSuite(b, 4, 5, 100, 200, 20, 10, 20*time.Millisecond)
	b.StopTimer()
	if res.runs != 2000 || res.maxActive > res.parallelism {
		b.Fatalf("%d runs, max %d unfinished (parallelism %d)", res.runs, res.maxActive, res.parallelism)
	}
	lag := res.suiteSaysDone.Sub(res.lastOutcome)
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(res.createAll.Seconds(), "create-all-s")
	b.ReportMetric(res.complete.Seconds(), "complete-s")
	b.ReportMetric(float64(lag.Milliseconds()), "done-lag-ms")
	b.ReportMetric(float64(res.calls.statusWrites.Load()), "status-writes")
	b.ReportMetric(res.processCPU.Seconds(), "process-cpu-s")
	if res.apiCPUKnown {
		b.ReportMetric(res.apiCPU.Seconds(), "apiserver-cpu-s")
	}
	passes, passTime := reconcileTime(b, "harnesssuite")
	b.ReportMetric(float64(passes), "suite-passes")
	b.ReportMetric(passTime.Seconds(), "suite-pass-s")
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
	b.ReportMetric(0, "ns/op")
	b.Logf("2000 runs: all created after %s, suite Complete after %s, %s after the last run finished (%s after the test's run watch showed it); %d creates (%d AlreadyExists), %d suite status writes, max %d unfinished; CPU: this process %s, kube-apiserver %s; %d suite passes taking %s in all (API calls included); heap %.1f MiB",
		res.createAll.Round(time.Millisecond), res.complete.Round(time.Millisecond), lag.Round(time.Millisecond),
		res.suiteSaysDone.Sub(res.lastRunDone).Round(time.Millisecond),
		res.calls.creates.Load(), res.calls.alreadyExists.Load(), res.calls.statusWrites.Load(), res.maxActive,
		res.processCPU.Round(time.Millisecond), res.apiCPU.Round(time.Millisecond), passes, passTime.Round(time.Millisecond), float64(ms.HeapAlloc)/(1<<20))
}

// reconcileTime reads controller-runtime's reconcile metrics of one
// controller from its global registry: how many passes, and their summed
// wall time.
func reconcileTime(tb testing.TB, controllerName string) (int, time.Duration) {
	tb.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_time_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelsMatch(m, map[string]string{"controller": controllerName}) {
				h := m.GetHistogram()
				return int(h.GetSampleCount()), time.Duration(h.GetSampleSum() * float64(time.Second))
			}
		}
	}
	return 0, 0
}
