//go:build unix

package sandboxinit

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: a relay
// or a forward that outlives its listener would, in the node-agent, outlive
// the run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
