package sandboxinit

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
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

// reserveChildEnv makes the test binary a fresh process that reserves
// Tasks threads as sandbox-init does, and prints how many it has when that
// returns and a moment later.
const reserveChildEnv = "HARNESSFACTS_TEST_RESERVE_THREADS"

// TestReserveThreadsMakesNoMore: a fresh process, under GOMAXPROCS 1 as
// sandbox-init, has exactly Tasks threads once reserveThreads returns, and
// no thread comes after. A thread the runtime's template thread started
// late (it asked for one more than it needed, counting the kernel's
// threads) took one of the agent's processes in about one run of 30.
func TestReserveThreadsMakesNoMore(t *testing.T) {
	if os.Getenv(reserveChildEnv) != "" {
		runtime.GOMAXPROCS(1)
		reserveThreads(Tasks)
		at, _ := threads()
		time.Sleep(20 * time.Millisecond)
		later, _ := threads()
		fmt.Printf("threads %d %d\n", at, later)
		os.Exit(0)
	}
	for i := range 60 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestReserveThreadsMakesNoMore$")
		cmd.Env = append(os.Environ(), reserveChildEnv+"=1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, out)
		}
		f := strings.Fields(strings.TrimSpace(string(out)))
		if len(f) != 3 || f[0] != "threads" {
			t.Fatalf("child %d printed %q", i, out)
		}
		at, _ := strconv.Atoi(f[1])
		later, _ := strconv.Atoi(f[2])
		if at != Tasks || later != Tasks {
			t.Fatalf("child %d: %d threads when reserveThreads(%d) returned, %d a moment later; want %d both times", i, at, Tasks, later, Tasks)
		}
	}
}
