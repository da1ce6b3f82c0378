package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
)

// TestCacheKeepsNoTenantContent: a user who may edit one namespace makes
// fixture ConfigMaps and HarnessRuns as large as the API server takes; the
// controller every namespace depends on caches them all, so kept whole a
// few hundred would fill its memory (256Mi in the chart) and stop every
// tenant's runs. The cache the controller's manager is made with keeps a
// fixture ConfigMap's hash, not its data, and a run without its inline
// files, prompt and command line (which only node-agents read).
func TestCacheKeepsNoTenantContent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := newNamespace(t)
	big := strings.Repeat("x", 400<<10)

	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: ns, Labels: map[string]string{harnessv1.LabelFixture: "true"},
			Annotations: map[string]string{controllers.CachedFixtureHashAnnotation: "sha256:made-up"}},
		Data:       map[string]string{"fixture.yaml": "prompt: hi\n", "workspace__big": big},
		BinaryData: map[string][]byte{"workspace__bin": []byte(big)},
	}
	want := controllers.FixtureHash(cm)
	run := hftesting.MakeHarnessRun("big", ns).Adapter(harnessv1.AdapterExec).Obj()
	run.Spec.Agent.Command = []string{"sh", "-c", strings.Repeat("y", 4000)}
	run.Spec.Agent.ExtraArgs = []string{strings.Repeat("z", 4000)}
	run.Spec.Fixture = harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: hi\n", "workspace/big": big}},
		Prompt: strings.Repeat("p", 60000)}
	create(t, cm, run)

	opts := controllers.ManagerOptions(controllers.ManagerConfig{Scheme: env.Scheme, Namespaces: []string{ns}}).Cache
	opts.Scheme = env.Scheme
	c, err := cache.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	cached := &corev1.ConfigMap{}
	eventually(t, wait, func() error { return c.Get(sctx, client.ObjectKeyFromObject(cm), cached) })
	if len(cached.Data) != 0 || len(cached.BinaryData) != 0 {
		t.Errorf("the cache holds the fixture ConfigMap's data (%d and %d keys)", len(cached.Data), len(cached.BinaryData))
	}
	if got := cached.Annotations[controllers.CachedFixtureHashAnnotation]; got != want {
		t.Errorf("the cached fixture's hash is %q, want %q (its content's, not the annotation it was made with)", got, want)
	}
	cachedRun := &harnessv1.HarnessRun{}
	eventually(t, wait, func() error { return c.Get(sctx, client.ObjectKeyFromObject(run), cachedRun) })
	s := cachedRun.Spec
	if s.Fixture.Inline == nil || len(s.Fixture.Inline.Files) != 0 || s.Fixture.Prompt != "" || len(s.Agent.Command) != 0 || len(s.Agent.ExtraArgs) != 0 {
		t.Errorf("the cache holds the run's content: %d inline files, a prompt of %d bytes, command %d and extra args %d",
			len(s.Fixture.Inline.Files), len(s.Fixture.Prompt), len(s.Agent.Command), len(s.Agent.ExtraArgs))
	}
	if s.Agent.Adapter != harnessv1.AdapterExec || len(cachedRun.ManagedFields) != 0 {
		t.Errorf("the cached run: adapter %q, %d managed fields; want exec and none", s.Agent.Adapter, len(cachedRun.ManagedFields))
	}
}

