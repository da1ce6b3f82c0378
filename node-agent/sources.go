package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// Sources is where an executor reads a run's fixture and selected Secret
// keys: the API server on a cluster, folders on a laptop.
type Sources interface {
	// Fixture reads the fixture the run names, checked against lim.
	Fixture(ctx context.Context, run *harnessv1.HarnessRun, lim fixture.Limits) (*fixture.Fixture, error)
	// SecretKey reads one key of a Secret in namespace.
	SecretKey(ctx context.Context, namespace string, ref harnessv1.SecretKeySelector) ([]byte, error)
}

// ErrSecretKey marks a Secret key that could not be read.
var ErrSecretKey = errors.New("secret key unavailable")

// ClusterSources reads from the API server directly (never through a
// cache: a node-agent must not hold the cluster's Secrets or ConfigMaps).
type ClusterSources struct {
	Reader client.Reader
}

// Fixture reads spec.fixture: inline, or the named ConfigMap.
func (s ClusterSources) Fixture(ctx context.Context, run *harnessv1.HarnessRun, lim fixture.Limits) (*fixture.Fixture, error) {
	src := run.Spec.Fixture
	switch {
	case src.Inline != nil:
		return fixture.FromInline(src.Inline.Files, lim)
	case src.ConfigMapRef != nil:
		cm := &corev1.ConfigMap{}
		key := types.NamespacedName{Namespace: run.Namespace, Name: src.ConfigMapRef.Name}
		if err := s.Reader.Get(ctx, key, cm); err != nil {
			return nil, fmt.Errorf("reading fixture ConfigMap %s: %w", key, err)
		}
		return fixture.FromConfigMap(cm.Data, cm.BinaryData, lim)
	}
	return nil, errors.New("the run names no fixture source")
}

// SecretKey reads one key of a Secret.
func (s ClusterSources) SecretKey(ctx context.Context, namespace string, ref harnessv1.SecretKeySelector) ([]byte, error) {
	sec := &corev1.Secret{}
	if err := s.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, sec); err != nil {
		return nil, fmt.Errorf("%w: Secret %s/%s: %w", ErrSecretKey, namespace, ref.Name, err)
	}
	v, ok := sec.Data[ref.Key]
	if !ok {
		return nil, fmt.Errorf("%w: Secret %s/%s has no key %q", ErrSecretKey, namespace, ref.Name, ref.Key)
	}
	return v, nil
}

// LocalSources reads fixtures and secrets from folders, for
// `harnessfacts run` without a cluster: configMapRef NAME is the folder
// FixturesDir/NAME, and secretKeyRef NAME/KEY is the file SecretsDir/NAME/KEY
// (the layout of a Secret mounted as a volume).
type LocalSources struct {
	// FixturesDir holds fixture folders by name.
	FixturesDir string
	// FixtureDir, when set, is the fixture of every configMapRef (a run.yaml
	// kept in its fixture's folder).
	FixtureDir string
	// SecretsDir holds Secret folders by name, one file per key.
	SecretsDir string
}

// Fixture reads spec.fixture: inline, or the folder named by configMapRef.
func (s LocalSources) Fixture(_ context.Context, run *harnessv1.HarnessRun, lim fixture.Limits) (*fixture.Fixture, error) {
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
func (s LocalSources) SecretKey(_ context.Context, _ string, ref harnessv1.SecretKeySelector) ([]byte, error) {
	if s.SecretsDir == "" {
		return nil, fmt.Errorf("%w: the run selects Secret %s key %s: pass --secrets DIR holding %s/%s", ErrSecretKey, ref.Name, ref.Key, ref.Name, ref.Key)
	}
	// The schema already restricts names and keys; Base keeps a hand-written
	// run.yaml from reaching outside the folder all the same.
	p := filepath.Join(s.SecretsDir, filepath.Base(ref.Name), filepath.Base(ref.Key))
	v, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSecretKey, err)
	}
	return v, nil
}
