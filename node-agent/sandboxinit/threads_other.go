//go:build !linux

package sandboxinit

// Tasks is what sandbox-init takes of the agent's process limit: a Job
// Object counts processes, and sandbox-init is one.
const Tasks = 1

// reserveThreads does nothing: only Linux counts a sandbox's threads
// against its process limit.
func reserveThreads(int) {}
