package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
)

var codexOnly = map[harnessv1.Adapter]string{harnessv1.AdapterCodex: "1.0"}

func TestNodeLossWithoutRetries(t *testing.T) {
	ns := newNamespace(t)
	// The node first, so that the controller's cache starts with it and
	// the run is bound at once (no Pending Event).
	node := startNode(t, ns, fakenode.Options{Name: "lossy", Slots: 2, Adapters: codexOnly, LeaseDuration: time.Second, RunFor: -1})
	startController(t, ns, controllers.Options{}, nil)
	create(t, hftesting.MakeHarnessRun("doomed", ns).Obj())
	waitRun(t, ns, "doomed", wait, "Running", phaseIs(harnessv1.RunRunning))
	// Let the node-agent finish reporting the claim before it dies.
	eventually(t, wait, func() error { return wantReasons(runEvents(t, ns, "doomed"), "Scheduled", "Running") })

	node.Stop() // the node dies: no heartbeat, no more reports
	run := waitRun(t, ns, "doomed", wait, "Failed without finalizer", func(r *harnessv1.HarnessRun) bool {
		return r.Status.Phase == harnessv1.RunFailed && len(r.Finalizers) == 0
	})
	if run.Status.Reason != harnessv1.ReasonNodeLost || run.Status.FailureClass != harnessv1.FailureInfrastructure ||
		run.Status.Verdict != harnessv1.VerdictError || run.Status.Attempt != 1 {
		t.Errorf("lost run: reason %q class %q verdict %q attempt %d, want NodeLost, Infrastructure, Error, 1",
			run.Status.Reason, run.Status.FailureClass, run.Status.Verdict, run.Status.Attempt)
	}
	if !strings.Contains(run.Status.Message, "node lossy was lost") || !strings.Contains(run.Status.Message, "expired") {
		t.Errorf("message %q should say that node lossy was lost because its Lease expired", run.Status.Message)
	}
	eventually(t, wait, func() error {
		return wantReasons(runEvents(t, ns, "doomed"), "Scheduled", "Running", harnessv1.ReasonNodeLost)
	})
}

func TestNodeLossRetriesOnAnotherNode(t *testing.T) {
	ns := newNamespace(t)
	first := startNode(t, ns, fakenode.Options{Name: "retry-a", Slots: 1, Adapters: codexOnly, LeaseDuration: time.Second, RunFor: -1})
	startController(t, ns, controllers.Options{}, nil)
	create(t, hftesting.MakeHarnessRun("phoenix", ns).Retries(1).Obj())
	waitRun(t, ns, "phoenix", wait, "Running on retry-a", func(r *harnessv1.HarnessRun) bool {
		return r.Status.Phase == harnessv1.RunRunning && r.Status.NodeName == "retry-a"
	})

	eventually(t, wait, func() error { return wantReasons(runEvents(t, ns, "phoenix"), "Scheduled", "Running") })
	second := startNode(t, ns, fakenode.Options{Name: "retry-b", Slots: 1, Adapters: codexOnly, LeaseDuration: 2 * time.Second, RunFor: -1})
	first.Stop()
	run := waitRun(t, ns, "phoenix", wait, "Running on retry-b, attempt 2", func(r *harnessv1.HarnessRun) bool {
		return r.Status.Phase == harnessv1.RunRunning && r.Status.NodeName == "retry-b" && r.Status.Attempt == 2
	})
	eventually(t, wait, func() error {
		if n := second.Claims(); n != 1 {
			return &reasonsError{got: []string{fmt.Sprint(n)}, want: []string{"1 claim by retry-b"}}
		}
		return nil
	})
	_ = run
	eventually(t, wait, func() error {
		return wantReasons(runEvents(t, ns, "phoenix"), "Scheduled", "Running", harnessv1.ReasonRetrying, "Scheduled", "Running")
	})

	// The second loss uses up the retries.
	second.Stop()
	run = waitRun(t, ns, "phoenix", wait, "Failed", phaseIs(harnessv1.RunFailed))
	if run.Status.Reason != harnessv1.ReasonNodeLost || run.Status.FailureClass != harnessv1.FailureInfrastructure || run.Status.Attempt != 2 ||
		!strings.Contains(run.Status.Message, "no retries left (attempt 2 of 2)") {
		t.Errorf("after the second loss: reason %q class %q attempt %d message %q; want NodeLost, Infrastructure, 2, no retries left",
			run.Status.Reason, run.Status.FailureClass, run.Status.Attempt, run.Status.Message)
	}
	eventually(t, wait, func() error {
		return wantReasons(runEvents(t, ns, "phoenix"), "Scheduled", "Running", harnessv1.ReasonRetrying, "Scheduled", "Running", harnessv1.ReasonNodeLost)
	})
}

