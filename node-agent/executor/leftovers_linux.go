package executor

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// killLeftovers kills the processes an earlier node-agent's runs left
// behind: every process whose working directory is under runRoot or whose
// environment names a run dir under it (HARNESSFACTS_RUN, which every
// sandboxed command gets). bwrap's --die-with-parent normally takes the
// whole tree down with the node-agent, but a node-agent killed while a
// sandbox was still being set up can leave one behind. Only one node-agent
// may use a run root, so nothing found here belongs to a live run.
func killLeftovers(runRoot string) (int, error) {
	root := filepath.Clean(runRoot) + string(filepath.Separator)
	marker := []byte("HARNESSFACTS_RUN=" + root)
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
			if err != nil || pid == self {
				continue
			}
			dir := filepath.Join("/proc", e.Name())
			cwd, _ := os.Readlink(filepath.Join(dir, "cwd"))
			env, _ := os.ReadFile(filepath.Join(dir, "environ"))
			if !bytes.HasPrefix([]byte(cwd+"/"), []byte(root)) && !bytes.Contains(env, marker) {
				continue
			}
			found++
			killed[pid] = true
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if found == 0 {
			return len(killed), nil
		}
		time.Sleep(20 * time.Millisecond) // let the kernel reap them, then look again
	}
	return len(killed), nil
}
