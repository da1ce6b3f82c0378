package main

import (
	"testing"

	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// TestLinksOnlyTheNodeSide: what the node-agent binary leaves out is why it
// exists. Each of these would come back with one import (the API server's
// libraries came with controller-runtime's metrics filter), and with them
// the pages every node-agent maps and initialises: the CRD validator and
// CEL, the API server's libraries, gRPC, the local run, Go's plugin
// package, kustomize, and any test code. Nor controller-runtime but for its
// logger, config and signals: its client, cache, manager, metrics and certwatcher import
// client-go's scheme of every API group (as client-go's typed clientsets
// and tools/events do), whose types and code were most of an idle
// node-agent's memory; the node-agent has its own client of the few groups
// it uses (internal/kube).
func TestLinksOnlyTheNodeSide(t *testing.T) {
	deps := testenv.Forbid(t, "github.com/harnessfacts/harnessfacts/cmd/harnessfacts-node-agent", []string{
		"github.com/harnessfacts/harnessfacts/internal/crdschema",
		"github.com/harnessfacts/harnessfacts/node-agent/localrun",
		"github.com/harnessfacts/harnessfacts/controllers",
		"github.com/harnessfacts/harnessfacts/internal/testing",
		"github.com/harnessfacts/harnessfacts/test/",
		"github.com/google/cel-go",
		"k8s.io/apiserver",
		"k8s.io/apiextensions-apiserver/pkg/apiserver",
		"google.golang.org/grpc",
		"plugin",
		"sigs.k8s.io/kustomize",
		// The client's package imports apiutil, and the manager the cache
		// and the client; their config and signals packages (how the
		// cluster is found, SIGTERM) are light and stay.
		"sigs.k8s.io/controller-runtime/pkg/client/apiutil",
		"sigs.k8s.io/controller-runtime/pkg/cache",
		"sigs.k8s.io/controller-runtime/pkg/metrics",
		"sigs.k8s.io/controller-runtime/pkg/certwatcher",
		"sigs.k8s.io/controller-runtime/pkg/webhook",
		"k8s.io/client-go/kubernetes",
		"k8s.io/client-go/tools/events",
		"k8s.io/client-go/tools/record",
	})
	if len(deps) > 1200 {
		t.Errorf("harnessfacts-node-agent links %d packages; it linked 1,139 when this test was written: see what came in with go list -deps", len(deps))
	}
}
