package harbor

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// LabelFixtureSet is the label a suite selects its fixtures by (the one
// fixtures/suite uses).
const LabelFixtureSet = "harnessfacts.io/fixture-set"

// MaxFixturesPerSuite is what one HarnessSuite may select; more tasks are
// split over several suites.
const MaxFixturesPerSuite = 64

// SuiteOptions shape the HarnessSuite the import writes.
type SuiteOptions struct {
	// Name is the suite's name (more than 64 tasks: Name-1, Name-2, ...).
	Name string
	// Agents are the matrix's rows.
	Agents []harnessv1.SuiteAgent
	// Oracle adds the row "oracle" (adapter oracle), which runs each task's
	// solution/solve.sh instead of an agent.
	Oracle bool
	// Repeats and Parallelism are the suite's (0: the API's defaults).
	Repeats, Parallelism int32
	// Egress is the suite template's spec.network.egress (empty:
	// ProviderOnly, the API's default).
	Egress harnessv1.Egress
}

// Written is what Write made.
type Written struct {
	// Suites are the suites' names.
	Suites []string
	// Files are the files written, relative to the output folder.
	Files []string
}

// Write writes the fixtures and the suite into out (created if missing; a
// file that exists is replaced): out/<task>/{kustomization.yaml,
// fixture.yaml, tests/..., solution/...}, out/suite.yaml and
// out/kustomization.yaml, which `kubectl apply -k out` applies.
func Write(out string, tasks []*Task, so SuiteOptions) (*Written, error) {
	if len(tasks) == 0 {
		return nil, fmt.Errorf("no task to import")
	}
	if len(so.Agents) == 0 && !so.Oracle {
		return nil, fmt.Errorf("the suite needs at least one agent row (--agent, --agents-file) or the oracle (--oracle)")
	}
	if len(so.Agents) > 16-boolInt(so.Oracle) {
		return nil, fmt.Errorf("%d agent rows: a HarnessSuite has at most 16", len(so.Agents)+boolInt(so.Oracle))
	}
	seen := map[string]string{}
	for _, t := range tasks {
		if other, ok := seen[t.Name]; ok {
			return nil, fmt.Errorf("%s and %s would both be the fixture %q: give one of them another [task].name", other, t.Dir, t.Name)
		}
		seen[t.Name] = t.Dir
	}
	if so.Oracle {
		for _, t := range tasks {
			if !t.HasSolution {
				return nil, fmt.Errorf("--oracle: %s has no solution/solve.sh for the oracle to run", t.Dir)
			}
		}
	}
	sorted := append([]*Task(nil), tasks...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	w := &Written{}
	parts := (len(sorted) + MaxFixturesPerSuite - 1) / MaxFixturesPerSuite
	var resources []string
	for p := 0; p < parts; p++ {
		name := so.Name
		if parts > 1 {
			name = fmt.Sprintf("%s-%d", so.Name, p+1)
		}
		w.Suites = append(w.Suites, name)
		end := min(len(sorted), (p+1)*MaxFixturesPerSuite)
		for _, t := range sorted[p*MaxFixturesPerSuite : end] {
			files, err := writeTask(out, t, name)
			if err != nil {
				return nil, err
			}
			w.Files = append(w.Files, files...)
			resources = append(resources, t.Name)
		}
	}
	var suites []byte
	for _, name := range w.Suites {
		b, err := suiteYAML(name, so)
		if err != nil {
			return nil, err
		}
		suites = append(append(suites, "---\n"...), b...)
	}
	if err := writeFile(out, "suite.yaml", append([]byte(header), suites...), w); err != nil {
		return nil, err
	}
	k := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  append(resources, "suite.yaml"),
	}
	b, err := yaml.Marshal(k)
	if err != nil {
		return nil, err
	}
	if err := writeFile(out, "kustomization.yaml", append([]byte(header+"# kubectl apply -k "+out+"\n"), b...), w); err != nil {
		return nil, err
	}
	return w, nil
}

const header = "# Written by `harnessfacts import harbor` (docs/harbor.md).\n"

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// suiteYAML is one HarnessSuite: the agents (and the oracle) × the fixtures
// labelled with its name.
func suiteYAML(name string, so SuiteOptions) ([]byte, error) {
	agents := append([]harnessv1.SuiteAgent(nil), so.Agents...)
	if so.Oracle {
		agents = append(agents, harnessv1.SuiteAgent{Name: "oracle", Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterOracle}})
	}
	egress := so.Egress
	if egress == "" {
		egress = harnessv1.EgressProviderOnly
	}
	s := harnessv1.HarnessSuite{
		TypeMeta:   metav1.TypeMeta{APIVersion: harnessv1.GroupVersion.String(), Kind: "HarnessSuite"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: harnessv1.HarnessSuiteSpec{
			Revision: intstr.FromString("1"),
			Agents:   agents,
			Fixtures: harnessv1.SuiteFixtures{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelFixtureSet: name}}},
			Repeats:  so.Repeats, Parallelism: so.Parallelism,
			Template: harnessv1.SuiteRunTemplate{
				Network:   &harnessv1.NetworkSpec{Egress: egress},
				Isolation: &harnessv1.IsolationSpec{Policy: harnessv1.IsolationRequired},
			},
		},
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	// Drop the empty status and creationTimestamp a typed object marshals.
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	delete(m["metadata"].(map[string]any), "creationTimestamp")
	return yaml.Marshal(m)
}

