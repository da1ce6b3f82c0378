// Package v1alpha1 holds the harnessfacts.io/v1alpha1 API: HarnessRun, one
// agent run against one fixture, HarnessNode, one node-agent's view of its
// node, and HarnessSuite, a matrix of agents × fixtures × repeats run as
// HarnessRuns, and HarnessPolicy, an operator's rules for the runs of the
// namespaces it selects.
//
// +kubebuilder:object:generate=true
// +groupName=harnessfacts.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "harnessfacts.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a scheme. The
	// API package depends only on apimachinery, so it is cheap to import.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&HarnessRun{}, &HarnessRunList{},
		&HarnessNode{}, &HarnessNodeList{},
		&HarnessSuite{}, &HarnessSuiteList{},
		&HarnessPolicy{}, &HarnessPolicyList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
