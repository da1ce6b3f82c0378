package executor

import (
	"context"
	"errors"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// Sources is where an executor reads a run's fixture and selected Secret
// keys: on a cluster the controller, which serves them to the node-agent of
// the node the run is bound to while the run is active (runsource.Client);
// folders on a laptop (localrun.Sources).
type Sources interface {
	// Fixture reads the fixture the run names, checked against lim.
	Fixture(ctx context.Context, run *harnessv1.HarnessRun, lim fixture.Limits) (*fixture.Fixture, error)
	// SecretKey reads one key of a Secret in the run's namespace, one the
	// run selects.
	SecretKey(ctx context.Context, run *harnessv1.HarnessRun, ref harnessv1.SecretKeySelector) ([]byte, error)
}

// SigningKeySource is implemented by Sources that can give an operator's
// evidence signing key (on a cluster, through the controller while the run
// is active): it then signs the receipt instead of the node's key. nil, nil
// when none is configured.
type SigningKeySource interface {
	SigningKey(ctx context.Context, run *harnessv1.HarnessRun) (*evidence.Key, error)
}

// ErrSecretKey marks a Secret key that could not be read.
var ErrSecretKey = errors.New("secret key unavailable")