func TestAgentFailureIsNotRetried(t *testing.T) {
	ns := newNamespace(t)
	startController(t, ns, controllers.Options{}, nil)
	startNode(t, ns, fakenode.Options{Name: "fails", Slots: 1, Adapters: codexOnly,
		Outcome: func(*harnessv1.HarnessRun) fakenode.Outcome { return fakenode.AgentFailed }})
	create(t, hftesting.MakeHarnessRun("bad-agent", ns).Retries(3).Obj())
	run := waitRun(t, ns, "bad-agent", wait, "finished without finalizer", func(r *harnessv1.HarnessRun) bool {
		return r.Status.Phase.Terminal() && len(r.Finalizers) == 0
	})
	if run.Status.Verdict != harnessv1.VerdictFail || run.Status.FailureClass != harnessv1.FailureAgent || run.Status.Attempt != 1 {
		t.Errorf("agent failure: verdict %q class %q attempt %d, want Fail, Agent, 1", run.Status.Verdict, run.Status.FailureClass, run.Status.Attempt)
	}
	if reasons := eventReasons(runEvents(t, ns, "bad-agent")); slices.Contains(reasons, harnessv1.ReasonRetrying) {
		t.Errorf("an agent failure was retried: Events %v", reasons)
	}
}

// wantReasons checks that the Events' reasons are exactly want, in any
// order: the controller and the node-agent stamp Events with their own
// clocks, microseconds apart.
func wantReasons(evs []eventsV1, want ...string) error {
	got := eventReasons(evs)
	want = slices.Clone(want)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return &reasonsError{got: got, want: want}
	}
	return nil
}

