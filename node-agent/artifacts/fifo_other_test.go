//go:build !unix

package artifacts

import "testing"

func mkfifo(t *testing.T, _ string) {
	t.Skip("no FIFOs in this OS's file system")
}
