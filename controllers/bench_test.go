package controllers_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// BenchmarkCreateToScheduled measures the controller's binding path against
// a real kube-apiserver, over 20 fake nodes, in three phases of one run:
//
//   - warm-up: one run created as the controller starts, reported apart
//     (it waits for the manager's caches);
//   - steady: 400 runs created at a paced 20 a second (a ticker; each create
//     in its own goroutine, so a slow answer does not slow the arrivals),
//     each timed from its create request to the moment a watch shows it
//     Scheduled (what `kubectl get -w` shows): p50 and p99;
//   - burst: 1,000 runs created by 8 clients as fast as the API server takes
//     them; the binding rate against that create rate (both runs/s, the
//     ratio is the goal), and the latencies under the burst;
//   - heap: runs that fit no node up to 10,000 in all, then the heap of the
//     process (the controller and its cache; the fake nodes stopped first)
//     once the controller has judged every one.
//
// Each phase also reports what the controller asked of the API server per
// bound run (from the API server's own request counters) and the
// controller's mean queue wait and reconcile time, so a slow figure says
// where its time went. The machine's load average is logged at the start
// and the end.
//
// HARNESSFACTS_BENCH_CPUPROFILE names a file for a CPU profile of this
// process over the steady and burst phases;
// HARNESSFACTS_BENCH_APISERVER_CPUPROFILE one for kube-apiserver's, 15 s of
// the steady phase; HARNESSFACTS_BENCH_HEAPPROFILE one for a heap profile at
// the heap's measurement. It does its work once whatever b.N is:
//
//	KUBEBUILDER_ASSETS=$(hack/control-plane.sh) go test -run '^$' -bench CreateToScheduled -benchtime 1x ./controllers/
func BenchmarkCreateToScheduled(b *testing.B) {
	const (
		nodes, slots            = 20, 128
		steadyRuns, steadyEvery = 400, 50 * time.Millisecond // 20 runs/s for 20 s
		burstRuns, burstClients = 1000, 8
		warmRuns                = 1
		total                   = 10000
	)
	b.Logf("load average at the start: %s", loadAverage())
	ns := newNamespace(b)
	var fakes []*fakenode.Node
	for i := range nodes {
		fakes = append(fakes, startNode(b, ns, fakenode.Options{Name: fmt.Sprintf("bench-%02d", i), Slots: slots, NoClaim: true,
			Adapters: codexOnly, LeaseDuration: time.Minute}))
	}
	// The fake nodes never claim: the runs must not time out waiting
	// for a claim while the benchmark lasts.
	c := startController(b, ns, controllers.Options{ClaimTimeout: time.Hour}, nil)
	tr := newBindTracker()
	stopWatch := tr.watch(b, ns)
	defer stopWatch()
	api := newAPICounter(b)
	cpu := testenv.NewCPUCounter(env.Config.Host)

	// The controller's manager is still starting (its caches sync before
	// its workers run): one run first, timed on its own, so that the
	// steady phase measures the controller running, and a slow start
	// shows as what it is.
	tr.expect(warmRuns)
	tr.create(b, hftesting.MakeHarnessRun("w-0000", ns).Obj())
	tr.wait(b, ns, "warm-up", time.Minute)
	warm := tr.phase("w-")
	b.Logf("warm-up: the first run, created as the controller started: create → Scheduled %s", warm.p50)
	b.ReportMetric(ms(warm.p50), "first-run-ms")

	stopProfile := func() {}
	if path := os.Getenv("HARNESSFACTS_BENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		stopProfile = func() { pprof.StopCPUProfile(); _ = f.Close() }
	}
	defer func() { stopProfile() }()
	b.ResetTimer()

	// Steady arrivals.
	before, queue, cpu0 := api.read(b), queueStats(), cpu.Read()
	tr.expect(steadyRuns)
	if path := os.Getenv("HARNESSFACTS_BENCH_APISERVER_CPUPROFILE"); path != "" {
		// kube-apiserver serves pprof to an administrator.
		go func() {
			raw, err := api.cs.RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "15").DoRaw(context.Background())
			if err != nil {
				b.Logf("apiserver profile: %v", err)
				return
			}
			_ = os.WriteFile(path, raw, 0o644)
		}()
	}
	tick := time.NewTicker(steadyEvery)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range steadyRuns {
		if i > 0 {
			<-tick.C
		}
		run := hftesting.MakeHarnessRun(fmt.Sprintf("s-%04d", i), ns).Obj()
		wg.Go(func() { tr.create(b, run) })
	}
	tick.Stop()
	arrival := float64(steadyRuns-1) / time.Since(start).Seconds()
	wg.Wait()
	tr.wait(b, ns, "steady", 5*time.Minute)
	steady := tr.phase("s-")
	b.Logf("steady: the slowest runs: %s", tr.slowest("s-", start, 8))
	steadyAPI, steadyQueue, steadyCPU := api.read(b).minus(before), queueStats().minus(queue), cpu.Read().Minus(cpu0)

	// A burst.
	before, queue, cpu0 = api.read(b), queueStats(), cpu.Read()
	tr.expect(burstRuns)
	start = time.Now()
	var next atomic.Int64
	for range burstClients {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < burstRuns; i = next.Add(1) - 1 {
				tr.create(b, hftesting.MakeHarnessRun(fmt.Sprintf("b-%04d", i), ns).Obj())
			}
		})
	}
	wg.Wait()
	createElapsed := time.Since(start)
	tr.wait(b, ns, "burst", 5*time.Minute)
	burst := tr.phase("b-")
	b.Logf("burst: the slowest runs: %s", tr.slowest("b-", start, 8))
	burstAPI, burstQueue, burstCPU := api.read(b).minus(before), queueStats().minus(queue), cpu.Read().Minus(cpu0)
	b.StopTimer()
	stopProfile()
	stopWatch()
	createRate := float64(burstRuns) / createElapsed.Seconds()
	bindRate := float64(burstRuns) / burst.last.Sub(start).Seconds()

	b.ReportMetric(arrival, "steady-arrivals/s")
	b.ReportMetric(ms(steady.p50), "steady-p50-ms")
	b.ReportMetric(ms(steady.p99), "steady-p99-ms")
	b.ReportMetric(createRate, "burst-creates/s")
	b.ReportMetric(bindRate, "burst-binds/s")
	b.ReportMetric(bindRate/createRate, "bind/create")
	b.ReportMetric(ms(burst.p50), "burst-p50-ms")
	b.ReportMetric(0, "ns/op")
	b.Logf("steady: %d runs arriving at %.1f/s: create → Scheduled p50 %s, p99 %s (the create request alone p50 %s, p99 %s; accepted → Scheduled p50 %s, p99 %s); %s; %s; %s",
		steadyRuns, arrival, steady.p50, steady.p99, steady.createP50, steady.createP99, steady.acceptedP50, steady.acceptedP99,
		steadyAPI.perRun(steadyRuns), steadyQueue, steadyCPU.PerRun(steadyRuns))
	b.Logf("burst: %d runs created at %.1f/s, bound at %.1f/s (%.2f× the create rate): create → Scheduled p50 %s, p99 %s; %s; %s; %s",
		burstRuns, createRate, bindRate, bindRate/createRate, burst.p50, burst.p99, burstAPI.perRun(burstRuns), burstQueue, burstCPU.PerRun(burstRuns))
	if got := metricValue(b, c.registry, "harnessfacts_binding_conflicts_total", nil); got != 0 {
		b.Logf("binding conflicts: %v", got)
	}

	// Runs that fit no node, up to total, then the heap once the
	// controller has written each one's Pending status.
	idle := total - warmRuns - steadyRuns - burstRuns
	createRuns(b, ns, "idle", idle, func(w *hftesting.RunWrapper) { w.NodeSelector(map[string]string{"bench": "nowhere"}) })
	eventually(b, 10*time.Minute, func() error {
		if got := metricValue(b, c.registry, "harnessfacts_pending_runs", map[string]string{"reason": controllers.PendingNodeSelector}); got != float64(idle) {
			return fmt.Errorf("%v of %d runs judged", got, idle)
		}
		return nil
	})
	waitingLook(b, c, idle)
	for _, n := range fakes {
		n.Stop()
	}
	runtime.GC()
	runtime.GC()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	b.ReportMetric(float64(mem.HeapAlloc)/(1<<20), "heap-MiB")
	if path := os.Getenv("HARNESSFACTS_BENCH_HEAPPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			b.Fatal(err)
		}
		_ = f.Close()
	}
	b.Logf("heap with %d runs: %.1f MiB (HeapInuse %.1f MiB)", total, float64(mem.HeapAlloc)/(1<<20), float64(mem.HeapInuse)/(1<<20))
	b.Logf("load average at the end: %s", loadAverage())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// loadAverage is /proc/loadavg's three averages ("?" where there is none).
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}

