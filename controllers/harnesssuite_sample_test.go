package controllers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/fakenode"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// TestSuiteSampleRuns applies fixtures/suite, rendered by kustomize as Flux
// or Argo CD would, into a namespace (Flux's targetNamespace) and runs it on
// fake nodes: the suite finds the sample's fixtures by label and completes.
// The path and the health checks are those of the shipped Flux example
// (config/health/flux/kustomization.yaml), judged with kstatus as Flux's
// kustomize-controller judges them: each names an object the sample makes,
// InProgress while the round runs and Current once it is complete.
func TestSuiteSampleRuns(t *testing.T) {
	ns := newNamespace(t)
	flux := &unstructured.Unstructured{}
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "health", "flux", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &flux.Object); err != nil {
		t.Fatal(err)
	}
	path, _, _ := unstructured.NestedString(flux.Object, "spec", "path")
	checks, _, _ := unstructured.NestedSlice(flux.Object, "spec", "healthChecks")
	if flux.GetKind() != "Kustomization" || path == "" || len(checks) == 0 {
		t.Fatalf("the Flux example: kind %s, path %q, %d health checks", flux.GetKind(), path, len(checks))
	}
	out, err := exec.Command(filepath.Join(env.Assets, "kubectl"), "kustomize", filepath.Join(testenv.RepoRoot(), path)).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s (the Flux example's path): %v", path, err)
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
	// Flux's health checks as kstatus sees them, each object read back
	// from the API server (in the test's stand-in for targetNamespace).
	fluxHealth := func(want status.Status) {
		t.Helper()
		for _, c := range checks {
			hc, _ := c.(map[string]any)
			apiVersion, _ := hc["apiVersion"].(string)
			kind, _ := hc["kind"].(string)
			name, _ := hc["name"].(string)
			gv, err := schema.ParseGroupVersion(apiVersion)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := k8s.RESTMapper().RESTMapping(gv.WithKind(kind).GroupKind(), gv.Version); err != nil {
				t.Fatalf("the Flux example checks %s %s, which the API server does not serve: %v", apiVersion, kind, err)
			}
			eventually(t, time.Minute, func() error {
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(gv.WithKind(kind))
				if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
					return fmt.Errorf("the Flux example checks %s %s, which the sample does not make: %w", kind, name, err)
				}
				res, err := status.Compute(u)
				if err != nil {
					return err
				}
				if res.Status != want {
					return fmt.Errorf("kstatus of %s %s: %s (%s), want %s", kind, name, res.Status, res.Message, want)
				}
				return nil
			})
		}
	}
	fluxHealth(status.InProgressStatus)
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
	fluxHealth(status.CurrentStatus)
}
