package sandbox

import (
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/procfs"
)

// A run's cgroup is named for the process that made it: its pid and its
// start time (clock ticks since boot, /proc/PID/stat), which together name
// one process however pids are reused. Whoever sweeps the runs' parent for
// abandoned cgroups (a node-agent at its start, `harnessfacts run` at each
// start) leaves those of a live process alone. A run's cgroup is empty for
// a moment between its making and its sandbox's start, and again between
// the sandbox's end and its stats being read; processes that share a
// parent (local runs; a node-agent started on the host of other runs) must
// not take it from under each other. A node-agent's sweep at its start
// removed any empty one: in CI it took the cgroup another test process had
// just made, whose bwrap then failed ("open .../tasks: no such file or
// directory").
//
// The pid is the one the maker sees in its own pid namespace, so the names
// are only read right by processes of that namespace: a node-agent's runs'
// parent is its own pod's (PlaceNodeAgent), which nothing of another
// namespace shares.

// cgroupOwner is the process that made a run's cgroup.
type cgroupOwner struct {
	pid   int
	start uint64
}

// selfOwner is this process, false where its start time cannot be read.
var selfOwner = sync.OnceValues(func() (cgroupOwner, bool) {
	pid := os.Getpid()
	start, err := procStart(pid)
	return cgroupOwner{pid: pid, start: start}, err == nil
})

// runOwner reads a run cgroup's maker from its name, false for a name that
// has none (a run-<random> made by an earlier version, or where the maker
// could not read its start time).
func runOwner(name string) (cgroupOwner, bool) {
	rest, ok := strings.CutPrefix(name, "run-")
	if !ok {
		return cgroupOwner{}, false
	}
	parts := strings.SplitN(rest, "-", 3)
	if len(parts) != 3 {
		return cgroupOwner{}, false
	}
	pid, err := strconv.Atoi(parts[0])
	if err != nil || pid <= 0 {
		return cgroupOwner{}, false
	}
	start, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return cgroupOwner{}, false
	}
	return cgroupOwner{pid: pid, start: start}, true
}

// alive says whether the process that made the cgroup still runs: its pid
// is a process started at the same tick.
func (o cgroupOwner) alive() bool {
	start, err := procStart(o.pid)
	return err == nil && start == o.start
}

// procStart is the start time of process pid (prometheus/procfs reads
// its stat file, past a command name that may hold spaces and parentheses).
func procStart(pid int) (uint64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return st.Starttime, nil
}
