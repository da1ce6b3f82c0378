//go:build linux

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// TestSuiteSampleEndToEnd applies fixtures/suite as Flux would (kustomize,
// into a namespace), runs its 12 runs through the controller and this
// node's node-agent in bubblewrap, and reports it with `harnessfacts
// report`: the scripted agent passes both fixtures, the lazy one fails
// them, and every run has an evidence digest in the HTML.
func TestSuiteSampleEndToEnd(t *testing.T) {
	ns := newNamespace(t, "e2e-suite")
	out, err := exec.Command(filepath.Join(env.Assets, "kubectl"), "kustomize", filepath.Join(testenv.RepoRoot(), "fixtures", "suite")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize fixtures/suite: %v", err)
	}
	ctx := context.Background()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	suiteName := ""
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
		if obj.GetKind() == "HarnessSuite" {
			suiteName = obj.GetName()
			// Only on this process's node-agent, not on one another test
			// started and killed.
			if err := unstructured.SetNestedStringMap(obj.Object, map[string]string{mainNodeLabel: "main"}, "spec", "template", "nodeSelector"); err != nil {
				t.Fatal(err)
			}
		}
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	deadline := time.Now().Add(4 * time.Minute)
	suite := &harnessv1.HarnessSuite{}
	for {
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: suiteName}, suite); err != nil {
			t.Fatal(err)
		}
		if meta.IsStatusConditionTrue(suite.Status.Conditions, harnessv1.SuiteConditionComplete) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("suite %s did not complete: progress %s counts %+v", suiteName, suite.Status.Progress, suite.Status.Counts)
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, c := range suite.Status.Cells {
		want := map[string]string{"scripted": "100.0%", "lazy": "0.0%"}[c.Agent]
		if c.PassRate != want || c.Errored != 0 {
			t.Errorf("cell %s × %s: pass rate %q, %d errored; want %s and none%s", c.Agent, c.Fixture, c.PassRate, c.Errored, want, cellRuns(t, ns, suiteName, c.Agent))
		}
	}

	dir := openDir(t)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	htmlFile := filepath.Join(dir, "report.html")
	md, err := exec.Command(binary, "report", suiteName, "-n", ns, "--kubeconfig", kubeconfig, "--html", htmlFile).Output()
	if err != nil {
		t.Fatalf("harnessfacts report: %v", err)
	}
	for _, want := range []string{"| scripted | fixture-count | 3 | 3 | 0 | 0 | 0 | 100.0% |", "| lazy | fixture-hello | 3 | 0 | 3 | 0 | 0 | 0.0% |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
	page, err := os.ReadFile(htmlFile)
	if err != nil {
		t.Fatal(err)
	}
	runs := &harnessv1.HarnessRunList{}
	if err := k8s.List(ctx, runs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, r := range runs.Items {
		if r.Status.Evidence == nil || r.Status.Evidence.Digest == "" || !bytes.Contains(page, []byte(r.Status.Evidence.Digest)) {
			t.Errorf("run %s: evidence %+v not in the HTML report", r.Name, r.Status.Evidence)
		}
	}
}

// cellRuns lists how each run of a suite's agent ended, for a failure's
// message.
func cellRuns(t *testing.T, ns, suite, agent string) string {
	t.Helper()
	var runs harnessv1.HarnessRunList
	if err := k8s.List(context.Background(), &runs, client.InNamespace(ns),
		client.MatchingLabels{harnessv1.LabelSuite: suite, harnessv1.LabelSuiteAgent: agent}); err != nil {
		return "; listing its runs: " + err.Error()
	}
	var b strings.Builder
	for _, r := range runs.Items {
		st := r.Status
		fmt.Fprintf(&b, "\n  %s: %s/%s %s: %s", r.Name, st.Phase, st.Verdict, st.Reason, st.Message)
		for _, c := range st.Checks {
			fmt.Fprintf(&b, "\n    check %s: %+v", c.Name, c)
		}
		if st.Agent != nil {
			fmt.Fprintf(&b, "\n    agent: %+v", *st.Agent)
		}
	}
	return b.String()
}
