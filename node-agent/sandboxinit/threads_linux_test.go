package sandboxinit

import (
	"testing"
	"time"
)

// TestReserveThreadsKeepsThem: the threads reserveThreads makes are there
// when it returns and stay, idle, for the runtime to reuse: sandbox-init
// makes them before the agent takes the rest of the pids cgroup.
func TestReserveThreadsKeepsThem(t *testing.T) {
	before, err := threads()
	if err != nil {
		t.Fatal(err)
	}
	want := before + 3
	reserveThreads(want)
	if got, _ := threads(); got < want {
		t.Fatalf("%d threads after reserving %d (had %d)", got, want, before)
	}
	time.Sleep(100 * time.Millisecond) // time for the runtime to drop threads, if it did
	if got, _ := threads(); got < want {
		t.Errorf("%d threads 100 ms after reserving %d: the runtime let them go", got, want)
	}
}
