package sandboxinit

import (
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"
)

// Tasks is how many threads sandbox-init has while the agent runs: a run's
// process limit (a pids cgroup) counts threads, and sandbox-init's share
// the agent's cgroup. The executor adds them to the limit, so that the
// agent gets its maxProcesses. sandbox-init makes them all before the
// agent starts (reserveThreads). Its Go runtime, under GOMAXPROCS 1, has
// 4 to 7 by then and uses about 5 while the agent runs; with 8, under a
// load of 5, it started a ninth in 2 of 150 runs (the agent then got one
// process less, and had it used all of them, sandbox-init would have died
// for want of its thread); with 10, none in 400 runs under loads up to 13.
const Tasks = 10

// reserveThreads has the Go runtime start threads until the process has n,
// then leaves them idle for the runtime to reuse. sandbox-init shares the
// agent's pids cgroup, which counts threads: with its threads made before
// the agent starts, the agent gets exactly what is left, and sandbox-init
// does not need a new one (which it could not get, and would die of) when
// the agent has used the rest.
//
// Each thread is made by a goroutine that locks the thread it runs on and
// waits: the runtime must start another for everyone else. Unlocked and
// ended, each goroutine leaves its thread idle, and the runtime keeps idle
// threads.
//
// The count that decides is the runtime's, not the kernel's: a thread
// asked for on a locked thread is started later by the runtime's template
// thread, so the kernel's count could lag by one and the loop ask for one
// too many, which then started while the agent ran and took one of its
// processes (TestSmallProcessLimitIsTheAgents, 1 run in 10–20: the agent
// got 3 of 4). It returns once the kernel has every thread the runtime
// asked for.
func reserveThreads(n int) {
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		if runtimeThreads() >= n {
			break
		}
		locked := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			close(locked)
			<-release
		}()
		<-locked
	}
	close(release)
	wg.Wait()
	// The template thread starts the last ones within microseconds; the
	// bound is for a kernel that refuses a thread (the runtime then dies).
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Microsecond) {
		if have, err := threads(); err != nil || have >= runtimeThreads() {
			return
		}
	}
}

// runtimeThreads is how many threads the Go runtime has made or asked for.
func runtimeThreads() int {
	s := []metrics.Sample{{Name: "/sched/threads/total:threads"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		n, _ := threads() // a runtime without the metric: the kernel's count
		return n
	}
	return int(s[0].Value.Uint64())
}

// threads is how many threads the process has.
func threads() (int, error) {
	d, err := os.Open("/proc/self/task")
	if err != nil {
		return 0, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	return len(names), err
}