// TestCacheKeepsNoTenantMetadata: labels are bounded by the API server only
// one by one (a ConfigMap or a run may carry a mebibyte of them),
// annotations by 256 KiB, owner references not at all; all are the run
// author's to write. Kept whole in the controller's cache, a few hundred
// such fixture ConfigMaps or runs fill its memory as their data would. The
// cache keeps only what the controller reads of them; a fixture whose
// labels it does not keep is never selected by a suite's selector (its
// name still finds it).
func TestCacheKeepsNoTenantMetadata(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := newNamespace(t)
	manyLabels := func(n int) map[string]string {
		l := map[string]string{}
		for i := range n {
			l[fmt.Sprintf("k%04d.example.com/%s", i, strings.Repeat("k", 60))] = strings.Repeat("v", 63)
		}
		return l
	}
	bigAnnotation := map[string]string{"tenant.example.com/big": strings.Repeat("a", 200<<10)}
	owners := func(n int) []metav1.OwnerReference {
		var out []metav1.OwnerReference
		for i := range n {
			out = append(out, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: fmt.Sprintf("o%d-%s", i, strings.Repeat("o", 200)), UID: "1"})
		}
		return out
	}

	big := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "big-labels", Namespace: ns, Labels: manyLabels(2000),
		Annotations: bigAnnotation, OwnerReferences: owners(500)}, Data: map[string]string{"fixture.yaml": "prompt: hi\n"}}
	big.Labels[harnessv1.LabelFixture] = "true"
	big.Labels["team"] = "a"
	small := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "small", Namespace: ns,
		Labels: map[string]string{harnessv1.LabelFixture: "true", "team": "a"}, Annotations: bigAnnotation},
		Data: map[string]string{"fixture.yaml": "prompt: hi\n"}}
	run := hftesting.MakeHarnessRun("big-meta", ns).Adapter(harnessv1.AdapterExec).Obj()
	run.Labels = manyLabels(2000)
	run.Labels[harnessv1.LabelSuiteRound] = "3"
	run.Annotations = map[string]string{"tenant.example.com/big": bigAnnotation["tenant.example.com/big"], harnessv1.AnnotationFixtureHash: "sha256:f"}
	run.OwnerReferences = append(owners(500), metav1.OwnerReference{APIVersion: harnessv1.GroupVersion.String(), Kind: "HarnessSuite",
		Name: "s", UID: "suite-uid", Controller: ptr.To(true)})
	suite := &harnessv1.HarnessSuite{ObjectMeta: metav1.ObjectMeta{Name: "big-meta", Namespace: ns, Labels: manyLabels(2000),
		Annotations: bigAnnotation, OwnerReferences: owners(500)},
		Spec: harnessv1.HarnessSuiteSpec{Agents: []harnessv1.SuiteAgent{{Name: "a", Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}}}},
			Fixtures: harnessv1.SuiteFixtures{Names: []string{"small"}}, Suspend: true}}
	create(t, big, small, run, suite)

	opts := controllers.ManagerOptions(controllers.ManagerConfig{Scheme: env.Scheme, Namespaces: []string{ns}}).Cache
	opts.Scheme = env.Scheme
	c, err := cache.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()

	metaBytes := func(o metav1.Object) int {
		b, _ := json.Marshal(struct {
			L, A map[string]string
			O    []metav1.OwnerReference
		}{o.GetLabels(), o.GetAnnotations(), o.GetOwnerReferences()})
		return len(b)
	}
	for _, cm := range []*corev1.ConfigMap{big, small} {
		got := &corev1.ConfigMap{}
		eventually(t, wait, func() error { return c.Get(sctx, client.ObjectKeyFromObject(cm), got) })
		if n := metaBytes(got); n > 2*controllers.MaxCachedLabelBytes {
			t.Errorf("the cache keeps %d bytes of fixture ConfigMap %s's labels, annotations and owners", n, cm.Name)
		}
		if got.Labels[harnessv1.LabelFixture] != "true" || got.Annotations[controllers.CachedFixtureHashAnnotation] != controllers.FixtureHash(cm) {
			t.Errorf("cached fixture %s: labels %v, hash %q: want its fixture label and its hash", cm.Name, got.Labels, got.Annotations[controllers.CachedFixtureHashAnnotation])
		}
	}
	list := &corev1.ConfigMapList{}
	if err := c.List(sctx, list, client.InNamespace(ns), client.MatchingLabels{"team": "a"}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "small" {
		t.Errorf("a selector on a label kept matches %d fixtures, want the one with small labels", len(list.Items))
	}

	got := &harnessv1.HarnessRun{}
	eventually(t, wait, func() error { return c.Get(sctx, client.ObjectKeyFromObject(run), got) })
	if n := metaBytes(got); n > 4<<10 {
		t.Errorf("the cache keeps %d bytes of the run's labels, annotations and owners", n)
	}
	if got.Labels[harnessv1.LabelSuiteRound] != "3" || got.Annotations[harnessv1.AnnotationFixtureHash] != "sha256:f" {
		t.Errorf("the cached run lost what the controller reads: labels %v, annotations %v", got.Labels, got.Annotations)
	}
	if ref := metav1.GetControllerOf(got); ref == nil || ref.UID != "suite-uid" {
		t.Errorf("the cached run's controller is %v, want its suite", ref)
	}

	gotSuite := &harnessv1.HarnessSuite{}
	eventually(t, wait, func() error { return c.Get(sctx, client.ObjectKeyFromObject(suite), gotSuite) })
	if n := metaBytes(gotSuite); n > 4<<10 {
		t.Errorf("the cache keeps %d bytes of the suite's labels, annotations and owners", n)
	}
	if len(gotSuite.Spec.Agents) != 1 || len(gotSuite.Spec.Agents[0].Agent.Command) != 1 {
		t.Errorf("the cached suite lost its spec: %+v", gotSuite.Spec.Agents)
	}
}

