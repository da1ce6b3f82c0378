package startgc

import (
	"runtime/debug"
	"testing"
	"time"
)

// gcPercentNow is the collector's GOGC now.
func gcPercentNow() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// Only `harnessfacts run` holds the collector back, and Resume gives the
// setting back; the controller, the node-agent and every other command
// keep it from the start.
func TestOnlyARunHoldsTheCollector(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	p0 := gcPercentNow()
	for _, args := range [][]string{{"harnessfacts"}, {"harnessfacts", "controller"}, {"harnessfacts", "node-agent"}, {"harnessfacts", "dev"}, {"harnessfacts", "-h", "run"}} {
		start(args)
		if p := gcPercentNow(); Held() || p != p0 {
			t.Errorf("%v held the collector back (GOGC %d)", args, p)
		}
	}
	start([]string{"harnessfacts", "run", "-f", "run.yaml"})
	if p := gcPercentNow(); !Held() || p != -1 {
		t.Fatalf("harnessfacts run: held %v, GOGC %d", Held(), p)
	}
	Resume()
	if p := gcPercentNow(); Held() || p != p0 {
		t.Errorf("after Resume: held %v, GOGC %d; want %d", Held(), p, p0)
	}
	debug.SetGCPercent(p0 + 1)
	defer debug.SetGCPercent(p0)
	Resume() // again, where nothing is held: no change
	if p := gcPercentNow(); p != p0+1 {
		t.Errorf("a second Resume changed GOGC to %d", p)
	}
}

// A user who set GOGC or GOMEMLIMIT keeps their setting.
func TestTheUsersSettingStays(t *testing.T) {
	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv("GOGC", "")
			t.Setenv("GOMEMLIMIT", "")
			t.Setenv(env, "200")
			start([]string{"harnessfacts", "run"})
			if p := gcPercentNow(); Held() || p == -1 {
				t.Errorf("with %s set, the run held the collector (GOGC %d)", env, p)
			}
		})
	}
}

var sink [][]byte

// A start that allocates more than maxHeld is collected again without
// waiting for Resume: the heap is not left to grow with what it allocates.
func TestAHeldStartThatAllocatesMuchResumes(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	p0 := gcPercentNow()
	defer maxHeld.Store(maxHeld.Load())
	start([]string{"harnessfacts", "run"})
	defer Resume()
	if !Held() {
		t.Fatal("not held")
	}
	// Below the bound (the test process's own allocations so far are far
	// under a gigabyte): still held after a few reads.
	maxHeld.Store(1 << 40)
	time.Sleep(4 * watchEvery)
	if !Held() {
		t.Fatal("resumed before the bound was reached")
	}
	maxHeld.Store(64 << 20)
	for range 128 {
		sink = append(sink, make([]byte, 1<<20))
		sink = sink[len(sink)-1:]
	}
	deadline := time.Now().Add(10 * time.Second)
	for Held() && time.Now().Before(deadline) {
		time.Sleep(watchEvery)
	}
	if p := gcPercentNow(); Held() || p != p0 {
		t.Errorf("after 128 MiB allocated: held %v, GOGC %d; want resumed to %d", Held(), p, p0)
	}
}
