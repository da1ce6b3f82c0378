//go:build !linux && !windows

package sandbox

import (
	"context"
	"fmt"
	"runtime"
)

// preflight reports that this OS has no sandbox mode; only the plain runner,
// which is not a sandbox, exists here.
func preflight(context.Context, Options) []Availability {
	return []Availability{{Mode: ModePlain, Available: true, Reason: fmt.Sprintf("not a sandbox; %s has no sandbox mode in this package", runtime.GOOS)}}
}

func newSandboxRunner(mode Mode, _ Options) (Runner, error) {
	return nil, fmt.Errorf("sandbox: mode %s is not available on %s", mode, runtime.GOOS)
}

// RecoverAbandoned has nothing to recover on this OS: the plain runner
// leaves no profile, grant or cgroup behind.
func RecoverAbandoned(Options, string) ([]string, error) { return nil, nil }