// A run author may put any number of finalizers on a run (a mebibyte of
// them passes the API server). The cache keeps of a long list only the
// controller's own, and the controller still adds it at the binding and
// removes it at the end, by a JSON patch that leaves every other
// finalizer where it was.
func TestManyFinalizersStayOutOfTheCacheAndInTheRun(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	var theirs []string
	for i := range 500 {
		theirs = append(theirs, fmt.Sprintf("tenant.example.com/f-%04d-%s", i, strings.Repeat("f", 40)))
	}
	run := hftesting.MakeHarnessRun("many-finalizers", ns).Adapter(harnessv1.AdapterCodex).Obj()
	run.Finalizers = theirs
	create(t, run)
	t.Cleanup(func() {
		// Theirs would hold the namespace's deletion for ever.
		_ = k8s.Patch(ctx, run, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`)))
	})

	opts := controllers.ManagerOptions(controllers.ManagerConfig{Scheme: env.Scheme, Namespaces: []string{ns}}).Cache
	opts.Scheme = env.Scheme
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := cache.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(cctx) }()
	cached := &harnessv1.HarnessRun{}
	eventually(t, wait, func() error { return c.Get(cctx, client.ObjectKeyFromObject(run), cached) })
	if len(cached.Finalizers) > controllers.MaxCachedFinalizers {
		t.Errorf("the cache keeps %d of the run's finalizers", len(cached.Finalizers))
	}

	startController(t, ns, controllers.Options{}, nil)
	startNode(t, ns, fakenode.Options{Name: "finalizers", Slots: 1, Adapters: codexOnly, RunFor: time.Second})
	bound := waitRun(t, ns, run.Name, wait, "bound", func(r *harnessv1.HarnessRun) bool { return r.Status.NodeName != "" })
	want := append(slices.Clone(theirs), harnessv1.RunFinalizer)
	if bound.Status.Phase != harnessv1.RunSucceeded && !slices.Equal(bound.Finalizers, want) {
		t.Errorf("a bound run has %d finalizers, the last %q: want theirs and then %s", len(bound.Finalizers), bound.Finalizers[len(bound.Finalizers)-1], harnessv1.RunFinalizer)
	}
	done := waitRun(t, ns, run.Name, wait, "Succeeded without the controller's finalizer", func(r *harnessv1.HarnessRun) bool {
		return r.Status.Phase == harnessv1.RunSucceeded && !slices.Contains(r.Finalizers, harnessv1.RunFinalizer)
	})
	if !slices.Equal(done.Finalizers, theirs) {
		t.Errorf("after the run the finalizers are %d, want the run author's %d as they were", len(done.Finalizers), len(theirs))
	}
}
