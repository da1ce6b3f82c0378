package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
)

// bindLog records, per run, which controller's status writes bound it: the
// ground truth against which "bound exactly once" is checked.
type bindLog struct {
	mu    sync.Mutex
	binds map[string][]string
}

func (b *bindLog) add(run, by string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.binds[run] = append(b.binds[run], by)
}

// unconfirmed marks a binding write whose outcome its controller never
// learned.
const unconfirmed = "?"

func (b *bindLog) total() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, v := range b.binds {
		n += len(v)
	}
	return n
}

// confirmed returns the bindings of run the API server acknowledged, and
// those whose outcome is unknown.
func (b *bindLog) confirmed(run string) (ok, unknown []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, by := range b.binds[run] {
		if strings.HasSuffix(by, unconfirmed) {
			unknown = append(unknown, by)
		} else {
			ok = append(ok, by)
		}
	}
	return ok, unknown
}

// recordingClient wraps a controller's client: it records successful
// bindings under the name by, and when conflictEvery > 0 it refuses every
// conflictEvery-th status write, and every conflictEvery-th patch of a run
// (the finalizer's), with a Conflict, as the API server does when the
// object changed, before the write reaches the server.
func recordingClient(log *bindLog, by string, conflictEvery int64, injected *atomic.Int64) func(client.Client) client.Client {
	var writes, patches atomic.Int64
	return func(c client.Client) client.Client {
		return interceptor.NewClient(withWatch{c}, interceptor.Funcs{
			// The finalizer's patches are optimistic too: a conflict
			// there is no more a fault than one of a status write.
			Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if _, isRun := obj.(*harnessv1.HarnessRun); isRun && conflictEvery > 0 && patches.Add(1)%conflictEvery == 0 {
					injected.Add(1)
					return apierrors.NewConflict(harnessv1.GroupVersion.WithResource("harnessruns").GroupResource(), obj.GetName(), errors.New("injected by the test"))
				}
				return cl.Patch(ctx, obj, patch, opts...)
			},
			SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if sub == "status" && conflictEvery > 0 && writes.Add(1)%conflictEvery == 0 {
					injected.Add(1)
					return apierrors.NewConflict(harnessv1.GroupVersion.WithResource("harnessruns").GroupResource(), obj.GetName(), errors.New("injected by the test"))
				}
				run, isRun := obj.(*harnessv1.HarnessRun)
				binding := isRun && sub == "status" && run.Status.Phase == harnessv1.RunScheduled
				name := obj.GetName()
				err := cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
				switch {
				case !binding:
				case err == nil:
					log.add(name, by)
				case apierrors.ReasonForError(err) == "":
					// No answer from the server (the controller was
					// stopped mid-request): the binding may have landed.
					log.add(name, by+unconfirmed)
				}
				return err
			},
		})
	}
}

// scheduledEvents returns, per run, the nodes named by the controller's
// Scheduled Events.
func scheduledEvents(t testing.TB, ns string) map[string][]string {
	t.Helper()
	list := &eventsV1List{}
	if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, e := range list.Items {
		if e.Reason == "Scheduled" && e.ReportingController == "harnessfacts-controller" {
			n := 1
			if e.Series != nil {
				n = int(e.Series.Count)
			}
			for range n {
				out[e.Regarding.Name] = append(out[e.Regarding.Name], e.Related.Name)
			}
		}
	}
	return out
}

