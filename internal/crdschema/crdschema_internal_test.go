package crdschema

import (
	"maps"
	"slices"
	"testing"
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
