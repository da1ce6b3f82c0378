package executor

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/harnessfacts/harnessfacts/internal/testing/leaks"
)

// TestMain fails the package when a test leaves a goroutine behind (a relay,
// a proxy, an MCP server that outlives its attempt).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leaks.SandboxForker) }
