package kube_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func newClient(t *testing.T) *kube.Client {
	t.Helper()
	c, err := kube.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var made atomic.Int32

// namespace makes a namespace of a name no run of the test used before
// (-count shares one API server) and returns it.
func namespace(t *testing.T, c *kube.Client, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", prefix, made.Add(1))
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// The client reads and writes the kinds the node-agent uses, namespaced
// and not, with the API server's own answers: a Conflict for a write from
// a stale version, NotFound for what is not there.
func TestClientReadsAndWrites(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	ns := namespace(t, c, "kube-rw")

	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "n1"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: new("n1")}}
	if err := c.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if lease.UID == "" || lease.ResourceVersion == "" {
		t.Fatalf("Create did not read back the object: %+v", lease.ObjectMeta)
	}
	stale := lease.DeepCopy()
	lease.Spec.HolderIdentity = new("n2")
	if err := c.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	stale.Spec.HolderIdentity = new("n3")
	if err := c.Update(ctx, stale); !apierrors.IsConflict(err) {
		t.Errorf("an Update from a stale version: %v, want a Conflict", err)
	}
	got := &coordinationv1.Lease{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "n1"}, got); err != nil || *got.Spec.HolderIdentity != "n2" {
		t.Fatalf("Get: %v %+v", err, got.Spec)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "none"}, got); !apierrors.IsNotFound(err) {
		t.Errorf("Get of nothing: %v", err)
	}

	// A cluster-scoped kind with a status subresource.
	node := &harnessv1.HarnessNode{ObjectMeta: metav1.ObjectMeta{Name: ns + "-node"}, Spec: harnessv1.HarnessNodeSpec{Slots: 2}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	base := node.DeepCopy()
	node.Status.SlotsInUse = 1
	node.Spec.Slots = 5 // not written: a status patch writes only status
	if err := c.Status().Patch(ctx, node, kube.MergeFromWithLock(base)); err != nil {
		t.Fatal(err)
	}
	if node.Status.SlotsInUse != 1 || node.Spec.Slots != 2 {
		t.Errorf("after the status patch: spec %+v status %+v", node.Spec, node.Status)
	}
	// The lock: a patch from the version before is refused.
	base.Status.SlotsInUse = 2
	if err := c.Status().Patch(ctx, base.DeepCopy(), kube.MergeFromWithLock(base)); !apierrors.IsConflict(err) {
		t.Errorf("a locked patch from a stale version: %v, want a Conflict", err)
	}
	// Without the lock it applies over whatever is there.
	cur := node.DeepCopy()
	node.Status.SlotsInUse = 2
	if err := c.Status().Patch(ctx, node, kube.MergeFrom(cur)); err != nil || node.Status.SlotsInUse != 2 {
		t.Errorf("an unlocked patch: %v, %+v", err, node.Status)
	}
	node.Status.SlotsInUse = 0
	if err := c.Status().Update(ctx, node); err != nil || node.Status.SlotsInUse != 0 {
		t.Errorf("a status update: %v, %+v", err, node.Status)
	}
	node.Spec.Slots = 4
	if err := c.Patch(ctx, node, kube.MergeFrom(base)); err != nil || node.Spec.Slots != 4 {
		t.Errorf("a patch: %v, %+v", err, node.Spec)
	}

	list := &coordinationv1.LeaseList{}
	if err := c.List(ctx, ns, list, metav1.ListOptions{}); err != nil || len(list.Items) != 1 {
		t.Errorf("List: %v, %d items", err, len(list.Items))
	}
}

// The cache keeps what its field selector selects, as its transform makes
// it, and hands out copies.
func TestCacheKeepsTheSelectedObjects(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newClient(t)
	ns := namespace(t, c, "kube-cache")
	for _, name := range []string{"a", "b"} {
		if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Data: map[string]string{"k": name}}); err != nil {
			t.Fatal(err)
		}
	}
	k, err := kube.NewCache(c, kube.Watched{Object: &corev1.ConfigMap{}, List: &corev1.ConfigMapList{},
		Field: fields.AndSelectors(fields.OneTermEqualSelector("metadata.namespace", ns), fields.OneTermEqualSelector("metadata.name", "a")),
		Transform: func(obj any) (any, error) {
			cm := obj.(*corev1.ConfigMap)
			cm.Labels = map[string]string{"transformed": "yes"}
			return cm, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	k.Start(ctx)
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if err := k.WaitForSync(sctx); err != nil {
		t.Fatal(err)
	}
	got := &corev1.ConfigMap{}
	if err := k.Get(ctx, types.NamespacedName{Namespace: ns, Name: "a"}, got); err != nil {
		t.Fatal(err)
	}
	if got.Data["k"] != "a" || got.Labels["transformed"] != "yes" {
		t.Errorf("cached: %+v", got)
	}
	got.Data["k"] = "changed by a reader"
	again := &corev1.ConfigMap{}
	if err := k.Get(ctx, types.NamespacedName{Namespace: ns, Name: "a"}, again); err != nil || again.Data["k"] != "a" {
		t.Errorf("a reader's change reached the cache: %v %+v", err, again.Data)
	}
	if err := k.Get(ctx, types.NamespacedName{Namespace: ns, Name: "b"}, got); !apierrors.IsNotFound(err) {
		t.Errorf("an object the selector leaves out: %v", err)
	}
	list := &corev1.ConfigMapList{}
	if err := k.List(ctx, list); err != nil || len(list.Items) != 1 || list.Items[0].Name != "a" {
		t.Errorf("List: %v %+v", err, list.Items)
	}
	if err := k.List(ctx, &corev1.SecretList{}); err == nil {
		t.Error("a List of a kind the cache does not keep succeeded")
	}
}

// Events are written in the background, reported by the recorder's
// controller and instance, about the object they name.
func TestRecorderWritesEvents(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := newClient(t)
	ns := namespace(t, c, "kube-events")
	run := &harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r1"},
		Spec: harnessv1.HarnessRunSpec{Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: x\n"}}}}}
	if err := c.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	r := kube.NewRecorder(c, "harnessfacts-test", logr.Discard())
	done := make(chan struct{})
	go func() { r.Run(ctx, 5*time.Second); close(done) }()
	r.Eventf(run, nil, corev1.EventTypeWarning, "Tested", "Test", "note %d", 7)
	// Queued after the end: Run writes what is queued before it returns.
	cancel()
	r.Eventf(run, nil, corev1.EventTypeNormal, "Flushed", "Test", "at the end")
	<-done
	list := &eventsv1.EventList{}
	if err := c.List(context.Background(), ns, list, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range list.Items {
		reasons = append(reasons, e.Reason)
		if e.Regarding.Kind != "HarnessRun" || e.Regarding.APIVersion != "harnessfacts.io/v1alpha1" || e.Regarding.UID != run.UID ||
			e.ReportingController != "harnessfacts-test" || !strings.HasPrefix(e.ReportingInstance, "harnessfacts-test-") {
			t.Errorf("event %+v", e)
		}
		if e.Reason == "Tested" && (e.Note != "note 7" || e.Type != corev1.EventTypeWarning || e.Action != "Test") {
			t.Errorf("event %+v", e)
		}
	}
	if len(reasons) != 2 {
		t.Errorf("events written: %v", reasons)
	}
}
