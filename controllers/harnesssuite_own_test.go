package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
)

// TestSuiteCountsOnlyRunsItMade: a suite's run names are known to whoever
// can read the suite, so a run author creates runs under the names of its
// next runs, owned by the suite and labelled as its agent's, running
// `true` (once by the fixture ConfigMap, once inline). The suite's own
// agent fails every run. Those runs are not counted as the suite's: it says
// so (Stalled, naming them) and reports no pass; once they are deleted it
// creates its own under those names and completes with none. A run of
// its own relabelled into another agent's cell is counted in its own.
func TestSuiteCountsOnlyRunsItMade(t *testing.T) {
	ns := newNamespace(t)
	create(t, fixtureCM(ns, "fixture-a", "do a"))
	startSuiteController(t, ns)

	// One at a time, so the later repeats are created only later.
	suite := makeSuite(ns, "impostor", []string{"victim", "other"}, 3, 1)
	create(t, suite)
	s := waitSuite(t, ns, "impostor", 30*time.Second, "in round 1", func(s *harnessv1.HarnessSuite) bool { return s.Status.Round == 1 })

	impostor := func(repeat int32, fixture harnessv1.FixtureSource) string {
		name := controllers.SuiteRunName(s, 1, "victim", "fixture-a", repeat)
		create(t, &harnessv1.HarnessRun{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
				Labels: map[string]string{harnessv1.LabelSuite: "impostor", harnessv1.LabelSuiteRound: "1",
					harnessv1.LabelSuiteAgent: "victim", harnessv1.LabelSuiteFixture: "fixture-a"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: harnessv1.GroupVersion.String(), Kind: "HarnessSuite",
					Name: s.Name, UID: s.UID, Controller: new(true)}},
			},
			Spec: harnessv1.HarnessRunSpec{
				Agent:   harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}},
				Fixture: fixture,
			},
		})
		return name
	}
	byRef := impostor(1, harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "fixture-a"}})
	inline := impostor(2, harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: p\n"}}})

	// The run author's runs would pass; the suite's agent "victim" never
	// does, its agent "other" always does.
	startNode(t, ns, fakenode.Options{Name: "impostor-node-" + ns, Slots: 2, RunFor: 50 * time.Millisecond,
		Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterCodex: "1.0", harnessv1.AdapterExec: "builtin"},
		Outcome: func(run *harnessv1.HarnessRun) fakenode.Outcome {
			if run.Spec.Agent.Adapter == harnessv1.AdapterExec || run.Spec.Agent.Model == "other" {
				return fakenode.Pass
			}
			return fakenode.AgentFailed
		}})

	s = waitSuite(t, ns, "impostor", time.Minute, "stalled on the runs it did not make", func(s *harnessv1.HarnessSuite) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, harnessv1.SuiteConditionStalled)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, byRef) && strings.Contains(c.Message, inline) &&
			s.Status.Counts.Finished == 4
	})
	if suiteComplete(s) {
		t.Error("the suite completed with runs it did not make in its plan's place")
	}
	for _, c := range s.Status.Cells {
		if c.Agent == "victim" && c.Passed != 0 {
			t.Errorf("cell victim×%s reports %d passes: the suite's agent never passed", c.Fixture, c.Passed)
		}
	}

	// A run of "other"'s relabelled as "victim"'s stays in its own cell.
	for _, run := range suiteRuns(t, ns, "impostor") {
		if run.Spec.Agent.Model == "other" {
			patch := client.MergeFrom(run.DeepCopy())
			run.Labels[harnessv1.LabelSuiteAgent] = "victim"
			if err := k8s.Patch(context.Background(), &run, patch); err != nil {
				t.Fatal(err)
			}
			break
		}
	}

	for _, name := range []string{byRef, inline} {
		if err := k8s.Delete(context.Background(), &harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	s = waitSuite(t, ns, "impostor", time.Minute, "complete", suiteComplete)
	if s.Status.Counts.Total != 6 || s.Status.Counts.Passed != 3 || s.Status.Counts.Failed != 3 {
		t.Errorf("counts %+v, want 6 runs: 3 of other's passed, 3 of victim's failed", s.Status.Counts)
	}
	for _, c := range s.Status.Cells {
		if c.Agent == "victim" && (c.Passed != 0 || c.N != 3) || c.Agent == "other" && (c.Passed != 3 || c.N != 3) {
			t.Errorf("cell %s×%s: n=%d passed=%d", c.Agent, c.Fixture, c.N, c.Passed)
		}
	}
	for _, run := range suiteRuns(t, ns, "impostor") {
		if run.Spec.Agent.Adapter == harnessv1.AdapterExec {
			t.Errorf("run %s of the completed suite is the run author's", run.Name)
		}
	}
}
