package nodeagent_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	nodeagent "github.com/harnessfacts/harnessfacts/node-agent"
)

// Two runs whose long names share their first 245 characters get evidence
// ConfigMaps of their own (one run's node-agent would otherwise replace
// the other's evidence), and so does a run named as the cut form of
// another's name; every name is a valid ConfigMap name, and a name
// that fits is the run's own with the suffix.
func TestEvidenceNamesOfLongRunsDiffer(t *testing.T) {
	name := func(run string, attempt int32) string {
		return nodeagent.EvidenceName(&harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Name: run}, Status: harnessv1.HarnessRunStatus{Attempt: attempt}})
	}
	if got := name("hello", 2); got != "hello-evidence-2" {
		t.Errorf("a short run's evidence: %q", got)
	}
	prefix := strings.Repeat("a", 245)
	// A run author names a run as the cut form of another run's long
	// name (which fits with "-evidence-1" without being cut).
	cut := strings.TrimSuffix(name(prefix+"-victim", 1), ".evidence-1")
	if len(cut)+len("-evidence-1") > 253 {
		t.Fatalf("the crafted name %q would be cut itself: the test shows nothing", cut)
	}
	seen := map[string]string{}
	for _, run := range []string{prefix + "-victim", prefix + "-attack", strings.Repeat("b", 237) + ".c-d.e-f.g-h", strings.Repeat("c", 240) + "-.x-y", cut} {
		for _, attempt := range []int32{1, 12} {
			got := name(run, attempt)
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("%s attempt %d: %q is no ConfigMap name: %v", run[200:], attempt, got, errs)
			}
			if other, ok := seen[got]; ok {
				t.Errorf("runs %q and %q share the evidence ConfigMap %q", other[200:], run[200:], got)
			}
			seen[got] = run
		}
	}
}
