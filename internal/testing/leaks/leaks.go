// Package leaks holds the goroutines a test's leak check must let live:
// those the code under test keeps for the process's life on purpose.
package leaks

import "go.uber.org/goleak"

// SandboxForker is the sandbox package's forker (sandbox/forker_linux.go):
// the thread that starts cgroup v1 sandboxes is kept for the process's
// life, since its children's parent-death signal is tied to it.
var SandboxForker = goleak.IgnoreAnyFunction("github.com/harnessfacts/harnessfacts/sandbox.(*forker).serve")
