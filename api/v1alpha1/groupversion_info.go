// Package v1alpha1 holds the harnessfacts.io/v1alpha1 API: HarnessRun, one
// agent run against one fixture, and HarnessNode, one node-agent's view of
// its node.
//
// +kubebuilder:object:generate=true
// +groupName=harnessfacts.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "harnessfacts.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
