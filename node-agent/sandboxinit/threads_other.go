//go:build !linux

package sandboxinit

// reserveThreads does nothing: only Linux counts a sandbox's threads
// against its process limit.
func reserveThreads(int) {}
