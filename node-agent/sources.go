package nodeagent

import (
	"context"
	"errors"
	"fmt"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/runsource"
)

// ClusterSources are the executor's Sources on a cluster. The node-agent has
// no right to read Secrets or ConfigMaps: it asks the controller, which
// serves a run's selected Secret keys and fixture ConfigMap only to the
// node-agent of the node the run is bound to, while its attempt runs
// (package runsource).
type ClusterSources struct {
	Controller *runsource.Client
}

// Fixture reads spec.fixture: inline, or the named ConfigMap.
func (s ClusterSources) Fixture(ctx context.Context, run *harnessv1.HarnessRun, lim fixture.Limits) (*fixture.Fixture, error) {
	src := run.Spec.Fixture
	switch {
	case src.Inline != nil:
		return fixture.FromInline(src.Inline.Files, lim)
	case src.ConfigMapRef != nil:
		cm, err := s.Controller.Fixture(ctx, runRef(run))
		if err != nil {
			return nil, fmt.Errorf("reading fixture ConfigMap %s/%s: %w", run.Namespace, src.ConfigMapRef.Name, err)
		}
		return fixture.FromConfigMap(cm.Data, cm.BinaryData, lim)
	}
	return nil, errors.New("the run names no fixture source")
}

// SecretKey reads one key of a Secret the run selects.
func (s ClusterSources) SecretKey(ctx context.Context, run *harnessv1.HarnessRun, ref harnessv1.SecretKeySelector) ([]byte, error) {
	v, err := s.Controller.SecretKey(ctx, runRef(run), ref.Name, ref.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: Secret %s/%s: %w", executor.ErrSecretKey, run.Namespace, ref.Name, err)
	}
	return v, nil
}

// SigningKey reads the operator's evidence signing key through the
// controller, while the run is active; nil when none is configured.
func (s ClusterSources) SigningKey(ctx context.Context, run *harnessv1.HarnessRun) (*evidence.Key, error) {
	pemBytes, err := s.Controller.SigningKey(ctx, runRef(run))
	if err != nil {
		return nil, fmt.Errorf("reading the operator's evidence signing key: %w", err)
	}
	if len(pemBytes) == 0 {
		return nil, nil
	}
	k, err := evidence.ParsePrivateKey(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("the operator's evidence signing key: %w", err)
	}
	return k, nil
}

// runRef names the attempt this node-agent claimed.
func runRef(run *harnessv1.HarnessRun) runsource.RunRef {
	return runsource.RunRef{Namespace: run.Namespace, Name: run.Name, UID: run.UID, Attempt: run.Status.Attempt}
}
