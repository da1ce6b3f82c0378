package nodecmd

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Scheme knows the built-in types and the harnessfacts.io types: what
// every client and manager of the harnessfacts binaries reads and writes.
//
// It is client-go's own scheme, which its package's init fills with every
// built-in group in every binary that links controller-runtime's client,
// with the harnessfacts.io types added once (as Kubernetes'
// sample-controller adds its own). A scheme of our own would be a copy of
// that one, kept for the life of the process: the node-agent idles with it.
func Scheme() (*runtime.Scheme, error) { return scheme() }

var scheme = sync.OnceValues(func() (*runtime.Scheme, error) {
	if err := harnessv1.AddToScheme(clientgoscheme.Scheme); err != nil {
		return nil, err
	}
	return clientgoscheme.Scheme, nil
})
