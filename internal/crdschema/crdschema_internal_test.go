package crdschema

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
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
	if got := files(); len(got) != 1 || got[0] != "compact/harnessfacts.io_harnessruns.json" {
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

// helloRunObject is the hello fixture's run as validation sees it, with
// HarnessRun's schema.
func helloRunObject(tb testing.TB) (map[string]any, *schema) {
	tb.Helper()
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(helloRun), &obj); err != nil {
		tb.Fatal(err)
	}
	s, err := lookup("harnessfacts.io/v1alpha1", "HarnessRun")
	if err != nil || s == nil {
		tb.Fatal(s, err)
	}
	return obj, s
}

// BenchmarkCELRules compiles HarnessRun's CEL rules as a local run of the
// hello fixture needs them, against compiling every rule of the CRD (what
// validation did before rulesFor), side by side.
func BenchmarkCELRules(b *testing.B) {
	obj, s := helloRunObject(b)
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

// createRules leaves out a rule when its text names oldSelf. That is exact
// only if every rule of these CRDs that names oldSelf reads it (the API
// server skips a rule on a create by what the compiled rule reads, not by
// its text): this compiles every rule of every kind as the API server does
// and compares.
func TestTransitionRulesNameOldSelf(t *testing.T) {
	transition := 0
	for _, kind := range []string{"HarnessRun", "HarnessSuite", "HarnessPolicy", "HarnessNode"} {
		s, err := lookup("harnessfacts.io/v1alpha1", kind)
		if err != nil || s == nil {
			t.Fatalf("%s: %v, %v", kind, s, err)
		}
		var walk func(path string, n *structuralschema.Structural, root bool)
		walk = func(path string, n *structuralschema.Structural, root bool) {
			if len(n.XValidations) > 0 {
				results, err := cel.Compile(n, model.SchemaDeclType(n, root), celconfig.PerCallLimit,
					environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()), cel.StoredExpressionsEnvLoader())
				if err != nil {
					t.Fatalf("%s%s: %v", kind, path, err)
				}
				for i, r := range results {
					rule := n.XValidations[i]
					if r.Error != nil {
						t.Fatalf("%s%s: rule %q: %v", kind, path, rule.Rule, r.Error)
					}
					if names := strings.Contains(rule.Rule, "oldSelf"); names != r.UsesOldSelf {
						t.Errorf("%s%s: rule %q names oldSelf: %v, reads it: %v", kind, path, rule.Rule, names, r.UsesOldSelf)
					}
					if r.UsesOldSelf {
						transition++
					}
				}
			}
			for name, p := range n.Properties {
				walk(path+"."+name, &p, false)
			}
			if n.Items != nil {
				walk(path+"[*]", n.Items, false)
			}
			if n.AdditionalProperties != nil && n.AdditionalProperties.Structural != nil {
				walk(path+"[*]", n.AdditionalProperties.Structural, false)
			}
		}
		walk("", s.structural, true)
	}
	if transition == 0 {
		t.Error("no transition rule found: the walk missed them")
	}
}

// A run's create compiles none of spec's transition rules (those that keep
// it immutable), and keeps the rest of spec's.
func TestCreateCompilesNoTransitionRule(t *testing.T) {
	obj, s := helloRunObject(t)
	all := s.structural.Properties["spec"].XValidations
	kept := rulesFor(s.structural, obj).Properties["spec"].XValidations
	for _, r := range kept {
		if strings.Contains(r.Rule, "oldSelf") {
			t.Errorf("kept the transition rule %q", r.Rule)
		}
	}
	dropped := 0
	for _, r := range all {
		if strings.Contains(r.Rule, "oldSelf") {
			dropped++
		}
	}
	if dropped == 0 || len(kept) != len(all)-dropped {
		t.Errorf("spec has %d rules, %d of them transition rules; kept %d", len(all), dropped, len(kept))
	}
}