func TestNodeAgentRestartIsRetried(t *testing.T) {
	ns := newNamespace(t)
	node := startNode(t, ns, fakenode.Options{Name: "flaky", Slots: 1, Adapters: codexOnly, RunFor: -1})
	startController(t, ns, controllers.Options{}, nil)
	create(t, hftesting.MakeHarnessRun("survivor", ns).Retries(1).Obj())
	key := types.NamespacedName{Namespace: ns, Name: "survivor"}
	waitRun(t, ns, "survivor", wait, "Running", phaseIs(harnessv1.RunRunning))

	if err := node.MarkRestarted(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	waitRun(t, ns, "survivor", wait, "Running again, attempt 2", func(r *harnessv1.HarnessRun) bool {
		return r.Status.Phase == harnessv1.RunRunning && r.Status.Attempt == 2
	})
	if err := node.MarkRestarted(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	run := waitRun(t, ns, "survivor", wait, "Failed", phaseIs(harnessv1.RunFailed))
	if run.Status.Reason != harnessv1.ReasonNodeAgentRestarted || run.Status.FailureClass != harnessv1.FailureInfrastructure || run.Status.Attempt != 2 {
		t.Errorf("after two node-agent restarts: reason %q class %q attempt %d; want NodeAgentRestarted, Infrastructure, 2",
			run.Status.Reason, run.Status.FailureClass, run.Status.Attempt)
	}
}

// TestHandedBackAttemptsUseNoRetry: an attempt handed back by a node-agent
// that was shutting down is scheduled again without using a retry (the run
// has none), status.handedBack counts it, and after MaxHandBacks of them a
// further hand-back is an infrastructure failure like any other, which
// then ends the run that has no retries left.
func TestHandedBackAttemptsUseNoRetry(t *testing.T) {
	ns := newNamespace(t)
	node := startNode(t, ns, fakenode.Options{Name: "draining", Slots: 1, Adapters: codexOnly, RunFor: -1})
	startController(t, ns, controllers.Options{}, nil)
	create(t, hftesting.MakeHarnessRun("handed", ns).Obj()) // spec.retries 0
	key := types.NamespacedName{Namespace: ns, Name: "handed"}
	for i := int32(1); i <= harnessv1.MaxHandBacks; i++ {
		waitRun(t, ns, "handed", wait, fmt.Sprintf("Running, attempt %d", i), func(r *harnessv1.HarnessRun) bool {
			return r.Status.Phase == harnessv1.RunRunning && r.Status.Attempt == i
		})
		if err := node.MarkHandedBack(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		run := waitRun(t, ns, "handed", wait, fmt.Sprintf("attempt %d handed back", i), func(r *harnessv1.HarnessRun) bool {
			return r.Status.HandedBack == i
		})
		if run.Status.Phase.Terminal() || run.Status.Attempt != i+1 || run.Status.Verdict != "" {
			t.Fatalf("after hand-back %d: phase %s attempt %d verdict %q reason %s: %s", i, run.Status.Phase, run.Status.Attempt,
				run.Status.Verdict, run.Status.Reason, run.Status.Message)
		}
	}
	waitRun(t, ns, "handed", wait, "Running again", func(r *harnessv1.HarnessRun) bool {
		return r.Status.Phase == harnessv1.RunRunning && r.Status.Attempt == harnessv1.MaxHandBacks+1
	})
	eventually(t, wait, func() error {
		var reasons []string
		for _, e := range runEvents(t, ns, "handed") {
			reasons = append(reasons, e.Reason)
		}
		if slices.Contains(reasons, harnessv1.ReasonRetrying) {
			return fmt.Errorf("events %v: a hand-back used a retry", reasons)
		}
		if n := strings.Count(strings.Join(reasons, ","), harnessv1.ReasonHandedBack); n != int(harnessv1.MaxHandBacks) {
			return fmt.Errorf("events %v: want %d HandedBack", reasons, harnessv1.MaxHandBacks)
		}
		return nil
	})
	if err := node.MarkHandedBack(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	run := waitRun(t, ns, "handed", wait, "Failed", phaseIs(harnessv1.RunFailed))
	if run.Status.Reason != harnessv1.ReasonHandedBack || run.Status.FailureClass != harnessv1.FailureInfrastructure ||
		run.Status.HandedBack != harnessv1.MaxHandBacks {
		t.Errorf("a hand-back beyond MaxHandBacks with no retries: reason %q class %q handedBack %d; want HandedBack, Infrastructure, %d",
			run.Status.Reason, run.Status.FailureClass, run.Status.HandedBack, harnessv1.MaxHandBacks)
	}
}

// TestHandedBackThenRetried: hand-backs do not hide the retries used. A run
// with one retry, handed back once and then orphaned by a restarted
// node-agent, is retried (its one retry), and the next restart ends it.
func TestHandedBackThenRetried(t *testing.T) {
	ns := newNamespace(t)
	node := startNode(t, ns, fakenode.Options{Name: "mixed", Slots: 1, Adapters: codexOnly, RunFor: -1})
	startController(t, ns, controllers.Options{}, nil)
	create(t, hftesting.MakeHarnessRun("mixed", ns).Retries(1).Obj())
	key := types.NamespacedName{Namespace: ns, Name: "mixed"}
	mark := []func(context.Context, types.NamespacedName) error{node.MarkHandedBack, node.MarkRestarted, node.MarkRestarted}
	for i, m := range mark {
		attempt := int32(i + 1)
		waitRun(t, ns, "mixed", wait, fmt.Sprintf("Running, attempt %d", attempt), func(r *harnessv1.HarnessRun) bool {
			return r.Status.Phase == harnessv1.RunRunning && r.Status.Attempt == attempt
		})
		if err := m(context.Background(), key); err != nil {
			t.Fatal(err)
		}
	}
	run := waitRun(t, ns, "mixed", wait, "Failed", phaseIs(harnessv1.RunFailed))
	if run.Status.Reason != harnessv1.ReasonNodeAgentRestarted || run.Status.Attempt != 3 || run.Status.HandedBack != 1 ||
		!strings.Contains(run.Status.Message, "no retries left (attempt 2 of 2)") {
		t.Errorf("reason %q attempt %d handedBack %d message %q; want NodeAgentRestarted, 3, 1, no retries left (attempt 2 of 2)",
			run.Status.Reason, run.Status.Attempt, run.Status.HandedBack, run.Status.Message)
	}
}

// TestClaimTimeoutRetriesThenFails: a live node-agent that never claims its
// run does not keep it Scheduled forever: after the claim timeout the
// attempt is taken back and retried, and the last attempt fails with reason
// ClaimTimeout.
func TestClaimTimeoutRetriesThenFails(t *testing.T) {
	ns := newNamespace(t)
	startNode(t, ns, fakenode.Options{Name: "sleepy", Slots: 1, Adapters: codexOnly, NoClaim: true})
	startController(t, ns, controllers.Options{ClaimTimeout: 2 * time.Second}, nil)
	create(t, hftesting.MakeHarnessRun("unclaimed", ns).Retries(1).Obj())
	run := waitRun(t, ns, "unclaimed", wait, "Failed", phaseIs(harnessv1.RunFailed))
	if run.Status.Reason != harnessv1.ReasonClaimTimeout || run.Status.FailureClass != harnessv1.FailureInfrastructure ||
		run.Status.Verdict != harnessv1.VerdictError || run.Status.Attempt != 2 {
		t.Errorf("reason %q class %q verdict %q attempt %d, want ClaimTimeout, Infrastructure, Error, 2",
			run.Status.Reason, run.Status.FailureClass, run.Status.Verdict, run.Status.Attempt)
	}
	if !strings.Contains(run.Status.Message, "the node-agent on sleepy did not claim the run within 2s") ||
		!strings.Contains(run.Status.Message, "no retries left (attempt 2 of 2)") {
		t.Errorf("message %q should say that sleepy did not claim it and no retries are left", run.Status.Message)
	}
	eventually(t, wait, func() error {
		return wantReasons(runEvents(t, ns, "unclaimed"), "Scheduled", harnessv1.ReasonRetrying, "Scheduled", harnessv1.ReasonClaimTimeout)
	})
}

// TestStoppedRunWhoseAttemptIsLostEndsAsTheStop: a run cancelled or deleted
// whose attempt is then lost (its node lost, its node-agent restarted, or
// the attempt handed back by a node-agent shutting down) ends as the user
// asked: Failed, reason Cancelled or Deleted, no verdict and no failure
// class, the lost attempt in the message; it is neither retried nor
// scheduled again. A node-agent that is dead (Stop) cannot end the run
// itself, as the real one cannot when it is killed.
func TestStoppedRunWhoseAttemptIsLostEndsAsTheStop(t *testing.T) {
	ns := newNamespace(t)
	// Lost a second after its node-agent stops heartbeating.
	lost := startNode(t, ns, fakenode.Options{Name: "stop-lost", Slots: 1, Adapters: codexOnly, LeaseDuration: time.Second, RunFor: -1,
		Labels: map[string]string{"stop": "lost"}})
	// Fresh for the whole test: only what its node-agent reports counts.
	left := startNode(t, ns, fakenode.Options{Name: "stop-left", Slots: 2, Adapters: codexOnly, LeaseDuration: time.Minute, RunFor: -1,
		Labels: map[string]string{"stop": "left"}})
	startController(t, ns, controllers.Options{}, nil)
	mk := hftesting.MakeHarnessRun
	create(t,
		mk("cancelled-node-lost", ns).Retries(1).NodeSelector(map[string]string{"stop": "lost"}).Obj(),
		mk("cancelled-handed-back", ns).NodeSelector(map[string]string{"stop": "left"}).Obj(),
		mk("deleted-restarted", ns).Retries(1).NodeSelector(map[string]string{"stop": "left"}).Obj())
	for _, name := range []string{"cancelled-node-lost", "cancelled-handed-back", "deleted-restarted"} {
		waitRun(t, ns, name, wait, "Running", phaseIs(harnessv1.RunRunning))
	}
	// Let the node-agents finish reporting the claims before they die.
	for _, name := range []string{"cancelled-node-lost", "cancelled-handed-back", "deleted-restarted"} {
		eventually(t, wait, func() error { return wantReasons(runEvents(t, ns, name), "Scheduled", "Running") })
	}
	lost.Stop()
	left.Stop()
	stopAsked := func(r *harnessv1.HarnessRun) bool {
		return meta.IsStatusConditionTrue(r.Status.Conditions, harnessv1.ConditionStopRequested)
	}

	cancelRun(t, ns, "cancelled-node-lost")
	cancelRun(t, ns, "cancelled-handed-back")
	waitRun(t, ns, "cancelled-handed-back", wait, "asked to stop", stopAsked)
	if err := left.MarkHandedBack(context.Background(), types.NamespacedName{Namespace: ns, Name: "cancelled-handed-back"}); err != nil {
		t.Fatal(err)
	}
	deleteRun(t, ns, "deleted-restarted")
	waitRun(t, ns, "deleted-restarted", wait, "asked to stop", stopAsked)
	if err := left.MarkRestarted(context.Background(), types.NamespacedName{Namespace: ns, Name: "deleted-restarted"}); err != nil {
		t.Fatal(err)
	}

	for name, because := range map[string]string{
		"cancelled-node-lost":   "node stop-lost was lost",
		"cancelled-handed-back": "the node-agent was shutting down and handed the attempt back",
	} {
		run := waitRun(t, ns, name, wait, "Failed without finalizer", func(r *harnessv1.HarnessRun) bool {
			return r.Status.Phase == harnessv1.RunFailed && len(r.Finalizers) == 0
		})
		st := run.Status
		if st.Reason != harnessv1.ReasonCancelled || st.FailureClass != "" || st.Verdict != "" || st.Attempt != 1 || st.HandedBack != 0 ||
			!strings.Contains(st.Message, "the run was cancelled (spec.cancel)") || !strings.Contains(st.Message, because) {
			t.Errorf("%s: reason %q class %q verdict %q attempt %d handedBack %d message %q; want Cancelled, no class, no verdict, attempt 1, not handed back, saying %q",
				name, st.Reason, st.FailureClass, st.Verdict, st.Attempt, st.HandedBack, st.Message, because)
		}
	}
	waitGone(t, ns, "deleted-restarted")
	eventually(t, wait, func() error {
		return wantReasons(runEvents(t, ns, "deleted-restarted"), "Scheduled", "Running", harnessv1.ConditionStopRequested, harnessv1.ReasonDeleted)
	})
	for _, e := range runEvents(t, ns, "deleted-restarted") {
		if e.Reason == harnessv1.ReasonDeleted && !strings.Contains(e.Note, "the node-agent on stop-left restarted") {
			t.Errorf("the Deleted Event says %q; want it to name the node-agent's restart", e.Note)
		}
	}
}

// behind is the real clock a fixed time behind.
type behind struct {
	clock.RealClock
	by time.Duration
}

func (b behind) Now() time.Time                  { return time.Now().Add(-b.by) }
func (b behind) Since(t time.Time) time.Duration { return b.Now().Sub(t) }

// TestNodeWithASlowClockIsNotLost: a node-agent writes its Lease's
// renewTime with its own clock. Judged against the controller's clock, a
// node a minute behind had a Lease that was always expired: it was never
// Ready, and a run bound to it was lost at once. The controller times
// Leases by when it sees them renewed: the node takes the run and it
// finishes; stopped, the node is lost as any other.
func TestNodeWithASlowClockIsNotLost(t *testing.T) {
	ns := newNamespace(t)
	node := startNode(t, ns, fakenode.Options{Name: "slow-clock", Slots: 1, Adapters: codexOnly, LeaseDuration: 2 * time.Second,
		RunFor: 3 * time.Second, Clock: behind{by: time.Minute}})
	startController(t, ns, controllers.Options{}, nil)
	create(t, hftesting.MakeHarnessRun("on-slow", ns).Obj())
	run := waitRun(t, ns, "on-slow", wait, "terminal", func(r *harnessv1.HarnessRun) bool { return r.Status.Phase.Terminal() })
	if run.Status.Phase != harnessv1.RunSucceeded {
		t.Fatalf("a run on a node a minute behind: %s %s: %s", run.Status.Phase, run.Status.Reason, run.Status.Message)
	}
	create(t, hftesting.MakeHarnessRun("on-stopped", ns).Obj())
	waitRun(t, ns, "on-stopped", wait, "Running", phaseIs(harnessv1.RunRunning))
	node.Stop()
	run = waitRun(t, ns, "on-stopped", wait, "Failed", phaseIs(harnessv1.RunFailed))
	if run.Status.Reason != harnessv1.ReasonNodeLost {
		t.Errorf("a stopped node's run: %s: %s, want NodeLost", run.Status.Reason, run.Status.Message)
	}
}

// outage cuts every client that talks through it off the API server, as an
// API server that is stopped does: requests fail, and open watches end.
type outage struct {
	mu    sync.Mutex
	down  bool
	open  map[io.Closer]bool
	fails atomic.Int64
}

func (o *outage) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTrip(func(req *http.Request) (*http.Response, error) {
		o.mu.Lock()
		down := o.down
		o.mu.Unlock()
		if down {
			o.fails.Add(1)
			return nil, errors.New("dial tcp: connect: connection refused (the test's API server outage)")
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return resp, err
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.open == nil {
			o.open = map[io.Closer]bool{}
		}
		o.open[resp.Body] = true
		body := resp.Body
		resp.Body = closeFunc{ReadCloser: body, close: func() error {
			o.mu.Lock()
			delete(o.open, body)
			o.mu.Unlock()
			return body.Close()
		}}
		return resp, nil
	})
}

// set starts or ends the outage; starting it ends every open response.
func (o *outage) set(down bool) {
	o.mu.Lock()
	o.down = down
	var open []io.Closer
	if down {
		for c := range o.open {
			open = append(open, c)
		}
	}
	o.mu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

type closeFunc struct {
	io.ReadCloser
	close func() error
}

func (c closeFunc) Close() error { return c.close() }

// TestAPIServerOutageLosesNoNode: the API server is away for longer than a
// node's Lease, for the node-agent and the controller alike. The node-agent
// could not renew, and the controller, once back, judged from its cache
// that the node was lost and failed its healthy run NodeLost before the
// first renewal since reached it. A loss is confirmed against the API
// server itself, after it could be read for a whole Lease: the run goes
// on and finishes.
func TestAPIServerOutageLosesNoNode(t *testing.T) {
	ns := newNamespace(t)
	o := &outage{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = o.wrap
	startNodeOn(t, cfg, ns, fakenode.Options{Name: "outage", Slots: 1, Adapters: codexOnly, LeaseDuration: 2 * time.Second, RunFor: 12 * time.Second})
	startControllerOn(t, cfg, ns, controllers.Options{}, nil, false, clock.RealClock{})
	create(t, hftesting.MakeHarnessRun("through-outage", ns).Obj())
	waitRun(t, ns, "through-outage", wait, "Running", phaseIs(harnessv1.RunRunning))
	o.set(true)
	time.Sleep(5 * time.Second) // two and a half Leases
	o.set(false)
	if o.fails.Load() == 0 {
		t.Fatal("nothing asked the API server during the outage: the test shows nothing")
	}
	run := waitRun(t, ns, "through-outage", 30*time.Second, "terminal", func(r *harnessv1.HarnessRun) bool { return r.Status.Phase.Terminal() })
	if run.Status.Phase != harnessv1.RunSucceeded || run.Status.Attempt != 1 {
		t.Errorf("a run whose node-agent ran through the API server's outage: %s %s (attempt %d): %s",
			run.Status.Phase, run.Status.Reason, run.Status.Attempt, run.Status.Message)
	}
}
