package nodeagent

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// ClusterSources are the executor's Sources on a cluster. They read from the
// API server directly (never through a cache: a node-agent must not hold the
// cluster's Secrets or ConfigMaps).
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
		return nil, fmt.Errorf("%w: Secret %s/%s: %w", executor.ErrSecretKey, namespace, ref.Name, err)
	}
	v, ok := sec.Data[ref.Key]
	if !ok {
		return nil, fmt.Errorf("%w: Secret %s/%s has no key %q", executor.ErrSecretKey, namespace, ref.Name, ref.Key)
	}
	return v, nil
}
