package sandbox

import (
	"testing"

	"go.uber.org/goleak"
)

// Run copies output and watches deadlines in goroutines; none may outlive it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
