package agents

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// TestSuiteOfRealCLIs: a HarnessSuite of two real CLIs × two fixtures, the
// batch a team keeps in git, runs through the controller and the
// node-agent against one fake provider URL (its root: the provider knows
// each request's fixture by its prompt), and every cell passes.
func TestSuiteOfRealCLIs(t *testing.T) {
	ctx := context.Background()
	ns := "agents-suite"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"hello", "edit"} {
		cm, err := hftesting.FixtureConfigMap(ns, "fixture-"+f, filepath.Join(testenv.RepoRoot(), "fixtures", f))
		if err != nil {
			t.Fatal(err)
		}
		cm.Labels = map[string]string{harnessv1.LabelFixture: "true"}
		if err := k8s.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	before := len(provider.Requests())
	suite := &harnessv1.HarnessSuite{
		ObjectMeta: metav1.ObjectMeta{Name: "clis", Namespace: ns},
		Spec: harnessv1.HarnessSuiteSpec{
			Revision: intstr.FromString("1"),
			Agents: []harnessv1.SuiteAgent{
				{Name: "claude", Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterClaudeCode, ProviderURL: providerURL}},
				{Name: "gemini", Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterGemini, ProviderURL: providerURL}},
			},
			Fixtures:    harnessv1.SuiteFixtures{Names: []string{"fixture-hello", "fixture-edit"}},
			Repeats:     1,
			Parallelism: 2,
		},
	}
	if err := k8s.Create(ctx, suite); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(8 * time.Minute)
	for {
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "clis"}, suite); err != nil {
			t.Fatal(err)
		}
		if meta.IsStatusConditionTrue(suite.Status.Conditions, harnessv1.SuiteConditionComplete) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the suite did not complete: %+v", suite.Status)
		}
		time.Sleep(time.Second)
	}
	st := suite.Status
	if st.Counts.Total != 4 || st.Counts.Passed != 4 || len(st.Cells) != 4 {
		var runs harnessv1.HarnessRunList
		_ = k8s.List(ctx, &runs)
		for _, r := range runs.Items {
			if r.Namespace == ns {
				t.Logf("run %s (%s): %s %s %s\n%s", r.Name, r.Spec.Agent.Adapter, r.Status.Verdict, r.Status.Reason, r.Status.Message, tailOf(r.Status))
			}
		}
		t.Fatalf("counts %+v, %d cells: want 4 runs, all passed", st.Counts, len(st.Cells))
	}
	// Every request reached the provider's root and was answered from the
	// fixture its prompt names.
	seen := map[string]bool{}
	for _, r := range provider.Requests()[before:] {
		if r.Status != 200 || (r.Script != "hello" && r.Script != "edit") {
			t.Errorf("request %s %s answered %d from script %q (%s)", r.Method, r.Path, r.Status, r.Script, r.Error)
		}
		seen[r.Script] = true
	}
	if !seen["hello"] || !seen["edit"] {
		t.Errorf("scripts used: %v, want hello and edit", seen)
	}
}
