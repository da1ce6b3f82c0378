package nodecmd

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// NewScheme knows the built-in types and the harnessfacts.io types: what
// every client and manager of the harnessfacts binaries reads and writes.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := harnessv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, nil
}
