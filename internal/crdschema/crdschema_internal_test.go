package crdschema

import (
	"maps"
	"slices"
	"testing"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// A lookup reads only the CRD file it needs when the file's name gives the
// kind away (HarnessRun's, for `harnessfacts run`), and still finds a kind
// whose file is named otherwise (harnesspolicies for HarnessPolicy) or says
// none defines it, having read every file.
func TestLookupReadsTheFilesItNeeds(t *testing.T) {
	indexMu.Lock()
	index, read = map[string]crdVersion{}, map[string]bool{}
	indexMu.Unlock()
	files := func() []string { return slices.Sorted(maps.Keys(read)) }

	if v, ok, err := find("harnessfacts.io/v1alpha1", "HarnessRun"); err != nil || !ok || v.props == nil {
		t.Fatalf("HarnessRun: %v, %v, %v", v, ok, err)
	}
	if got := files(); len(got) != 1 || got[0] != "bases/harnessfacts.io_harnessruns.yaml" {
		t.Errorf("looking up HarnessRun read %v, want its file alone", got)
	}
	for _, kind := range []string{"HarnessPolicy", "HarnessSuite", "HarnessNode", "HarnessRun"} {
		if _, ok, err := find("harnessfacts.io/v1alpha1", kind); err != nil || !ok {
			t.Errorf("%s: found %v, %v", kind, ok, err)
		}
	}
	if _, ok, err := find("harnessfacts.io/v1alpha1", "Pod"); err != nil || ok {
		t.Errorf("Pod: found %v, %v; want not found", ok, err)
	}
	if got := files(); len(got) != 4 {
		t.Errorf("after every kind, read %v, want all four files", got)
	}
	if _, ok, _ := find("harnessfacts.io/v1beta1", "HarnessRun"); ok {
		t.Error("a version no CRD serves was found")
	}
}

// BenchmarkCELRules compiles HarnessRun's CEL rules as a local run of the
// hello fixture needs them, against compiling every rule of the CRD (what
// validation did before rulesFor), side by side.
func BenchmarkCELRules(b *testing.B) {
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(helloRun), &obj); err != nil {
		b.Fatal(err)
	}
	s, err := lookup("harnessfacts.io/v1alpha1", "HarnessRun")
	if err != nil || s == nil {
		b.Fatal(s, err)
	}
	structuraldefaulting.Default(obj, s.structural)
	var all, run time.Duration
	for b.Loop() {
		t := time.Now()
		if cel.NewValidator(s.structural, true, celconfig.PerCallLimit) == nil {
			b.Fatal("no rules")
		}
		all += time.Since(t)
		t = time.Now()
		if cel.NewValidator(rulesFor(s.structural, obj), true, celconfig.PerCallLimit) == nil {
			b.Fatal("no rules")
		}
		run += time.Since(t)
	}
	b.ReportMetric(float64(all.Microseconds())/1000/float64(b.N), "every-rule-ms")
	b.ReportMetric(float64(run.Microseconds())/1000/float64(b.N), "the-run's-rules-ms")
	b.ReportMetric(float64(run)/float64(all), "ratio")
}

// helloRun is fixtures/hello/run.yaml's spec.
const helloRun = `
apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: hello, namespace: default}
spec:
  agent: {adapter: exec, command: [sh, ../fixture/agent.sh]}
  fixture: {configMapRef: {name: fixture-hello}}
`
