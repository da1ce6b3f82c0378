package testing

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// FixtureConfigMap is the ConfigMap name in ns that kustomize's
// configMapGenerator makes of the fixture folder dir (flat keys, "/" as
// "__"), with the files the node-agent reads from a folder: no
// kustomization, sample runs or provider script.
func FixtureConfigMap(ns, name, dir string) (*corev1.ConfigMap, error) {
	f, err := fixture.FromDir(dir, fixture.Limits{})
	if err != nil {
		return nil, err
	}
	data := make(map[string]string, len(f.Files))
	for _, file := range f.Files {
		key, err := fixture.PathToKey(file.Path)
		if err != nil {
			return nil, err
		}
		data[key] = string(file.Data)
	}
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}, nil
}