// bindTracker times runs from their create request to the moment a watch
// (an informer, which resumes a watch the API server closes under load)
// shows them Scheduled.
type bindTracker struct {
	mu      sync.Mutex
	runs    map[string]*bindSample
	waiting int
	done    chan struct{}
}

type bindSample struct{ sent, accepted, scheduled time.Time }

func newBindTracker() *bindTracker {
	return &bindTracker{runs: map[string]*bindSample{}, done: make(chan struct{})}
}

// watch starts the tracker's informer on ns's runs; the returned func stops
// it.
func (tr *bindTracker) watch(b *testing.B, ns string) func() {
	b.Helper()
	ctx := context.Background()
	seen := func(obj any) {
		run, ok := obj.(*harnessv1.HarnessRun)
		if !ok || run.Status.Phase != harnessv1.RunScheduled {
			return
		}
		now := time.Now()
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if s, ok := tr.runs[run.Name]; ok && s.scheduled.IsZero() {
			s.scheduled = now
			if tr.waiting--; tr.waiting == 0 {
				close(tr.done)
			}
		}
	}
	watcher, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}},
		DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		b.Fatal(err)
	}
	inf, err := watcher.GetInformer(ctx, &harnessv1.HarnessRun{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }}); err != nil {
		b.Fatal(err)
	}
	watchCtx, stop := context.WithCancel(ctx)
	go func() { _ = watcher.Start(watchCtx) }()
	if !watcher.WaitForCacheSync(ctx) {
		b.Fatal("the timing informer did not sync")
	}
	return stop
}

