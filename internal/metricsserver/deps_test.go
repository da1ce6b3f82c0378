package metricsserver_test

import (
	"testing"

	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// TestNodeAgentServersDoNotLinkControllerRuntime: the packages by which the
// node-agent reviews callers and serves its metrics, live output and probes
// and reaches the run source link neither controller-runtime (its client,
// manager, cache, metrics and certwatcher) nor client-go's scheme of every
// API group and its events recorder: paged in at start, those were most of
// an idle node-agent's memory (package kube says more).
func TestNodeAgentServersDoNotLinkControllerRuntime(t *testing.T) {
	forbidden := []string{
		"sigs.k8s.io/controller-runtime/pkg/client",
		"sigs.k8s.io/controller-runtime/pkg/manager",
		"sigs.k8s.io/controller-runtime/pkg/cache",
		"sigs.k8s.io/controller-runtime/pkg/metrics",
		"sigs.k8s.io/controller-runtime/pkg/certwatcher",
		"k8s.io/client-go/kubernetes/scheme",
		"k8s.io/client-go/tools/events",
		// Nor any other of controller-runtime's packages.
		"sigs.k8s.io/controller-runtime",
	}
	for _, pkg := range []string{
		"github.com/harnessfacts/harnessfacts/internal/kubeauth",
		"github.com/harnessfacts/harnessfacts/node-agent/livelog",
		"github.com/harnessfacts/harnessfacts/runsource",
		"github.com/harnessfacts/harnessfacts/internal/certfile",
		"github.com/harnessfacts/harnessfacts/internal/metricsserver",
	} {
		t.Run(pkg, func(t *testing.T) { testenv.Forbid(t, pkg, forbidden) })
	}
}
