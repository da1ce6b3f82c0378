package testing

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// FixtureConfigMap is the ConfigMap name, in ns, that `kubectl apply -k dir`
// makes of the fixture folder dir: it runs kustomize over the folder's own
// kustomization.yaml, as a user does. It is built by kustomize, not by the
// node-agent's fixture package, so a test that reads it back through that
// package checks the package against what users deploy.
func FixtureConfigMap(ns, name, dir string) (*corev1.ConfigMap, error) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	var names []string
	for _, r := range res.Resources() {
		if r.GetKind() != "ConfigMap" {
			continue
		}
		names = append(names, r.GetName())
		if r.GetName() != name {
			continue
		}
		b, err := r.AsYAML()
		if err != nil {
			return nil, err
		}
		cm := &corev1.ConfigMap{}
		if err := yaml.UnmarshalStrict(b, cm); err != nil {
			return nil, fmt.Errorf("kustomize %s: ConfigMap %s: %w", dir, name, err)
		}
		cm.Namespace = ns
		return cm, nil
	}
	if len(names) == 0 {
		return nil, errors.New("kustomize " + dir + ": no ConfigMap")
	}
	return nil, fmt.Errorf("kustomize %s: no ConfigMap %q, only %q", dir, name, names)
}
