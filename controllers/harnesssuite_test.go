package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
)

// startSuiteController starts the controller as `harnessfacts controller`
// does, HarnessRun and HarnessSuite reconcilers in one manager, watching the
// objects of ns (and only its fixture ConfigMaps).
func startSuiteController(t testing.TB, ns string) *controller {
	t.Helper()
	return startSuiteControllerWith(t, ns, nil)
}

// startSuiteControllerWith is startSuiteController with wrap, if set,
// wrapping the client of the HarnessSuite reconciler (to count its calls).
func startSuiteControllerWith(t testing.TB, ns string, wrap func(client.Client) client.Client) *controller {
	t.Helper()
	skip := true
	opts := controllers.ManagerOptions(controllers.ManagerConfig{Scheme: env.Scheme, Namespaces: []string{ns}})
	opts.Metrics, opts.HealthProbeBindAddress = metricsserver.Options{BindAddress: "0"}, "0"
	opts.Controller = config.Controller{SkipNameValidation: &skip}
	mgr, err := ctrl.NewManager(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := controllers.SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r, err := controllers.NewHarnessRunReconciler(mgr.GetClient(), mgr.GetEventRecorder("harnessfacts-controller"), clock.RealClock{},
		controllers.Options{Registerer: reg, FixtureReader: mgr.GetAPIReader()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	sc := mgr.GetClient()
	if wrap != nil {
		sc = wrap(sc)
	}
	if err := controllers.NewHarnessSuiteReconciler(sc, mgr.GetEventRecorder("harnessfacts-controller"), clock.RealClock{},
		controllers.SuiteOptions{}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	h := &controller{reconciler: r, registry: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- mgr.Start(ctx) }()
	t.Cleanup(func() { h.stop(t) })
	return h
}

// fixtureCM is a fixture ConfigMap as kustomize's configMapGenerator makes
// it, labelled for suites.
func fixtureCM(ns, name, prompt string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{harnessv1.LabelFixture: "true", "suite": "smoke"}},
		Data: map[string]string{"fixture.yaml": "prompt: " + prompt + "\n", "workspace__README.md": "hi\n"},
	}
}

// makeSuite is a suite of codex agents over the fixtures labelled
// suite=smoke.
func makeSuite(ns, name string, agents []string, repeats, parallelism int32) *harnessv1.HarnessSuite {
	s := &harnessv1.HarnessSuite{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: harnessv1.HarnessSuiteSpec{
			Fixtures:    harnessv1.SuiteFixtures{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"suite": "smoke"}}},
			Repeats:     repeats,
			Parallelism: parallelism,
			Revision:    intstr.FromString("r1"),
			Template:    harnessv1.SuiteRunTemplate{Limits: &harnessv1.Limits{EpisodeSeconds: 60, ProbeSeconds: 30}},
		},
	}
	for _, a := range agents {
		s.Spec.Agents = append(s.Spec.Agents, harnessv1.SuiteAgent{Name: a, Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex, Model: a}})
	}
	return s
}

