//go:build !linux

package sandbox

// runHelper: the helper processes are Linux's.
func runHelper() {}
