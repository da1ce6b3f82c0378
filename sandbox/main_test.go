package sandbox

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/harnessfacts/harnessfacts/internal/testing/leaks"
)

// Run copies output and watches deadlines in goroutines; none may outlive it.
func TestMain(m *testing.M) {
	runHelper()
	removeStaleTestCgroups()
	goleak.VerifyTestMain(m, leaks.SandboxForker, goleak.Cleanup(func(code int) {
		removeTestCgroupParent()
		os.Exit(code)
	}))
}
