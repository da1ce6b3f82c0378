package controllers_test

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	"github.com/harnessfacts/harnessfacts/internal/fakenode"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
)

// BenchmarkCreateToScheduled: 1,000 runs over 20 fake nodes, from the
// create request to the run seen Scheduled through a watch (what `kubectl
// get -w` shows); then 9,000 more runs that fit no node, and the heap of the
// process (the controller and its cache; the fake nodes are stopped first)
// once the controller has looked at all 10,000.
//
// It does its work once whatever b.N is:
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

	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	w, err := wc.Watch(ctx, &harnessv1.HarnessRunList{}, client.InNamespace(ns))
	if err != nil {
		b.Fatal(err)
	}
	var (
		mu        sync.Mutex
		created   = map[string]time.Time{}
		latencies []time.Duration
		last      time.Time
		done      = make(chan struct{})
	)
	go func() {
		for ev := range w.ResultChan() {
			run, ok := ev.Object.(*harnessv1.HarnessRun)
			if !ok || ev.Type == watch.Deleted || run.Status.Phase != harnessv1.RunScheduled {
				continue
			}
			now := time.Now()
			mu.Lock()
			if t0, ok := created[run.Name]; ok {
				latencies = append(latencies, now.Sub(t0))
				delete(created, run.Name)
				last = now
				if len(latencies) == runs {
					close(done)
				}
			}
			mu.Unlock()
		}
	}()

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
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d runs were Scheduled after 5 minutes", len(latencies), runs)
	}
	b.StopTimer()
	w.Stop()
	mu.Lock()
	elapsed := last.Sub(start)
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	p50, p99 := latencies[len(latencies)/2], latencies[len(latencies)*99/100]
	mu.Unlock()
	b.ReportMetric(float64(runs)/elapsed.Seconds(), "runs/s")
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
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
	b.Logf("%d runs Scheduled in %s: %.0f runs/s, p50 %s, p99 %s; heap after %d runs exist: %.1f MiB (HeapInuse %.1f MiB)",
		runs, elapsed.Round(time.Millisecond), float64(runs)/elapsed.Seconds(), p50.Round(time.Millisecond), p99.Round(time.Millisecond),
		total, float64(ms.HeapAlloc)/(1<<20), float64(ms.HeapInuse)/(1<<20))
}
