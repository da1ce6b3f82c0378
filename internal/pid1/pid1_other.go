//go:build !linux

package pid1

import "errors"

// IsPID1 is false where there are no pid namespaces to be init of.
func IsPID1() bool { return false }

// Run is only for Linux.
func Run(string, []string, []string) (int, error) {
	return 1, errors.New("pid1: only on Linux")
}
