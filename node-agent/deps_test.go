package nodeagent_test

import (
	"testing"

	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// TestDaemonDoesNotLinkTheValidator: the node-agent daemon gets runs the API
// server already admitted, so it must not link what `harnessfacts run` needs
// to admit run.yaml itself: the CRD validator (internal/crdschema,
// apiextensions-apiserver's validation and CEL), cel-go, or the local-run
// package. Nor any test double or test suite. This is `go list -deps` of
// the package, as docs/architecture.md shows it.
func TestDaemonDoesNotLinkTheValidator(t *testing.T) {
	testenv.Forbid(t, "github.com/harnessfacts/harnessfacts/node-agent", []string{
		"github.com/harnessfacts/harnessfacts/internal/crdschema",
		"github.com/harnessfacts/harnessfacts/node-agent/localrun",
		"github.com/harnessfacts/harnessfacts/internal/testing",
		"github.com/harnessfacts/harnessfacts/test/",
		"github.com/google/cel-go",
		"k8s.io/apiserver/pkg/cel",
		"k8s.io/apiextensions-apiserver/pkg/apiserver",
	})
}
