//go:build !linux

package spawn

import (
	"fmt"
	"os"
)

// Serve is for Linux's cgroup v1 hosts only.
func Serve() int {
	fmt.Fprintln(os.Stderr, Command+": only on Linux")
	return 2
}
