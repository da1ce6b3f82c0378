package sandbox

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// KillUIDs kills every process whose real, effective or saved uid is one of
// which (in r), until none is left, and returns how many it killed. The ids
// a runner hands out are each one run's alone (IDs): whatever of that uid
// still runs once the run ended is the run's, however it left the process
// group or the run dir (a plain run's `cd / && env -i setsid ...`), and it
// must not be there when the id goes to the next run, whose agent and
// credential copies it could otherwise signal, trace and read.
func KillUIDs(r IDRange) (int, error) {
	return KillProcesses(func(pid int) bool { return r.hasAny(procUIDs(pid)) })
}

// KillProcesses kills every process but this one for which match says so,
// looking again until a pass finds none (what they forked meanwhile), and
// returns how many it killed.
func KillProcesses(match func(pid int) bool) (int, error) {
	self := os.Getpid()
	killed := map[int]bool{}
	for round := 0; round < 50; round++ {
		found := 0
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return len(killed), err
		}
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self || !match(pid) {
				continue
			}
			found++
			killed[pid] = true
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if found == 0 {
			return len(killed), nil
		}
		time.Sleep(10 * time.Millisecond) // let the kernel reap them, then look again
	}
	return len(killed), nil
}

// procUIDs are the real, effective, saved and file-system uids of pid, from
// its status; none when it is gone.
func procUIDs(pid int) []int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Uid:")
		if !ok {
			continue
		}
		var ids []int
		for _, f := range strings.Fields(rest) {
			if n, err := strconv.Atoi(f); err == nil {
				ids = append(ids, n)
			}
		}
		return ids
	}
	return nil
}

// hasAny says whether one of ids lies in r.
func (r IDRange) hasAny(ids []int) bool {
	for _, id := range ids {
		if id >= r.First && id < r.First+r.Count {
			return true
		}
	}
	return false
}