// expect starts a phase of n runs.
func (tr *bindTracker) expect(n int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.waiting, tr.done = n, make(chan struct{})
}

// create creates run, timing the request.
func (tr *bindTracker) create(b *testing.B, run *harnessv1.HarnessRun) {
	s := &bindSample{}
	tr.mu.Lock()
	tr.runs[run.Name] = s
	tr.mu.Unlock()
	sent := time.Now()
	err := k8s.Create(context.Background(), run)
	accepted := time.Now()
	tr.mu.Lock()
	s.sent, s.accepted = sent, accepted
	tr.mu.Unlock()
	if err != nil {
		b.Error(err)
	}
}

// wait waits until every run of the phase was seen Scheduled.
func (tr *bindTracker) wait(b *testing.B, ns, phase string, timeout time.Duration) {
	tr.mu.Lock()
	done := tr.done
	tr.mu.Unlock()
	select {
	case <-done:
	case <-time.After(timeout):
		list := &harnessv1.HarnessRunList{}
		_ = k8s.List(context.Background(), list, client.InNamespace(ns))
		phases := map[harnessv1.RunPhase]int{}
		for _, r := range list.Items {
			phases[r.Status.Phase]++
		}
		tr.mu.Lock()
		left := tr.waiting
		tr.mu.Unlock()
		b.Fatalf("%s: %d runs not seen Scheduled after %s; the API server has %v", phase, left, timeout, phases)
	}
}

// phaseFigures are the latencies of the runs whose names start with a
// prefix.
type phaseFigures struct {
	p50, p99                 time.Duration // create request sent → seen Scheduled
	createP50, createP99     time.Duration // the create request alone
	acceptedP50, acceptedP99 time.Duration // create answered → seen Scheduled
	last                     time.Time     // the last run seen Scheduled
}

func (tr *bindTracker) phase(prefix string) phaseFigures {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var all, creates, accepted []time.Duration
	var f phaseFigures
	for name, s := range tr.runs {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		all = append(all, s.scheduled.Sub(s.sent))
		creates = append(creates, s.accepted.Sub(s.sent))
		// A watch event may come before the create's answer.
		accepted = append(accepted, max(0, s.scheduled.Sub(s.accepted)))
		if s.scheduled.After(f.last) {
			f.last = s.scheduled
		}
	}
	f.p50, f.p99 = percentiles(all)
	f.createP50, f.createP99 = percentiles(creates)
	f.acceptedP50, f.acceptedP99 = percentiles(accepted)
	return f
}

// slowest names the n slowest runs of a phase, with when their create was
// sent (from the phase's start), so that a tail says whether it is the
// phase's first runs or spread through it.
func (tr *bindTracker) slowest(prefix string, start time.Time, n int) string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	type run struct {
		name string
		s    *bindSample
	}
	var runs []run
	for name, s := range tr.runs {
		if strings.HasPrefix(name, prefix) {
			runs = append(runs, run{name, s})
		}
	}
	slices.SortFunc(runs, func(a, b run) int { return cmp.Compare(b.s.scheduled.Sub(b.s.sent), a.s.scheduled.Sub(a.s.sent)) })
	var out []string
	for _, r := range runs[:min(n, len(runs))] {
		out = append(out, fmt.Sprintf("%s %s (sent at +%s)", r.name, r.s.scheduled.Sub(r.s.sent).Round(time.Millisecond), r.s.sent.Sub(start).Round(time.Millisecond)))
	}
	return strings.Join(out, ", ")
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2].Round(100 * time.Microsecond), d[len(d)*99/100].Round(100 * time.Microsecond)
}

