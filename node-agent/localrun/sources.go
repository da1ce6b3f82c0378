package localrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// Sources reads fixtures and secrets from folders, for
// `harnessfacts run` without a cluster: configMapRef NAME is the folder
// FixturesDir/NAME, and secretKeyRef NAME/KEY is the file SecretsDir/NAME/KEY
// (the layout of a Secret mounted as a volume).
type Sources struct {
	// FixturesDir holds fixture folders by name.
	FixturesDir string
	// FixtureDir, when set, is the fixture of every configMapRef (a run.yaml
	// kept in its fixture's folder).
	FixtureDir string
	// SecretsDir holds Secret folders by name, one file per key.
	SecretsDir string
}

// Fixture reads spec.fixture: inline, or the folder named by configMapRef.
func (s Sources) Fixture(_ context.Context, run *harnessv1.HarnessRun, lim fixture.Limits) (*fixture.Fixture, error) {
	src := run.Spec.Fixture
	switch {
	case src.Inline != nil:
		return fixture.FromInline(src.Inline.Files, lim)
	case src.ConfigMapRef != nil && s.FixtureDir != "":
		return fixture.FromDir(s.FixtureDir, lim)
	case src.ConfigMapRef != nil:
		if s.FixturesDir == "" {
			return nil, fmt.Errorf("the run names fixture %q: pass --fixtures DIR holding %s/fixture.yaml", src.ConfigMapRef.Name, src.ConfigMapRef.Name)
		}
		return fixture.FromDir(filepath.Join(s.FixturesDir, filepath.Base(src.ConfigMapRef.Name)), lim)
	}
	return nil, errors.New("the run names no fixture source")
}

// SecretKey reads SecretsDir/NAME/KEY.
func (s Sources) SecretKey(_ context.Context, _ *harnessv1.HarnessRun, ref harnessv1.SecretKeySelector) ([]byte, error) {
	if s.SecretsDir == "" {
		return nil, fmt.Errorf("%w: the run selects Secret %s key %s: pass --secrets DIR holding %s/%s", executor.ErrSecretKey, ref.Name, ref.Key, ref.Name, ref.Key)
	}
	// The schema already restricts names and keys; Base keeps a hand-written
	// run.yaml from reaching outside the folder all the same.
	p := filepath.Join(s.SecretsDir, filepath.Base(ref.Name), filepath.Base(ref.Key))
	v, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", executor.ErrSecretKey, err)
	}
	return v, nil
}
