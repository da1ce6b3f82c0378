package install

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestSuiteSampleAppliesToAPIServer renders fixtures/suite as Flux or Argo
// CD would (kustomize) and applies it to the real API server as a dry run:
// a ConfigMap per fixture folder, labelled for suites, and a HarnessSuite
// whose selector picks exactly them.
func TestSuiteSampleAppliesToAPIServer(t *testing.T) {
	m := kustomize(t, "fixtures/suite")
	suites := m.only("HarnessSuite")
	if len(suites) != 1 {
		t.Fatalf("fixtures/suite renders %d HarnessSuites: %v", len(suites), m.ids())
	}
	sel, _, _ := unstructured.NestedString(suites[0].Object, "spec", "fixtures", "selector", "matchLabels", "harnessfacts.io/fixture-set")
	cms := m.only("ConfigMap")
	if len(cms) < 2 {
		t.Fatalf("fixtures/suite renders %d fixture ConfigMaps, want at least 2: %v", len(cms), m.ids())
	}
	for _, cm := range cms {
		l := cm.GetLabels()
		if l["harnessfacts.io/fixture"] != "true" || l["harnessfacts.io/fixture-set"] != sel || sel == "" {
			t.Errorf("ConfigMap %s has labels %v; the suite selects harnessfacts.io/fixture-set=%q among harnessfacts.io/fixture=true", cm.GetName(), l, sel)
		}
		if _, ok := cm.Object["data"].(map[string]any)["fixture.yaml"]; !ok {
			t.Errorf("ConfigMap %s has no fixture.yaml", cm.GetName())
		}
	}
	dryRunApply(t, m)
}