// apiCounter reads the API server's request counters
// (apiserver_request_total) of HarnessRuns and Events, by verb and
// subresource.
type apiCounter struct{ cs *kubernetes.Clientset }

type apiCounts map[string]float64

func newAPICounter(b *testing.B) *apiCounter {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	return &apiCounter{cs: cs}
}

func (a *apiCounter) read(b *testing.B) apiCounts {
	raw, err := a.cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("reading the API server's metrics: %v", err)
	}
	out := apiCounts{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		labels, value := line[len("apiserver_request_total{"):end], strings.TrimSpace(line[end+1:])
		l := map[string]string{}
		for kv := range strings.SplitSeq(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			l[k] = strings.Trim(v, `"`)
		}
		if l["resource"] != "harnessruns" && l["resource"] != "events" {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += v
	}
	return out
}

func (c apiCounts) minus(o apiCounts) apiCounts {
	out := apiCounts{}
	for k, v := range c {
		if d := v - o[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// perRun says the writes per run (and the reads, if any reached the API
// server), e.g. "API requests per run: POST harnessruns 1.00, PATCH
// harnessruns/status 1.00, POST events 1.00".
func (c apiCounts) perRun(runs int) string {
	var keys []string
	for k := range c {
		if verb, _, _ := strings.Cut(k, " "); verb != "WATCH" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, c[k]/float64(runs)))
	}
	return "API requests per run: " + strings.Join(parts, ", ")
}

// queueFigures are sums and counts of the harnessrun controller's
// workqueue wait and reconcile time (controller-runtime's metrics).
type queueFigures struct {
	waitSum, waitN, workSum, workN float64
}

func queueStats() queueFigures {
	var q queueFigures
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return q
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			if h == nil {
				continue
			}
			var mine bool
			for _, l := range m.GetLabel() {
				if (l.GetName() == "name" || l.GetName() == "controller") && l.GetValue() == "harnessrun" {
					mine = true
				}
			}
			if !mine {
				continue
			}
			switch f.GetName() {
			case "workqueue_queue_duration_seconds":
				q.waitSum, q.waitN = h.GetSampleSum(), float64(h.GetSampleCount())
			case "controller_runtime_reconcile_time_seconds":
				q.workSum, q.workN = h.GetSampleSum(), float64(h.GetSampleCount())
			}
		}
	}
	return q
}

func (q queueFigures) minus(o queueFigures) queueFigures {
	return queueFigures{q.waitSum - o.waitSum, q.waitN - o.waitN, q.workSum - o.workSum, q.workN - o.workN}
}

func (q queueFigures) String() string {
	mean := func(sum, n float64) time.Duration {
		if n == 0 {
			return 0
		}
		return time.Duration(sum / n * float64(time.Second)).Round(100 * time.Microsecond)
	}
	return fmt.Sprintf("%.0f reconciles, mean queue wait %s, mean reconcile %s", q.workN, mean(q.waitSum, q.waitN), mean(q.workSum, q.workN))
}

// waitingLook times what a wake at a run's end (or a node's heartbeat with
// a free slot) looks through with waiting runs queued: the ledger's
// waiting runs, against listing them from the cache's phase index, as the
// wakes did before (the baseline, in the same run): time and allocation
// each.
func waitingLook(b *testing.B, c *controller, waiting int) {
	b.Helper()
	measure := func(look func() int) (ms, mb float64) {
		const rounds = 20
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		start := time.Now()
		for range rounds {
			if n := look(); n < waiting {
				b.Fatalf("looked through %d runs, want at least %d", n, waiting)
			}
		}
		el := time.Since(start)
		runtime.ReadMemStats(&m1)
		return float64(el.Microseconds()) / 1000 / rounds, float64(m1.TotalAlloc-m0.TotalAlloc) / 1e6 / rounds
	}
	ledgerMS, ledgerMB := measure(c.reconciler.WaitingRunsForBench)
	listMS, listMB := measure(func() int {
		runs := &harnessv1.HarnessRunList{}
		if err := c.cache.List(context.Background(), runs, client.MatchingFields{controllers.IndexRunPhase: string(harnessv1.RunPending)}, client.UnsafeDisableDeepCopy); err != nil {
			b.Fatal(err)
		}
		return len(runs.Items)
	})
	b.ReportMetric(ledgerMS, "wake-look-ms")
	b.ReportMetric(listMS/ledgerMS, "cache-list/wake-look")
	b.Logf("a wake's look through %d+ waiting runs: %.2f ms, %.2f MB allocated; listing them from the cache (the wakes before): %.2f ms, %.1f MB (%.0f×)",
		waiting, ledgerMS, ledgerMB, listMS, listMB, listMS/ledgerMS)
}
