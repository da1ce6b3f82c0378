package controllers_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
)

// writeCount counts a controller's writes of HarnessRuns by kind, and the
// ones the API server refused with a Conflict.
type writeCount struct {
	mu                       sync.Mutex
	status, patch, conflicts int
}

func (w *writeCount) client(c client.Client) client.Client {
	count := func(status bool, err error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if status {
			w.status++
		} else {
			w.patch++
		}
		if apierrors.IsConflict(err) {
			w.conflicts++
		}
	}
	return interceptor.NewClient(withWatch{c}, interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			err := cl.Patch(ctx, obj, patch, opts...)
			if _, ok := obj.(*harnessv1.HarnessRun); ok {
				count(false, err)
			}
			return err
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			err := cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
			if _, ok := obj.(*harnessv1.HarnessRun); ok && sub == "status" {
				count(true, err)
			}
			return err
		},
	})
}

// Binding a run is two writes, its finalizer and its status, and nothing
// else: the watch events of those writes (and of the create) must not start
// passes on versions the controller already replaced, whose writes would
// fail with a Conflict. Runs arrive while earlier ones are being bound.
func TestBindingWritesEachRunOnce(t *testing.T) {
	const runs = 120
	ns := newNamespace(t)
	for i := range 3 {
		startNode(t, ns, fakenode.Options{Name: fmt.Sprintf("w-%d", i), Slots: runs, NoClaim: true, Adapters: codexOnly})
	}
	w := &writeCount{}
	startController(t, ns, controllers.Options{}, w.client)
	createRuns(t, ns, "w", runs, nil)
	eventually(t, 2*time.Minute, func() error {
		list := &harnessv1.HarnessRunList{}
		if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		n := 0
		for _, r := range list.Items {
			if r.Status.Phase == harnessv1.RunScheduled {
				n++
			}
		}
		if n != runs {
			return fmt.Errorf("%d of %d runs Scheduled", n, runs)
		}
		return nil
	})
	// The echoes of the last writes come back after the runs show
	// Scheduled; give them a moment to start any pass they would.
	time.Sleep(2 * time.Second)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status != runs || w.patch != runs || w.conflicts != 0 {
		t.Errorf("binding %d runs took %d status writes and %d finalizer writes, %d of them refused with a Conflict; want %d, %d and 0",
			runs, w.status, w.patch, w.conflicts, runs, runs)
	}
}
