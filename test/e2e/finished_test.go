//go:build linux

package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// TestNodeAgentEndsTheRunFinished: the node-agent's write that ends an
// attempt carries Finished=True already (and Stalled for a run that did not
// pass): the first version of the run a watcher sees in a terminal phase is
// Finished, with no wait for a pass of the controller.
func TestNodeAgentEndsTheRunFinished(t *testing.T) {
	ns := newNamespace(t, "e2e-finished")
	fixtureConfigMap(t, ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &harnessv1.HarnessRunList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, r := range []*harnessv1.HarnessRun{execRun(ns, "passes", "sh", "../fixture/agent.sh"), execRun(ns, "fails", "sh", "-c", "echo not doing it")} {
		if err := k8s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"passes": "Pass", "fails": "Fail"}
	for len(want) > 0 {
		var ev watch.Event
		select {
		case ev = <-w.ResultChan():
		case <-ctx.Done():
			t.Fatalf("runs %v did not end", want)
		}
		run, ok := ev.Object.(*harnessv1.HarnessRun)
		if !ok || !run.Status.Phase.Terminal() || want[run.Name] == "" {
			continue
		}
		verdict := want[run.Name]
		delete(want, run.Name)
		f := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionFinished)
		if f == nil || f.Status != "True" || f.Reason != verdict || f.ObservedGeneration != run.Generation {
			t.Errorf("run %s: the first terminal version (phase %s, written by %s) has Finished %+v, want True, reason %s", run.Name, run.Status.Phase, lastStatusManager(run), f, verdict)
		}
		stalled := meta.IsStatusConditionTrue(run.Status.Conditions, harnessv1.ConditionStalled)
		if stalled != (verdict != "Pass") {
			t.Errorf("run %s: Stalled=%t in the first terminal version, want %t", run.Name, stalled, verdict != "Pass")
		}
	}
}

// lastStatusManager names who last wrote the run's status.
func lastStatusManager(run *harnessv1.HarnessRun) string {
	var name string
	var at time.Time
	for _, m := range run.ManagedFields {
		if m.Subresource == "status" && m.Time != nil && !m.Time.Time.Before(at) {
			name, at = m.Manager, m.Time.Time
		}
	}
	return name
}