func getSuite(t testing.TB, ns, name string) *harnessv1.HarnessSuite {
	t.Helper()
	s := &harnessv1.HarnessSuite{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitSuite waits until the suite satisfies cond.
func waitSuite(t testing.TB, ns, name string, timeout time.Duration, what string, cond func(*harnessv1.HarnessSuite) bool) *harnessv1.HarnessSuite {
	t.Helper()
	var s *harnessv1.HarnessSuite
	eventually(t, timeout, func() error {
		s = &harnessv1.HarnessSuite{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			return err
		}
		if !cond(s) {
			return fmt.Errorf("suite %s is not %s: round %d progress %q counts %+v conditions %v", name, what,
				s.Status.Round, s.Status.Progress, s.Status.Counts, conditionSummary(s.Status.Conditions))
		}
		return nil
	})
	return s
}

func conditionSummary(conds []metav1.Condition) []string {
	var out []string
	for _, c := range conds {
		out = append(out, fmt.Sprintf("%s=%s/%s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return out
}

func suiteComplete(s *harnessv1.HarnessSuite) bool {
	return meta.IsStatusConditionTrue(s.Status.Conditions, harnessv1.SuiteConditionComplete) && s.Status.ObservedGeneration == s.Generation
}

func suiteRuns(t testing.TB, ns, suite string) []harnessv1.HarnessRun {
	t.Helper()
	list := &harnessv1.HarnessRunList{}
	if err := k8s.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{harnessv1.LabelSuite: suite}); err != nil {
		t.Fatal(err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items
}

// activeWatch counts, from a watch of the namespace's runs, the most runs of
// a suite that were unfinished at once. The watch delivers changes in
// order, so each count is the true count at some moment.
type activeWatch struct {
	mu        sync.Mutex
	active    map[string]bool
	maxActive int
	seen      map[string]bool
}

func watchActive(t testing.TB, ns string) *activeWatch {
	t.Helper()
	w := &activeWatch{active: map[string]bool{}, seen: map[string]bool{}}
	c, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	inf, err := c.GetInformer(ctx, &harnessv1.HarnessRun{})
	if err != nil {
		t.Fatal(err)
	}
	update := func(obj any) {
		run, ok := obj.(*harnessv1.HarnessRun)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.seen[run.Name] = true
		if run.Status.Phase.Terminal() {
			delete(w.active, run.Name)
		} else {
			w.active[run.Name] = true
		}
		w.maxActive = max(w.maxActive, len(w.active))
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: update, UpdateFunc: func(_, o any) { update(o) },
		DeleteFunc: func(o any) {
			if run, ok := o.(*harnessv1.HarnessRun); ok {
				w.mu.Lock()
				delete(w.active, run.Name)
				w.mu.Unlock()
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the test's run watch did not sync")
	}
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *activeWatch) max() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxActive
}

func (w *activeWatch) runsSeen() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seen)
}

// byAgent ends the runs of agent "good" with Pass and the others with a
// failed agent.
// The good agent's runs report usage that differs per repeat (so that a
// summing bug shows: 100+101+102 in, 10+20+30 out, 4+4+4 cache per cell;
// the last repeat with an answer the gateway read no figures from), the bad
// one's none.
func byAgent(run *harnessv1.HarnessRun) fakenode.Outcome {
	if run.Labels[harnessv1.LabelSuiteAgent] == "good" {
		o := fakenode.Pass
		rep, _ := strconv.Atoi(run.Annotations[harnessv1.AnnotationSuiteRepeat])
		o.Usage = &harnessv1.UsageStatus{Source: harnessv1.UsageFromGateway, InputTokens: int64(100 + rep),
			OutputTokens: int64(10 * (rep + 1)), CacheReadTokens: 3, CacheWriteTokens: 1}
		if rep == 2 {
			o.Usage.UncountedResponses = 1
		}
		o.Reward = "0.75" // a Harbor-style verifier's reward
		return o
	}
	return fakenode.AgentFailed
}

func TestSuiteRunsTheMatrix(t *testing.T) {
	ns := newNamespace(t)
	create(t, fixtureCM(ns, "fixture-a", "do a"), fixtureCM(ns, "fixture-b", "do b"))
	// A labelled ConfigMap the selector does not pick, and an unlabelled one
	// it would: neither is a fixture of the suite.
	other := fixtureCM(ns, "fixture-other", "no")
	other.Labels["suite"] = "other"
	unlabelled := fixtureCM(ns, "fixture-unlabelled", "no")
	delete(unlabelled.Labels, harnessv1.LabelFixture)
	create(t, other, unlabelled)

	startNode(t, ns, fakenode.Options{Name: "suite-node-" + ns, Slots: 4, Adapters: codexOnly, RunFor: 100 * time.Millisecond, Outcome: byAgent})
	startSuiteController(t, ns)
	w := watchActive(t, ns)

	suite := makeSuite(ns, "matrix", []string{"good", "bad"}, 3, 3)
	suite.Spec.Template.Network = &harnessv1.NetworkSpec{Egress: harnessv1.EgressNone}
	create(t, suite)
	s := waitSuite(t, ns, "matrix", time.Minute, "complete", suiteComplete)

	if got := w.max(); got > 3 {
		t.Errorf("%d runs of the suite were unfinished at once; parallelism is 3", got)
	}
	if got := w.runsSeen(); got != 12 {
		t.Errorf("%d runs were created, want 2 agents × 2 fixtures × 3 repeats = 12", got)
	}
	want := harnessv1.SuiteCounts{Total: 12, Created: 12, Finished: 12, Passed: 6, Failed: 6}
	if diff := cmp.Diff(want, s.Status.Counts); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if s.Status.Progress != "12/12" || s.Status.PassRate != "50.0%" || s.Status.Round != 1 || s.Status.Revision != "r1" {
		t.Errorf("progress %q pass rate %q round %d revision %q, want 12/12, 50.0%%, 1, r1", s.Status.Progress, s.Status.PassRate, s.Status.Round, s.Status.Revision)
	}
	if s.Status.StartTime == nil || s.Status.CompletionTime == nil {
		t.Errorf("start %v completion %v, want both set", s.Status.StartTime, s.Status.CompletionTime)
	}
	hashA := controllers.FixtureHash(fixtureCM(ns, "fixture-a", "do a"))
	hashB := controllers.FixtureHash(fixtureCM(ns, "fixture-b", "do b"))
	var cells []string
	for _, c := range s.Status.Cells {
		cells = append(cells, fmt.Sprintf("%s×%s n=%d passed=%d rate=%s unfinished=%d hashes=%v tokens=%d/%d/%d counted=%d uncounted=%d partly=%d reward n=%d mean=%q interval=%q",
			c.Agent, c.Fixture, c.N, c.Passed, c.PassRate, c.Unfinished, len(c.FixtureHashes),
			c.InputTokens, c.OutputTokens, c.CacheTokens, c.CountedRuns, c.UncountedRuns, c.PartlyCountedRuns, c.RewardN, c.RewardMean, c.RewardInterval))
	}
	wantCells := []string{
		"good×fixture-a n=3 passed=3 rate=100.0% unfinished=0 hashes=1 tokens=303/60/12 counted=3 uncounted=0 partly=1 reward n=3 mean=\"0.75\" interval=\"[0.75, 0.75]\"",
		"good×fixture-b n=3 passed=3 rate=100.0% unfinished=0 hashes=1 tokens=303/60/12 counted=3 uncounted=0 partly=1 reward n=3 mean=\"0.75\" interval=\"[0.75, 0.75]\"",
		"bad×fixture-a n=3 passed=0 rate=0.0% unfinished=0 hashes=1 tokens=0/0/0 counted=0 uncounted=3 partly=0 reward n=0 mean=\"\" interval=\"\"",
		"bad×fixture-b n=3 passed=0 rate=0.0% unfinished=0 hashes=1 tokens=0/0/0 counted=0 uncounted=3 partly=0 reward n=0 mean=\"\" interval=\"\"",
	}
	if diff := cmp.Diff(wantCells, cells); diff != "" {
		t.Errorf("cells (-want +got):\n%s", diff)
	}
	if len(s.Status.Fixtures) != 2 || s.Status.Fixtures[0].Hash != hashA || s.Status.Fixtures[1].Hash != hashB {
		t.Errorf("status.fixtures %+v, want fixture-a %s and fixture-b %s", s.Status.Fixtures, hashA, hashB)
	}

	// Each run: a deterministic name, the suite's labels, the fixture hash,
	// the template, and a controller owner reference to the suite.
	runs := suiteRuns(t, ns, "matrix")
	names := map[string]bool{}
	for _, a := range []string{"good", "bad"} {
		for _, f := range []string{"fixture-a", "fixture-b"} {
			for rep := range int32(3) {
				names[controllers.SuiteRunName(s, 1, a, f, rep)] = true
			}
		}
	}
	for _, run := range runs {
		if !names[run.Name] || len(run.Name) > 63 {
			t.Errorf("run %s is not one of the matrix's names", run.Name)
		}
		f := run.Spec.Fixture.ConfigMapRef.Name
		if run.Labels[harnessv1.LabelSuiteRound] != "1" || run.Labels[harnessv1.LabelSuiteFixture] != f ||
			run.Spec.Agent.Model != run.Labels[harnessv1.LabelSuiteAgent] {
			t.Errorf("run %s: labels %v, agent %+v", run.Name, run.Labels, run.Spec.Agent)
		}
		if want := map[string]string{"fixture-a": hashA, "fixture-b": hashB}[f]; run.Annotations[harnessv1.AnnotationFixtureHash] != want {
			t.Errorf("run %s: fixture hash %q, want %q", run.Name, run.Annotations[harnessv1.AnnotationFixtureHash], want)
		}
		if run.Spec.Network.Egress != harnessv1.EgressNone || run.Spec.Limits.EpisodeSeconds != 60 {
			t.Errorf("run %s does not carry the template: %+v %+v", run.Name, run.Spec.Network, run.Spec.Limits)
		}
		ref := metav1.GetControllerOf(&run)
		if ref == nil || ref.Kind != "HarnessSuite" || ref.UID != s.UID || !ptr.Deref(ref.BlockOwnerDeletion, false) {
			t.Errorf("run %s: controller reference %+v, want the suite's with blockOwnerDeletion", run.Name, ref)
		}
	}
	if len(runs) != 12 {
		t.Errorf("%d runs, want 12", len(runs))
	}
}

func TestSuiteSuspendAndResume(t *testing.T) {
	ns := newNamespace(t)
	create(t, fixtureCM(ns, "fixture-a", "do a"))
	node := startNode(t, ns, fakenode.Options{Name: "suspend-node-" + ns, Slots: 4, Adapters: codexOnly, RunFor: -1})
	startSuiteController(t, ns)

	suite := makeSuite(ns, "pause", []string{"good"}, 4, 2)
	suite.Spec.Suspend = true
	create(t, suite)
	s := waitSuite(t, ns, "pause", 30*time.Second, "suspended", func(s *harnessv1.HarnessSuite) bool {
		return meta.IsStatusConditionTrue(s.Status.Conditions, harnessv1.SuiteConditionSuspended)
	})
	if c := meta.FindStatusCondition(s.Status.Conditions, harnessv1.SuiteConditionProgressing); c == nil || c.Reason != harnessv1.SuiteReasonSuspended {
		t.Errorf("Progressing %+v, want False/Suspended", c)
	}
	if n := len(suiteRuns(t, ns, "pause")); n != 0 {
		t.Fatalf("a suspended suite created %d runs", n)
	}

	// Resume: two runs (the parallelism) start.
	setSuspend(t, ns, "pause", false)
	waitRunning := func(n int) []harnessv1.HarnessRun {
		var running []harnessv1.HarnessRun
		eventually(t, 30*time.Second, func() error {
			running = running[:0]
			for _, r := range suiteRuns(t, ns, "pause") {
				if r.Status.Phase == harnessv1.RunRunning {
					running = append(running, r)
				}
			}
			if len(running) != n {
				return fmt.Errorf("%d runs Running, want %d", len(running), n)
			}
			return nil
		})
		return running
	}
	running := waitRunning(2)

	// Suspend again: the running runs finish, no new one starts.
	setSuspend(t, ns, "pause", true)
	waitSuite(t, ns, "pause", 30*time.Second, "suspended", func(s *harnessv1.HarnessSuite) bool {
		return meta.IsStatusConditionTrue(s.Status.Conditions, harnessv1.SuiteConditionSuspended) && s.Status.ObservedGeneration == s.Generation
	})
	for _, r := range running {
		if err := node.Finish(context.Background(), client.ObjectKeyFromObject(&r), fakenode.Pass); err != nil {
			t.Fatal(err)
		}
	}
	s = waitSuite(t, ns, "pause", 30*time.Second, "showing the two finished runs", func(s *harnessv1.HarnessSuite) bool {
		return s.Status.Counts.Finished == 2
	})
	if s.Status.Counts.Created != 2 || len(suiteRuns(t, ns, "pause")) != 2 {
		t.Errorf("a suspended suite created runs: counts %+v", s.Status.Counts)
	}
	if s.Status.Progress != "2/4" {
		t.Errorf("progress %q, want 2/4", s.Status.Progress)
	}

	// Resume: the two others run.
	setSuspend(t, ns, "pause", false)
	running = waitRunning(2)
	for _, r := range running {
		if err := node.Finish(context.Background(), client.ObjectKeyFromObject(&r), fakenode.Pass); err != nil {
			t.Fatal(err)
		}
	}
	waitSuite(t, ns, "pause", 30*time.Second, "complete", suiteComplete)
}

func setSuspend(t testing.TB, ns, name string, suspend bool) {
	t.Helper()
	s := getSuite(t, ns, name)
	base := s.DeepCopy()
	s.Spec.Suspend = suspend
	if err := k8s.Patch(context.Background(), s, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

func TestSuiteRevisionStartsANewRound(t *testing.T) {
	ns := newNamespace(t)
	create(t, fixtureCM(ns, "fixture-a", "do a"), fixtureCM(ns, "fixture-b", "do b"))
	startNode(t, ns, fakenode.Options{Name: "round-node-" + ns, Slots: 4, Adapters: codexOnly, RunFor: 50 * time.Millisecond, Outcome: byAgent})
	startSuiteController(t, ns)

	create(t, makeSuite(ns, "rounds", []string{"good", "bad"}, 2, 4))
	first := waitSuite(t, ns, "rounds", time.Minute, "complete", suiteComplete)
	round1 := map[string]bool{}
	var one harnessv1.HarnessRun
	for _, r := range suiteRuns(t, ns, "rounds") {
		round1[r.Name] = true
		one = r
	}
	// A run of the namespace's that carries the suite's labels but that
	// the suite does not own (a run author labels runs as they like): the
	// new round's cleanup must leave it alone.
	foreign := &harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "not-the-suites",
		Labels: map[string]string{harnessv1.LabelSuite: "rounds", harnessv1.LabelSuiteRound: "1"}}, Spec: *one.Spec.DeepCopy()}
	create(t, foreign)

	// fixture-b changes between the rounds, fixture-a does not.
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "fixture-b"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["fixture.yaml"] = "prompt: do b better\n"
	if err := k8s.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	s := getSuite(t, ns, "rounds")
	base := s.DeepCopy()
	s.Spec.Revision = intstr.FromInt32(2)
	if err := k8s.Patch(context.Background(), s, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	s = waitSuite(t, ns, "rounds", time.Minute, "complete in round 2", func(s *harnessv1.HarnessSuite) bool {
		return suiteComplete(s) && s.Status.Round == 2
	})
	if s.Status.Revision != "2" || len(s.Status.Rounds) != 1 {
		t.Fatalf("revision %q, rounds %+v", s.Status.Revision, s.Status.Rounds)
	}
	prev := s.Status.Rounds[0]
	if prev.Round != 1 || prev.Revision != "r1" || prev.Counts.Total != 8 || prev.Counts.Passed != 4 || prev.PassRate != "50.0%" ||
		prev.CompletionTime == nil || !prev.CompletionTime.Equal(first.Status.CompletionTime) {
		t.Errorf("round 1 summary %+v, want round 1 of r1: 8 runs, 4 passed, its completion time %v", prev, first.Status.CompletionTime)
	}
	unchanged := map[string]bool{}
	for _, f := range s.Status.Fixtures {
		unchanged[f.Name] = f.UnchangedSincePreviousRound
	}
	if diff := cmp.Diff(map[string]bool{"fixture-a": true, "fixture-b": false}, unchanged); diff != "" {
		t.Errorf("fixtures unchanged since the previous round (-want +got):\n%s", diff)
	}
	// The earlier round's runs are deleted; the new round's are new.
	eventually(t, 30*time.Second, func() error {
		runs := slices.DeleteFunc(suiteRuns(t, ns, "rounds"), func(r harnessv1.HarnessRun) bool { return r.Name == foreign.Name })
		for _, r := range runs {
			if round1[r.Name] || r.Labels[harnessv1.LabelSuiteRound] != "2" {
				return fmt.Errorf("run %s of round %s is still there", r.Name, r.Labels[harnessv1.LabelSuiteRound])
			}
		}
		if len(runs) != 8 {
			return fmt.Errorf("%d runs, want the 8 of round 2", len(runs))
		}
		return nil
	})
	if got := getRun(t, ns, "not-the-suites"); got.DeletionTimestamp != nil {
		t.Errorf("the new round deleted a run the suite does not own")
	}
}

func TestSuiteFixtureChangedMidRound(t *testing.T) {
	ns := newNamespace(t)
	create(t, fixtureCM(ns, "fixture-a", "do a"))
	node := startNode(t, ns, fakenode.Options{Name: "change-node-" + ns, Slots: 4, Adapters: codexOnly, RunFor: -1})
	startSuiteController(t, ns)
	create(t, makeSuite(ns, "drift", []string{"good"}, 2, 1))

	var first harnessv1.HarnessRun
	eventually(t, 30*time.Second, func() error {
		runs := suiteRuns(t, ns, "drift")
		if len(runs) != 1 || runs[0].Status.Phase != harnessv1.RunRunning {
			return fmt.Errorf("%d runs, want 1 Running", len(runs))
		}
		first = runs[0]
		return nil
	})
	oldHash := first.Annotations[harnessv1.AnnotationFixtureHash]

	cm := fixtureCM(ns, "fixture-a", "do a, differently")
	if err := k8s.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	newHash := controllers.FixtureHash(cm)
	s := waitSuite(t, ns, "drift", 30*time.Second, "warning that the fixture changed", func(s *harnessv1.HarnessSuite) bool {
		return meta.IsStatusConditionTrue(s.Status.Conditions, harnessv1.SuiteConditionFixtureChanged)
	})
	if f := s.Status.Fixtures[0]; f.RoundHash != oldHash || f.Hash != newHash || !f.ChangedInRound {
		t.Errorf("fixture status %+v, want round hash %s, hash %s, changed", f, oldHash, newHash)
	}
	if err := node.Finish(context.Background(), client.ObjectKeyFromObject(&first), fakenode.Pass); err != nil {
		t.Fatal(err)
	}
	// The second run is created with the new content.
	eventually(t, 30*time.Second, func() error {
		for _, r := range suiteRuns(t, ns, "drift") {
			if r.Name != first.Name {
				if got := r.Annotations[harnessv1.AnnotationFixtureHash]; got != newHash {
					return fmt.Errorf("second run has fixture hash %s, want %s", got, newHash)
				}
				if r.Status.Phase == harnessv1.RunRunning {
					return node.Finish(context.Background(), client.ObjectKeyFromObject(&r), fakenode.Pass)
				}
				return fmt.Errorf("second run is %s", r.Status.Phase)
			}
		}
		return fmt.Errorf("no second run yet")
	})
	s = waitSuite(t, ns, "drift", 30*time.Second, "complete", suiteComplete)
	if got := s.Status.Cells[0].FixtureHashes; len(got) != 2 {
		t.Errorf("cell fixture hashes %v, want the old and the new", got)
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, harnessv1.SuiteConditionFixtureChanged); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("FixtureChanged %+v, want True for the rest of the round", c)
	}
}

func TestSuiteWaitsForMissingFixtures(t *testing.T) {
	ns := newNamespace(t)
	startNode(t, ns, fakenode.Options{Name: "missing-node-" + ns, Slots: 4, Adapters: codexOnly, RunFor: 10 * time.Millisecond})
	startSuiteController(t, ns)
	suite := makeSuite(ns, "missing", []string{"good"}, 1, 1)
	suite.Spec.Fixtures = harnessv1.SuiteFixtures{Names: []string{"fixture-later"}}
	create(t, suite)
	s := waitSuite(t, ns, "missing", 30*time.Second, "waiting for its fixture", func(s *harnessv1.HarnessSuite) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, harnessv1.SuiteConditionProgressing)
		return c != nil && c.Reason == harnessv1.SuiteReasonFixturesNotFound
	})
	if c := meta.FindStatusCondition(s.Status.Conditions, harnessv1.SuiteConditionProgressing); c.Message != "fixture ConfigMaps not found (or without the label harnessfacts.io/fixture=true): fixture-later" {
		t.Errorf("message %q", c.Message)
	}
	create(t, fixtureCM(ns, "fixture-later", "now"))
	waitSuite(t, ns, "missing", 30*time.Second, "complete", suiteComplete)
}

// TestSuiteSelectingTooManyRunsIsStalled: the schema counts fixtures chosen
// by a selector as one (it cannot know how many match), so a suite of 16
// agents × 1000 repeats over a selector was admitted, and with 64 matching
// ConfigMaps made 1,024,000 runs a round (mt helper of 7 December). The
// controller holds it to the bound: Stalled, saying so, with no run made.
func TestSuiteSelectingTooManyRunsIsStalled(t *testing.T) {
	ns := newNamespace(t)
	startSuiteController(t, ns)
	for i := range 7 {
		create(t, fixtureCM(ns, fmt.Sprintf("big-%d", i), "p"))
	}
	names := make([]string, 16)
	for i := range names {
		names[i] = fmt.Sprintf("a%d", i)
	}
	create(t, makeSuite(ns, "big", names, 1000, 1)) // 16 × 7 × 1000 = 112,000
	s := waitSuite(t, ns, "big", 30*time.Second, "stalled", func(s *harnessv1.HarnessSuite) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, harnessv1.SuiteConditionStalled)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	if c := meta.FindStatusCondition(s.Status.Conditions, harnessv1.SuiteConditionStalled); !strings.Contains(c.Message, "112000 runs a round, more than the 100000") {
		t.Errorf("Stalled message %q", c.Message)
	}
	runs := &harnessv1.HarnessRunList{}
	if err := k8s.List(context.Background(), runs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(runs.Items) != 0 {
		t.Errorf("%d runs made", len(runs.Items))
	}
}

// TestSuiteDeletionCascades: the runs are owned by the suite with
// blockOwnerDeletion (the garbage collector, which envtest does not run,
// deletes them with it); a suite being deleted creates no more runs.
func TestSuiteDeletionCascades(t *testing.T) {
	ns := newNamespace(t)
	create(t, fixtureCM(ns, "fixture-a", "do a"))
	startNode(t, ns, fakenode.Options{Name: "delete-node-" + ns, Slots: 4, Adapters: codexOnly, RunFor: -1})
	startSuiteController(t, ns)
	create(t, makeSuite(ns, "doomed", []string{"good"}, 3, 2))
	eventually(t, 30*time.Second, func() error {
		if n := len(suiteRuns(t, ns, "doomed")); n != 2 {
			return fmt.Errorf("%d runs, want 2", n)
		}
		return nil
	})
	s := getSuite(t, ns, "doomed")
	for _, r := range suiteRuns(t, ns, "doomed") {
		want := metav1.OwnerReference{APIVersion: harnessv1.GroupVersion.String(), Kind: "HarnessSuite", Name: "doomed", UID: s.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
		if diff := cmp.Diff([]metav1.OwnerReference{want}, r.OwnerReferences); diff != "" {
			t.Errorf("run %s owner references (-want +got):\n%s", r.Name, diff)
		}
	}

	// Foreground deletion: the suite stays, marked deleted, until the
	// garbage collector deleted its runs. Do the collector's work by hand
	// and make sure the controller does not bring the runs back.
	if err := k8s.Delete(context.Background(), s, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	waitSuite(t, ns, "doomed", 10*time.Second, "marked deleted", func(s *harnessv1.HarnessSuite) bool { return s.DeletionTimestamp != nil })
	removeRuns(t, ns)
	// A fixture change makes the controller look at the suite again.
	if err := k8s.Update(context.Background(), fixtureCM(ns, "fixture-a", "changed")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if n := len(suiteRuns(t, ns, "doomed")); n != 0 {
		t.Errorf("the controller created %d runs for a suite being deleted", n)
	}
	s = getSuite(t, ns, "doomed")
	s.Finalizers = nil
	if err := k8s.Update(context.Background(), s); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// A suite copies its agent and prompt into every run, parallelism runs at
// once: the namespace's ResourceQuota on count/harnessruns.harnessfacts.io
// bounds what one suite makes the controller write, as it bounds a Job's
// pods. The quota's refusal stalls the suite, saying so, and no more runs
// are made. (envtest runs no quota controller: the quota's status is set
// here as it would set it; the API server's quota admission then counts.)
func TestSuiteIsBoundedByTheNamespacesQuota(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "runs"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/harnessruns.harnessfacts.io": resource.MustParse("3")}}}
	create(t, quota)
	quota.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard, Used: corev1.ResourceList{"count/harnessruns.harnessfacts.io": resource.MustParse("0")}}
	if err := k8s.Status().Update(ctx, quota); err != nil {
		t.Fatal(err)
	}
	startSuiteController(t, ns)
	create(t, fixtureCM(ns, "fixture-a", "do a"), makeSuite(ns, "wide", []string{"good"}, 20, 10))
	s := waitSuite(t, ns, "wide", time.Minute, "stalled by the quota", func(s *harnessv1.HarnessSuite) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, harnessv1.SuiteConditionStalled)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == harnessv1.SuiteReasonRunsRefused && strings.Contains(c.Message, "exceeded quota")
	})
	if n := len(suiteRuns(t, ns, "wide")); n != 3 {
		t.Errorf("%d runs made under a quota of 3", n)
	}
	t.Logf("stalled: %s", meta.FindStatusCondition(s.Status.Conditions, harnessv1.SuiteConditionStalled).Message)
}

// A restarted controller knows the suite's runs for its own: the cache's
// first list transforms each run twice (client-go v0.37), and the second
// pass took the digest of the spec the first had stripped, so runs whose
// agent has arguments (or a command, or a prompt) that had finished before
// the restart were judged foreign, and the suite could not complete.
func TestSuiteKnowsItsRunsAfterARestart(t *testing.T) {
	ns := newNamespace(t)
	create(t, fixtureCM(ns, "fixture-a", "do a"))
	node := startNode(t, ns, fakenode.Options{Name: "restart-node-" + ns, Slots: 4, Adapters: codexOnly, RunFor: -1})
	first := startSuiteController(t, ns)

	suite := makeSuite(ns, "restart", []string{"good"}, 4, 2)
	suite.Spec.Agents[0].Agent.ExtraArgs = []string{"--search"}
	create(t, suite)
	finishRunning := func(n int) {
		t.Helper()
		var running []harnessv1.HarnessRun
		eventually(t, 30*time.Second, func() error {
			running = running[:0]
			for _, r := range suiteRuns(t, ns, "restart") {
				if r.Status.Phase == harnessv1.RunRunning {
					running = append(running, r)
				}
			}
			if len(running) != n {
				return fmt.Errorf("%d runs Running, want %d", len(running), n)
			}
			return nil
		})
		for _, r := range running {
			if err := node.Finish(context.Background(), client.ObjectKeyFromObject(&r), fakenode.Pass); err != nil {
				t.Fatal(err)
			}
		}
	}
	finishRunning(2)
	waitSuite(t, ns, "restart", 30*time.Second, "two finished", func(s *harnessv1.HarnessSuite) bool { return s.Status.Counts.Finished == 2 })
	first.stop(t)

	startSuiteController(t, ns)
	finishRunning(2)
	s := waitSuite(t, ns, "restart", 30*time.Second, "complete", suiteComplete)
	if s.Status.Counts.Finished != 4 || len(suiteRuns(t, ns, "restart")) != 4 {
		t.Errorf("after the restart: counts %+v, %d runs", s.Status.Counts, len(suiteRuns(t, ns, "restart")))
	}
}
