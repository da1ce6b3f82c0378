//go:build !windows

package main

import (
	"fmt"
	"os"
	"syscall"
)

// run replaces this process with full: the same process ID, signals,
// descriptors and environment, so a controller or node-agent started as
// `harnessfacts ...` is PID 1 of its container and gets its signals itself.
func run(full string, args []string) int {
	err := syscall.Exec(full, append([]string{full}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "harnessfacts: running %s: %v\n", full, err)
	return 1
}
