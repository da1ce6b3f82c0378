package nodecmd

import (
	"os"
	"strings"

	"github.com/containerd/cgroups/v3"
)

// modeHint says what an operator can do when the cause is known: a pod in
// its own user namespace on a node with cgroup v1 hierarchies, where the
// runtime can delegate no writable cgroups for per-run limits.
func modeHint() string {
	if cgroups.Mode() == cgroups.Unified || !inUserNamespace() {
		return ""
	}
	return ". This node has cgroup v1 hierarchies: a pod in its own user namespace (the chart's nodeAgent.hostUsers: false) " +
		"gets no writable cgroups there for the per-run limits. Install the node-agent on such nodes with " +
		"nodeAgent.privileged=true and nodeAgent.hostUsers=true, or move the node to cgroup v2 (docs/install.md)"
}

// inUserNamespace reports whether this process runs in a user namespace
// other than the host's (whose uid map is the whole range, identity).
func inUserNamespace() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) != 3 || f[0] != "0" || f[1] != "0" || f[2] != "4294967295"
}
