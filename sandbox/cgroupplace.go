package sandbox

import (
	"fmt"
	"strings"
)

// AgentLeaf is the name of the node-agent's own leaf cgroup, made below the
// cgroup it starts in (its container's, or its systemd unit's) by
// PlaceNodeAgent.
const AgentLeaf = "agent"

// Placement says where PlaceNodeAgent put the node-agent and where the
// per-run cgroups are made. Directories are as this process sees them
// (inside a container, its cgroup mounts show its own cgroup as their root).
type Placement struct {
	// Version is the cgroup version in use: 1 (the memory and pids
	// hierarchies of a legacy or hybrid host) or 2; 0 where the OS has no
	// cgroups.
	Version int
	// Agent lists the node-agent's own leaf cgroup, one directory per
	// hierarchy (v1: memory and pids; v2: one); empty when the node-agent
	// stayed where it started.
	Agent []string
	// MemoryLimit is the hard memory limit of Agent in bytes; 0 for none.
	MemoryLimit int64
	// Runs lists the directories below which every per-run cgroup is made
	// ("harnessfacts/run-<random>" below each), one per hierarchy: beside
	// Agent, never below it, so that the runs' memory is never counted
	// against the node-agent's bound and the reverse.
	Runs []string

	// release undoes the move where the kernel allows it.
	release func() error
}

// String says where the node-agent and its runs' cgroups are, for a log line.
func (p Placement) String() string {
	if p.Version == 0 {
		return "no cgroups on this OS"
	}
	agent := "the node-agent stays in the cgroup it started in"
	if len(p.Agent) > 0 {
		agent = "the node-agent in " + strings.Join(p.Agent, ", ")
		if p.MemoryLimit > 0 {
			agent += fmt.Sprintf(" (memory limit %d MiB)", p.MemoryLimit>>20)
		} else {
			agent += " (no memory limit)"
		}
	}
	return fmt.Sprintf("cgroup v%d: %s; runs below %s", p.Version, agent, strings.Join(p.Runs, ", "))
}

// Release moves the node-agent back into the cgroup it started in and
// removes its leaf and the (empty) parent of its runs' cgroups, so that a
// node-agent that ends leaves no cgroup of its own behind. On cgroup v2 the
// kernel refuses the move back when controllers are enabled below that
// cgroup (the no-internal-processes rule); the leaf then stays until the
// cgroup it started in is removed (its container's, by the runtime). Call
// it last: runs started after it are made in no cgroup of this placement.
func (p Placement) Release() error {
	if p.release == nil {
		return nil
	}
	return p.release()
}
