package main

import (
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// The scheme is client-go's, completed: not a copy of every built-in group
// that a node-agent would keep for its life.
func TestClusterSchemeIsClientGosCompleted(t *testing.T) {
	s := clusterScheme()
	if s != clientgoscheme.Scheme {
		t.Fatal("Scheme made a scheme of its own")
	}
	for _, obj := range []runtime.Object{&harnessv1.HarnessRun{}, &harnessv1.HarnessNode{}, &harnessv1.HarnessSuite{},
		&corev1.ConfigMap{}, &coordinationv1.Lease{}} {
		if _, _, err := s.ObjectKinds(obj); err != nil {
			t.Errorf("%T: %v", obj, err)
		}
	}
}
