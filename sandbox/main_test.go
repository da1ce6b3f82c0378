package sandbox

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// testCgroupParent holds the per-run cgroups of these tests, apart from
// those of other test packages running at the same time, so that the checks
// for leftover cgroups see only this package's.
var testCgroupParent = fmt.Sprintf("harnessfacts-test-%d", os.Getpid())

// Run copies output and watches deadlines in goroutines; none may outlive it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		removeTestCgroupParent()
		os.Exit(code)
	}))
}
