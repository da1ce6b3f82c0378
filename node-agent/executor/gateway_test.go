package executor

import (
	"testing"

	"github.com/harnessfacts/harnessfacts/node-agent/gateway"
)

// TestGatewayBodiesPerRunAddUpToTheNodes: each run's share of the node's
// held request bodies; together they are at most the node's up to eight
// slots, and a run always has one.
func TestGatewayBodiesPerRunAddUpToTheNodes(t *testing.T) {
	node := gateway.NewNodeBodies(nodeGatewayBodies)
	for slots, want := range map[int]int{0: 4, 1: 4, 2: 4, 3: 2, 4: 2, 5: 1, 8: 1, 16: 1} {
		got := gatewayBodiesPerRun(node, slots)
		if got != want {
			t.Errorf("%d slots: %d bodies a run, want %d", slots, got, want)
		}
		if slots > 0 && slots <= cap(node) && got*slots > cap(node) {
			t.Errorf("%d slots of %d bodies each pass the node's %d", slots, got, cap(node))
		}
	}
}
