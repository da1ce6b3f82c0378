package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
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
