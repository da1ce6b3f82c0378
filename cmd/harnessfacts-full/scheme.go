package main

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// clusterScheme knows the built-in types and the harnessfacts.io types: what
// the controller's and the CLI's clients and managers read and write (the
// node-agent has a scheme of its own few groups, internal/kube).
//
// It is client-go's own scheme, which its package's init fills with every
// built-in group in every binary that links controller-runtime's client,
// with the harnessfacts.io types added (as Kubernetes' sample-controller
// adds its own). A scheme of our own would be a copy of that one, kept for
// the life of the process.
func clusterScheme() *runtime.Scheme { return clientgoscheme.Scheme }

// The types are added at init, before any goroutine can read client-go's
// scheme (an event recorder, a typed client): added at first use, they
// would be a write beside those reads. Ten kinds, microseconds.
func init() { utilruntime.Must(harnessv1.AddToScheme(clientgoscheme.Scheme)) }
