package nodeagent

import (
	"runtime/debug"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// idleAfter is how long the node-agent must have had nothing to run before
// it returns its free memory to the node.
const idleAfter = 2 * time.Second

// idleMemory gives the node back the memory the node-agent's heap grew to
// for its start-up or its last runs (decoded lists, output buffers, TLS
// handshakes), once it has had nothing to run for idleAfter. The Go runtime
// returns that memory on its own, but minutes later (after its forced
// collection every two minutes, then at its scavenger's pace), and a node's
// memory is for its agents. It costs one collection per idle period, which
// lasts at least idleAfter: well under 1 % of a core.
type idleMemory struct {
	clock clock.WithDelayedExecution
	// busy says whether an attempt is running.
	busy func() bool
	// free returns the memory (debug.FreeOSMemory; tests count calls).
	free func()

	mu    sync.Mutex
	timer clock.Timer
}

func newIdleMemory(c clock.WithTicker, busy func() bool) *idleMemory {
	dc, ok := c.(clock.WithDelayedExecution)
	if !ok {
		dc = clock.RealClock{}
	}
	return &idleMemory{clock: dc, busy: busy, free: debug.FreeOSMemory}
}

// settle is called when the node-agent may have become idle: after its
// start, and when an attempt ends. The memory is returned if it is still
// idle idleAfter later; a later settle starts the wait again.
func (m *idleMemory) settle() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.timer != nil {
		m.timer.Stop()
	}
	m.timer = m.clock.AfterFunc(idleAfter, func() {
		if !m.busy() {
			m.free()
		}
	})
}
