package install

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// manifest is a list of rendered objects, in the order they were rendered.
type manifest []*unstructured.Unstructured

// parseManifest splits a multi-document YAML stream into objects, skipping
// empty documents.
func parseManifest(data string) (manifest, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(data)))
	var m manifest
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj := map[string]any{}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, err
		}
		if len(obj) == 0 {
			continue
		}
		m = append(m, &unstructured.Unstructured{Object: obj})
	}
}

// find returns the object of that kind and name.
func (m manifest) find(kind, name string) (*unstructured.Unstructured, bool) {
	for _, o := range m {
		if o.GetKind() == kind && o.GetName() == name {
			return o, true
		}
	}
	return nil, false
}

// get returns the object of that kind and name, or fails the test.
func (m manifest) get(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	o, ok := m.find(kind, name)
	if !ok {
		t.Fatalf("the output has no %s %s; it has: %s", kind, name, strings.Join(m.ids(), ", "))
	}
	return o
}

// ids names every object as Kind/namespace/name, sorted.
func (m manifest) ids() []string {
	var ids []string
	for _, o := range m {
		ids = append(ids, id(o))
	}
	slices.Sort(ids)
	return ids
}

func id(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + "/" + o.GetName()
	}
	return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
}

// without returns the objects except those of the given kinds.
func (m manifest) without(kinds ...string) manifest {
	var out manifest
	for _, o := range m {
		if !slices.Contains(kinds, o.GetKind()) {
			out = append(out, o)
		}
	}
	return out
}

// only returns the objects of the given kinds.
func (m manifest) only(kinds ...string) manifest {
	var out manifest
	for _, o := range m {
		if slices.Contains(kinds, o.GetKind()) {
			out = append(out, o)
		}
	}
	return out
}

// yaml renders the objects back into one stream.
func (m manifest) yaml(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, o := range m {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	return b.String()
}

// as converts an object into a typed one.
func as[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &out, true); err != nil {
		t.Fatalf("%s does not convert to %T (a field unknown to the API?): %v", id(o), out, err)
	}
	return &out
}

// renderChart runs `helm template` on the chart with the values (YAML) and
// returns the objects, or helm's error.
func renderChart(t *testing.T, release, namespace, values string) (manifest, error) {
	t.Helper()
	args := []string{"template", release, filepath.Join(root, "charts", "harnessfacts"), "--namespace", namespace}
	if values != "" {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(f, []byte(values), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--values", f)
	}
	out, err := runCmd(helm, args...)
	if err != nil {
		return nil, err
	}
	return parseManifest(out)
}

// mustRender renders the chart or fails the test.
func mustRender(t *testing.T, release, namespace, values string) manifest {
	t.Helper()
	m, err := renderChart(t, release, namespace, values)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// kustomize runs `kubectl kustomize` on a directory of config/.
func kustomize(t *testing.T, dir string) manifest {
	t.Helper()
	out, err := runCmd(kubectl, "kustomize", filepath.Join(root, dir))
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