// writeTask writes one task's folder: fixture.yaml, its files, and a
// kustomization that makes them the ConfigMap <task> labelled as a fixture
// of suite.
func writeTask(out string, t *Task, suite string) ([]string, error) {
	w := &Written{}
	dir := filepath.Join(out, t.Name)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	manifest, err := manifestYAML(t.Manifest)
	if err != nil {
		return nil, err
	}
	// The task's folder is quoted: its name is the data set's, and a
	// newline in it ended the comment and wrote keys of its own into the
	// manifest (verifier: showed the expected answers to every agent).
	manifest = append([]byte(fmt.Sprintf("%s# From the Harbor task %s.\n", header, strconv.Quote(t.Dir))), manifest...)
	all := map[string][]byte{fixture.ManifestName: manifest}
	for p, d := range t.Files {
		all[p] = d
	}
	total := 0
	for _, d := range all {
		total += len(d)
	}
	if total > maxConfigMapBytes {
		return nil, fmt.Errorf("%s: %d bytes of fixture (instruction, tests, solution) do not fit in a ConfigMap (at most %d): such a task needs a fixture source beyond ConfigMaps", t.Dir, total, maxConfigMapBytes)
	}
	paths := make([]string, 0, len(all))
	flat := true
	for p := range all {
		paths = append(paths, p)
		if _, ok := configMapKey(p); !ok {
			flat = false
		}
	}
	sort.Strings(paths)
	labels := map[string]string{"harnessfacts.io/fixture": "true", LabelFixtureSet: suite}
	for k, v := range t.Labels {
		labels[k] = v
	}
	gen := map[string]any{"name": t.Name, "options": map[string]any{"labels": labels}}
	if len(t.Annotations) > 0 {
		gen["options"].(map[string]any)["annotations"] = t.Annotations
	}
	var entries []string
	if flat {
		for _, p := range paths {
			if err := writeFile(dir, p, all[p], w); err != nil {
				return nil, err
			}
			k, _ := configMapKey(p)
			if k == p {
				entries = append(entries, p)
			} else {
				entries = append(entries, k+"="+p)
			}
		}
	} else {
		// A name a flat key cannot carry ("a__b", a space): the whole
		// fixture as one archive, the other form the fixture package reads.
		tgz, err := archive(all, paths)
		if err != nil {
			return nil, err
		}
		if err := writeFile(dir, "fixture.tar.gz", tgz, w); err != nil {
			return nil, err
		}
		entries = []string{"fixture.tar.gz"}
	}
	gen["files"] = entries
	k := map[string]any{
		"apiVersion":         "kustomize.config.k8s.io/v1beta1",
		"kind":               "Kustomization",
		"generatorOptions":   map[string]any{"disableNameSuffixHash": true},
		"configMapGenerator": []any{gen},
	}
	b, err := yaml.Marshal(k)
	if err != nil {
		return nil, err
	}
	if err := writeFile(dir, "kustomization.yaml", append([]byte(header), b...), w); err != nil {
		return nil, err
	}
	for i := range w.Files {
		w.Files[i] = filepath.ToSlash(filepath.Join(t.Name, w.Files[i]))
	}
	return w.Files, nil
}

// archive is the fixture as a gzip-compressed tar, deterministic (no times,
// no owners).
func archive(files map[string][]byte, paths []string) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, p := range paths {
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o644, Size: int64(len(files[p])), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[p]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeFile writes dir/rel (its folders made 0755), mode 0644: modes do not
// travel through a ConfigMap, fixture.yaml's executables carry them.
func writeFile(dir, rel string, data []byte, w *Written) error {
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return err
	}
	w.Files = append(w.Files, rel)
	return nil
}

// manifestYAML is fixture.yaml without the empty mcp: a Harbor task has
// no MCP setting of its own.
func manifestYAML(m fixture.Manifest) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	if mcp, ok := obj["mcp"].(map[string]any); ok && len(mcp) == 0 {
		delete(obj, "mcp")
	}
	return yaml.Marshal(obj)
}

// canonicalJSON is v as JSON with sorted keys (encoding/json sorts map
// keys), for an annotation.
func canonicalJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%q", fmt.Sprint(v))
	}
	return strings.TrimSpace(string(b))
}
