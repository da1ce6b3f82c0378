package controllers

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// The cache transforms the objects of its first list twice (client-go's
// informer, v0.37; seen with a counting transform on a real API server):
// each transform must leave what it made as it is. A run transformed again
// took the digest of its stripped spec, so that after a controller's
// restart a suite judged its own runs with a command or a prompt foreign.
func TestCacheTransformsAreIdempotent(t *testing.T) {
	run := &harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "n",
		Labels:        map[string]string{harnessv1.LabelSuiteRound: "2", "team": "a"},
		Annotations:   map[string]string{harnessv1.AnnotationFixtureHash: "sha256:f", "tenant.example.com/x": "y"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	run.Spec.Agent.Command = []string{"sh", "-c", "work"}
	run.Spec.Fixture.Prompt = "do the task"
	for i := range 20 {
		run.Finalizers = append(run.Finalizers, fmt.Sprintf("tenant.example.com/f%d", i))
	}
	run.Finalizers = append(run.Finalizers, harnessv1.RunFinalizer)
	wantWork := uncachedWork(&run.Spec)

	once, _ := cachedRun(run.DeepCopy())
	twice, _ := cachedRun(once.(*harnessv1.HarnessRun).DeepCopy())
	if diff := cmp.Diff(once, twice); diff != "" {
		t.Errorf("a run transformed twice differs from once (-once +twice):\n%s", diff)
	}
	got := twice.(*harnessv1.HarnessRun)
	if got.Annotations[CachedRunWorkAnnotation] != wantWork || got.Annotations[CachedFinalizerIndexAnnotation] != "20" {
		t.Errorf("a run transformed twice: annotations %v; want the work digest %s and its finalizer at 20", got.Annotations, wantWork)
	}

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "f", Labels: map[string]string{harnessv1.LabelFixture: "true"}},
		Data: map[string]string{"fixture.yaml": "prompt: hi\n"}}
	cmOnce, _ := cachedFixture(cm.DeepCopy())
	cmTwice, _ := cachedFixture(cmOnce.(*corev1.ConfigMap).DeepCopy())
	if diff := cmp.Diff(cmOnce, cmTwice); diff != "" {
		t.Errorf("a fixture transformed twice differs from once (-once +twice):\n%s", diff)
	}
	suite := &harnessv1.HarnessSuite{ObjectMeta: metav1.ObjectMeta{Name: "s", Labels: map[string]string{"a": "b"}}}
	sOnce, _ := cachedSuite(suite.DeepCopy())
	sTwice, _ := cachedSuite(sOnce.(*harnessv1.HarnessSuite).DeepCopy())
	if diff := cmp.Diff(sOnce, sTwice); diff != "" {
		t.Errorf("a suite transformed twice differs from once (-once +twice):\n%s", diff)
	}
}
