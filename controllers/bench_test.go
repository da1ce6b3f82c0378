package controllers_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
)

// BenchmarkCreateToScheduled: 1,000 runs over 20 fake nodes, from the
// create request to the run seen Scheduled through a watch (what `kubectl
// get -w` shows); then 9,000 more runs that fit no node, and the heap of the
// process (the controller and its cache; the fake nodes are stopped first)
// once the controller has looked at all 10,000.
//
// Set HARNESSFACTS_BENCH_HEAPPROFILE to a file name to get a heap profile at
// that moment. It does its work once whatever b.N is:
//
//	KUBEBUILDER_ASSETS=$(hack/control-plane.sh) go test -run '^$' -bench CreateToScheduled -benchtime 1x ./controllers/
func BenchmarkCreateToScheduled(b *testing.B) {
	const nodes, slots, runs, total = 20, 64, 1000, 10000
	ctx := context.Background()
	ns := newNamespace(b)
	var fakes []*fakenode.Node
	for i := range nodes {
		fakes = append(fakes, startNode(b, ns, fakenode.Options{Name: fmt.Sprintf("bench-%02d", i), Slots: slots, NoClaim: true,
			Adapters: codexOnly, LeaseDuration: time.Minute}))
	}
	c := startController(b, ns, controllers.Options{}, nil)

	// An informer, not a bare watch: the API server may close a watch
	// under load, and the informer resumes it.
	var (
		mu        sync.Mutex
		created   = map[string]time.Time{}
		latencies []time.Duration
		last      time.Time
		done      = make(chan struct{})
	)
	seen := func(obj any) {
		run, ok := obj.(*harnessv1.HarnessRun)
		if !ok || run.Status.Phase != harnessv1.RunScheduled {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if t0, ok := created[run.Name]; ok {
			latencies = append(latencies, now.Sub(t0))
			delete(created, run.Name)
			last = now
			if len(latencies) == runs {
				close(done)
			}
		}
	}
	watcher, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
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
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() { _ = watcher.Start(watchCtx) }()
	if !watcher.WaitForCacheSync(ctx) {
		b.Fatal("the timing informer did not sync")
	}

	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < runs; i = next.Add(1) - 1 {
				run := hftesting.MakeHarnessRun(fmt.Sprintf("b-%04d", i), ns).Obj()
				mu.Lock()
				created[run.Name] = time.Now()
				mu.Unlock()
				if err := k8s.Create(ctx, run); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	createElapsed := time.Since(start)
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		list := &harnessv1.HarnessRunList{}
		_ = k8s.List(ctx, list, client.InNamespace(ns))
		phases := map[harnessv1.RunPhase]int{}
		for _, r := range list.Items {
			phases[r.Status.Phase]++
		}
		b.Fatalf("only %d of %d runs were seen Scheduled after 5 minutes; the API server has %v", len(latencies), runs, phases)
	}
	b.StopTimer()
	stopWatch()
	mu.Lock()
	elapsed := last.Sub(start)
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	p50, p99 := latencies[len(latencies)/2], latencies[len(latencies)*99/100]
	mu.Unlock()
	b.ReportMetric(float64(runs)/elapsed.Seconds(), "runs/s")
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(runs)/createElapsed.Seconds(), "creates/s")
	b.ReportMetric(0, "ns/op")
	if got := metricValue(b, c.registry, "harnessfacts_binding_conflicts_total", nil); got != 0 {
		b.Logf("binding conflicts: %v", got)
	}

	// 9,000 more runs that fit no node, then the heap once the controller
	// has written each one's Pending status.
	createRuns(b, ns, "idle", total-runs, func(w *hftesting.RunWrapper) { w.NodeSelector(map[string]string{"bench": "nowhere"}) })
	eventually(b, 10*time.Minute, func() error {
		if got := metricValue(b, c.registry, "harnessfacts_pending_runs", map[string]string{"reason": controllers.PendingNodeSelector}); got != total-runs {
			return fmt.Errorf("%v of %d runs judged", got, total-runs)
		}
		return nil
	})
	for _, n := range fakes {
		n.Stop()
	}
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
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
	b.Logf("%d runs created in %s, Scheduled in %s: %.0f runs/s, p50 %s, p99 %s; heap after %d runs exist: %.1f MiB (HeapInuse %.1f MiB)",
		runs, createElapsed.Round(time.Millisecond), elapsed.Round(time.Millisecond), float64(runs)/elapsed.Seconds(), p50.Round(time.Millisecond), p99.Round(time.Millisecond),
		total, float64(ms.HeapAlloc)/(1<<20), float64(ms.HeapInuse)/(1<<20))
}
