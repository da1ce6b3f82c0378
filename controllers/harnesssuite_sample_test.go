package controllers_test

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// TestSuiteSampleRuns applies fixtures/suite, rendered by kustomize as Flux
// or Argo CD would, into a namespace (Flux's targetNamespace) and runs it on
// fake nodes: the suite finds the sample's fixtures by label and completes.
func TestSuiteSampleRuns(t *testing.T) {
	ns := newNamespace(t)
	out, err := exec.Command(filepath.Join(env.Assets, "kubectl"), "kustomize", filepath.Join(testenv.RepoRoot(), "fixtures", "suite")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize fixtures/suite: %v", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var suiteName string
	fixtures := 0
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		obj.SetNamespace(ns)
		switch obj.GetKind() {
		case "HarnessSuite":
			suiteName = obj.GetName()
		case "ConfigMap":
			fixtures++
		}
		create(t, obj)
	}
	if suiteName == "" || fixtures < 2 {
		t.Fatalf("fixtures/suite rendered suite %q and %d ConfigMaps", suiteName, fixtures)
	}
	startNode(t, ns, fakenode.Options{Name: "sample-node-" + ns, Slots: 4, RunFor: 20 * time.Millisecond,
		Adapters: map[harnessv1.Adapter]string{harnessv1.AdapterExec: "1"},
		Outcome: func(run *harnessv1.HarnessRun) fakenode.Outcome {
			if run.Labels[harnessv1.LabelSuiteAgent] == "scripted" {
				return fakenode.Pass
			}
			return fakenode.AgentFailed
		}})
	startSuiteController(t, ns)
	s := waitSuite(t, ns, suiteName, time.Minute, "complete", suiteComplete)
	s0 := getSuite(t, ns, suiteName)
	want := int32(len(s0.Spec.Agents) * fixtures * int(s0.Spec.Repeats))
	if s.Status.Counts.Total != want || len(s.Status.Cells) != len(s0.Spec.Agents)*fixtures || len(s.Status.Fixtures) != fixtures {
		t.Errorf("counts %+v, %d cells, %d fixtures; want %d runs over %d fixtures", s.Status.Counts, len(s.Status.Cells), len(s.Status.Fixtures), want, fixtures)
	}
	for _, c := range s.Status.Cells {
		if want := map[string]string{"scripted": "100.0%", "lazy": "0.0%"}[c.Agent]; c.PassRate != want {
			t.Errorf("cell %s × %s pass rate %q, want %q", c.Agent, c.Fixture, c.PassRate, want)
		}
	}
}