func createRuns(t testing.TB, ns, prefix string, n int, mutate func(*hftesting.RunWrapper)) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := atomic.Int64{}
	for range 8 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				w := hftesting.MakeHarnessRun(fmt.Sprintf("%s-%04d", prefix, i), ns)
				if mutate != nil {
					mutate(w)
				}
				if err := k8s.Create(context.Background(), w.Obj()); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestConflictOnEveryThirdWriteLosesNothing(t *testing.T) {
	ns := newNamespace(t)
	var nodes []*fakenode.Node
	for i := range 3 {
		nodes = append(nodes, startNode(t, ns, fakenode.Options{Name: fmt.Sprintf("conflict-%d", i), Slots: 5, Adapters: codexOnly,
			RunFor: 20 * time.Millisecond}))
	}
	binds := &bindLog{binds: map[string][]string{}}
	var injected atomic.Int64
	errorsBefore := reconcileErrors(t, "harnessrun")
	c := startController(t, ns, controllers.Options{}, recordingClient(binds, "controller", 3, &injected))
	const runs = 60 // four times the slots: runs wait and are woken by freed slots
	createRuns(t, ns, "c", runs, nil)

	eventually(t, 60*time.Second, func() error {
		list := &harnessv1.HarnessRunList{}
		if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		done := 0
		for _, r := range list.Items {
			if r.Status.Phase == harnessv1.RunSucceeded && len(r.Finalizers) == 0 {
				done++
			}
		}
		if done != runs {
			return fmt.Errorf("%d of %d runs Succeeded and released", done, runs)
		}
		return nil
	})
	list := &harnessv1.HarnessRunList{}
	if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, r := range list.Items {
		if r.Status.Attempt != 1 || r.Status.Verdict != harnessv1.VerdictPass || r.Status.NodeName == "" || r.Status.CompletionTime == nil {
			t.Errorf("run %s: attempt %d verdict %q node %q completion %v; want 1, Pass, a node, a time",
				r.Name, r.Status.Attempt, r.Status.Verdict, r.Status.NodeName, r.Status.CompletionTime)
		}
		if got := binds.binds[r.Name]; len(got) != 1 {
			t.Errorf("run %s was bound %d times, want once", r.Name, len(got))
		}
	}
	claims := 0
	for _, n := range nodes {
		claims += n.Claims()
		if n.MaxActive() > 5 {
			t.Errorf("node %s held %d runs at once, more than its 5 slots", n.Name(), n.MaxActive())
		}
	}
	if claims != runs {
		t.Errorf("the node-agents claimed %d runs, want %d", claims, runs)
	}
	if injected.Load() < runs/3 {
		t.Errorf("only %d conflicts were injected; the test did not exercise what it claims", injected.Load())
	}
	if got := metricValue(t, c.registry, "harnessfacts_binding_conflicts_total", nil); got < 1 {
		t.Errorf("harnessfacts_binding_conflicts_total = %v after %d injected conflicts", got, injected.Load())
	}
	// A conflict is the ordinary course of optimistic concurrency, tried
	// again without an error for controller-runtime to log as a fault.
	if got := reconcileErrors(t, "harnessrun") - errorsBefore; got != 0 {
		t.Errorf("%v passes returned an error (each a \"Reconciler error\" in the log) for %d injected conflicts", got, injected.Load())
	}
	eventually(t, wait, func() error {
		evs := scheduledEvents(t, ns)
		for _, r := range list.Items {
			if got := evs[r.Name]; len(got) != 1 || got[0] != r.Status.NodeName {
				return fmt.Errorf("run %s on %s has Scheduled Events naming %v, want exactly one naming its node", r.Name, r.Status.NodeName, got)
			}
		}
		return nil
	})
}

