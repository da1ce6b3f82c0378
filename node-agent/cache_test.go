package nodeagent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	nodeagent "github.com/harnessfacts/harnessfacts/node-agent"
)

// A run stays bound to the node it ended on until it is deleted (without
// ttlSecondsAfterFinished, never): kept whole, every run a node ever ran
// would stay in its node-agent's memory, each up to the API server's
// object size (inline files, a prompt, checks, the metadata its author
// gave it). The node-agent's cache keeps of an ended run only what it
// reads, and of a run still to run all of it.
func TestCacheKeepsLittleOfEndedRuns(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const node = "cache-node"
	big := strings.Repeat("x", 200<<10)
	ended := boundRun(t, "ended-big", node, harnessv1.RunScheduled)
	ended.Labels = map[string]string{"team": strings.Repeat("l", 63)}
	ended.Annotations = map[string]string{"tenant.example.com/big": big}
	if err := k8s.Update(ctx, ended); err != nil {
		t.Fatal(err)
	}
	ended.Status.Phase, ended.Status.Verdict, ended.Status.Message = harnessv1.RunSucceeded, harnessv1.VerdictPass, "done"
	if err := k8s.Status().Update(ctx, ended); err != nil {
		t.Fatal(err)
	}
	waiting := boundRun(t, "waiting", node, harnessv1.RunScheduled)

	api, err := nodeagent.NewAPI(env.Config, node)
	if err != nil {
		t.Fatal(err)
	}
	c := api.Cache
	c.Start(ctx)
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if err := c.WaitForSync(sctx); err != nil {
		t.Fatal(err)
	}
	got := &harnessv1.HarnessRun{}
	for {
		if err := c.Get(sctx, client.ObjectKeyFromObject(ended), got); err == nil && got.Status.Phase.Terminal() {
			break
		} else if sctx.Err() != nil {
			t.Fatalf("the ended run never reached the cache: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, _ := json.Marshal(got)
	// What the node's metrics count at a run's end stays (nodemetrics).
	if len(b) > 1<<10 || got.UID != ended.UID || got.Status.NodeName != node || got.Status.Attempt != 1 ||
		got.Status.Verdict != harnessv1.VerdictPass {
		t.Errorf("the cache keeps %d bytes of an ended run: %s", len(b), b)
	}
	w := &harnessv1.HarnessRun{}
	if err := c.Get(sctx, client.ObjectKeyFromObject(waiting), w); err != nil {
		t.Fatal(err)
	}
	if len(w.Spec.Agent.Command) != 1 || w.Spec.Fixture.Inline == nil {
		t.Errorf("the cache lost the spec of a run still to run: %+v", w.Spec)
	}
}

// Policies select namespaces by their labels, so the node-agent watches
// every Namespace; of each it keeps only the name and labels, not what
// tenants put in annotations.
func TestCacheKeepsOnlyNamespacesLabels(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cache-labels", Labels: map[string]string{"team": "evals"},
		Annotations: map[string]string{"tenant.example.com/big": strings.Repeat("x", 100<<10)}}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	api, err := nodeagent.NewAPI(env.Config, "cache-labels-node")
	if err != nil {
		t.Fatal(err)
	}
	api.Cache.Start(ctx)
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if err := api.Cache.WaitForSync(sctx); err != nil {
		t.Fatal(err)
	}
	got := &corev1.Namespace{}
	if err := api.Cache.Get(sctx, types.NamespacedName{Name: ns.Name}, got); err != nil {
		t.Fatal(err)
	}
	if got.Labels["team"] != "evals" || len(got.Annotations) != 0 || got.Name != ns.Name {
		t.Errorf("the cache keeps of a Namespace: %+v", got.ObjectMeta)
	}
}
