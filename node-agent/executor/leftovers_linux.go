package executor

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"

	"github.com/harnessfacts/harnessfacts/sandbox"
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
	return sandbox.KillProcesses(func(pid int) bool {
		dir := filepath.Join("/proc", strconv.Itoa(pid))
		cwd, _ := os.Readlink(filepath.Join(dir, "cwd"))
		env, _ := os.ReadFile(filepath.Join(dir, "environ"))
		return bytes.HasPrefix([]byte(cwd+"/"), []byte(root)) || bytes.Contains(env, marker)
	})
}
