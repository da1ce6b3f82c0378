package nodeagent

import (
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// TestIdleMemoryWaitsForAQuietSpell: the memory is returned once the
// node-agent has had nothing to run for idleAfter, counted from the last
// settle, and not while an attempt runs.
func TestIdleMemoryWaitsForAQuietSpell(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	var busy atomic.Bool
	var freed atomic.Int32
	m := newIdleMemory(clk, busy.Load)
	m.free = func() { freed.Add(1) }

	m.settle()
	clk.Step(idleAfter - time.Millisecond)
	if freed.Load() != 0 {
		t.Fatal("freed before the node-agent was idle for idleAfter")
	}
	m.settle() // another attempt ended: the wait starts again
	clk.Step(idleAfter - time.Millisecond)
	if freed.Load() != 0 {
		t.Fatal("freed idleAfter after the first settle, not the last")
	}
	clk.Step(time.Millisecond)
	if freed.Load() != 1 {
		t.Fatalf("freed %d times after idleAfter of quiet, want once", freed.Load())
	}
	clk.Step(time.Hour)
	if freed.Load() != 1 {
		t.Fatal("freed again without another settle")
	}

	busy.Store(true)
	m.settle()
	clk.Step(idleAfter)
	if freed.Load() != 1 {
		t.Fatal("freed while an attempt runs")
	}
}
