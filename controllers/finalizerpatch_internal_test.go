//go:build linux

package controllers

import (
	"context"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// The JSON patch of a run's finalizer (used when the cache holds only part
// of a long list) is as optimistic as the merge patch it stands in for: on
// a run changed since it was read it is a Conflict, and what it removes
// must be RunFinalizer where the cache said.
func TestFinalizerJSONPatchIsOptimistic(t *testing.T) {
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "config", "crd", "bases")}}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	sc := runtime.NewScheme()
	if err := harnessv1.AddToScheme(sc); err != nil {
		t.Fatal(err)
	}
	k, err := client.New(cfg, client.Options{Scheme: sc})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := &harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "default", Finalizers: []string{"a.example.com/x"}},
		Spec: harnessv1.HarnessRunSpec{Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex},
			Fixture: harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "f"}}}}
	if err := k.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	stale := run.ResourceVersion
	add, _ := finalizerJSONPatch(stale, "-1", true)
	if err := k.Patch(ctx, run.DeepCopy(), add); err != nil {
		t.Fatalf("adding on the version read: %v", err)
	}
	if err := k.Patch(ctx, run.DeepCopy(), add); !apierrors.IsConflict(err) {
		t.Errorf("adding on a stale version: %v, want a Conflict", err)
	}
	cur := &harnessv1.HarnessRun{}
	if err := k.Get(ctx, client.ObjectKeyFromObject(run), cur); err != nil {
		t.Fatal(err)
	}
	wrong, _ := finalizerJSONPatch(cur.ResourceVersion, "0", false) // index 0 is not RunFinalizer
	if err := k.Patch(ctx, cur.DeepCopy(), wrong); err == nil {
		t.Error("a removal at a place that is not RunFinalizer was applied")
	}
	remove, _ := finalizerJSONPatch(cur.ResourceVersion, "1", false)
	if err := k.Patch(ctx, cur, remove); err != nil {
		t.Fatalf("removing: %v", err)
	}
	if len(cur.Finalizers) != 1 || cur.Finalizers[0] != "a.example.com/x" {
		t.Errorf("finalizers after the removal: %v", cur.Finalizers)
	}
	cur.Finalizers = nil
	_ = k.Update(ctx, cur)
}