func TestRestartInTheMiddleOf500PendingRuns(t *testing.T) {
	ns := newNamespace(t)
	const nodes, slots, runs = 10, 40, 500
	slotMap := map[string]int32{}
	var fakes []*fakenode.Node
	for i := range nodes {
		name := fmt.Sprintf("restart-%02d", i)
		fakes = append(fakes, startNode(t, ns, fakenode.Options{Name: name, Slots: slots, NoClaim: true, Adapters: codexOnly, LeaseDuration: 30 * time.Second}))
		slotMap[name] = slots
	}
	start := time.Now()
	createRuns(t, ns, "p", runs, nil)
	t.Logf("created %d runs in %s", runs, time.Since(start))

	binds := &bindLog{binds: map[string][]string{}}
	var none atomic.Int64
	first := startController(t, ns, controllers.Options{}, recordingClient(binds, "first", 0, &none))
	eventually(t, 60*time.Second, func() error {
		if n := binds.total(); n < 150 {
			return fmt.Errorf("the first controller bound %d runs, waiting for 150", n)
		}
		return nil
	})
	t.Logf("first controller bound 150 at %s", time.Since(start))
	first.stop(t) // in the middle: runs are still being bound
	t.Logf("first controller stopped at %s", time.Since(start))
	boundByFirst := binds.total()
	if boundByFirst >= nodes*slots {
		t.Fatalf("the first controller bound all %d runs before it was stopped; the test restarted nothing", boundByFirst)
	}
	startController(t, ns, controllers.Options{}, recordingClient(binds, "second", 0, &none))

	full := fmt.Sprintf("all %d matching nodes are full (%d of %d slots in use)", nodes, nodes*slots, nodes*slots)
	var list *harnessv1.HarnessRunList
	eventually(t, 90*time.Second, func() error {
		list = &harnessv1.HarnessRunList{}
		if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		scheduled, waiting := 0, 0
		for _, r := range list.Items {
			switch {
			case r.Status.Phase == harnessv1.RunScheduled:
				scheduled++
			case r.Status.Phase == harnessv1.RunPending && strings.Contains(r.Status.Message, full):
				waiting++
			}
		}
		if scheduled != nodes*slots || waiting != runs-nodes*slots {
			return fmt.Errorf("%d runs Scheduled and %d Pending saying %q; want %d and %d", scheduled, waiting, full, nodes*slots, runs-nodes*slots)
		}
		return nil
	})
	t.Logf("the first controller bound %d runs, the second %d; done at %s", boundByFirst, binds.total()-boundByFirst, time.Since(start))

	// The final state: every node exactly full, every run bound at most
	// once, by one controller, in its first attempt.
	load := assertNoOverbooking(t, ns, slotMap)
	for node, n := range load {
		if n != slots {
			t.Errorf("node %s holds %d runs, want %d", node, n, slots)
		}
	}
	for _, r := range list.Items {
		ok, unknown := binds.confirmed(r.Name)
		switch {
		case len(ok) > 1:
			t.Errorf("run %s was bound %d times, by %v", r.Name, len(ok), ok)
		case r.Status.Phase == harnessv1.RunScheduled && len(ok) == 0 && len(unknown) == 0:
			t.Errorf("run %s is bound to %s, but no controller bound it", r.Name, r.Status.NodeName)
		case r.Status.Phase == harnessv1.RunScheduled && r.Status.Attempt != 1:
			t.Errorf("run %s: attempt %d, want 1", r.Name, r.Status.Attempt)
		case r.Status.Phase == harnessv1.RunPending && len(ok) != 0:
			t.Errorf("pending run %s was bound by %v", r.Name, ok)
		}
		if len(unknown) > 0 {
			t.Logf("run %s: a binding by %v was cut off when the first controller stopped; the run is %s on %q, acknowledged bindings %v",
				r.Name, unknown, r.Status.Phase, r.Status.NodeName, ok)
		}
	}
	for _, n := range fakes {
		if n.MaxActive() > slots {
			t.Errorf("node %s saw %d runs bound at once, more than its %d slots", n.Name(), n.MaxActive(), slots)
		}
	}

	// The Events: never two Scheduled Events for one run, each naming the
	// run's node. The first controller's last Events may have been lost
	// when it stopped (Events are sent asynchronously and are best
	// effort); every binding of the second controller has its Event.
	eventually(t, wait, func() error {
		evs := scheduledEvents(t, ns)
		missing := 0
		for _, r := range list.Items {
			got := evs[r.Name]
			if len(got) > 1 || (len(got) == 1 && got[0] != r.Status.NodeName) {
				t.Fatalf("run %s on %s has Scheduled Events naming %v", r.Name, r.Status.NodeName, got)
			}
			if ok, _ := binds.confirmed(r.Name); len(got) == 0 && r.Status.Phase == harnessv1.RunScheduled {
				if len(ok) == 1 && ok[0] == "second" {
					return fmt.Errorf("run %s, bound by the second controller, has no Scheduled Event yet", r.Name)
				}
				missing++
			}
			if r.Status.Phase == harnessv1.RunPending && len(got) != 0 {
				t.Fatalf("pending run %s has a Scheduled Event naming %v", r.Name, got)
			}
		}
		if missing > 0 {
			t.Logf("%d Scheduled Events of the first controller were lost when it stopped", missing)
		}
		return nil
	})
}

func TestOnlyTheLeaderBinds(t *testing.T) {
	ns := newNamespace(t)
	startNode(t, ns, fakenode.Options{Name: "elected", Slots: 20, NoClaim: true, Adapters: codexOnly, LeaseDuration: 30 * time.Second})
	binds := &bindLog{binds: map[string][]string{}}
	var none atomic.Int64
	a := startElectedController(t, ns, controllers.Options{}, recordingClient(binds, "a", 0, &none), true)
	eventually(t, wait, func() error {
		// The first replica holds the Lease before the second starts.
		lease := &coordinationv1.Lease{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "harnessfacts-controller"}, lease); err != nil {
			return err
		}
		return nil
	})
	startElectedController(t, ns, controllers.Options{}, recordingClient(binds, "b", 0, &none), true)
	createRuns(t, ns, "le", 5, nil)
	eventually(t, wait, func() error {
		if n := binds.total(); n != 5 {
			return fmt.Errorf("%d bindings, want 5", n)
		}
		return nil
	})
	for run, by := range binds.binds {
		if len(by) != 1 || by[0] != "a" {
			t.Errorf("run %s bound by %v, want by the leader a only", run, by)
		}
	}

	// The leader steps down (it releases its Lease); the other takes over.
	a.stop(t)
	createRuns(t, ns, "after", 5, nil)
	eventually(t, 60*time.Second, func() error {
		if n := binds.total(); n != 10 {
			return fmt.Errorf("%d bindings, want 10", n)
		}
		return nil
	})
	for run, by := range binds.binds {
		if strings.HasPrefix(run, "after-") && (len(by) != 1 || by[0] != "b") {
			t.Errorf("run %s bound by %v, want by the new leader b only", run, by)
		}
	}
}
