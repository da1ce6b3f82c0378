package localrun

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const runHead = `apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata:
  name: %NAME%
  namespace: %NS%
spec:
  agent: {adapter: exec, command: [sh, ../fixture/agent.sh]}
  fixture: {configMapRef: {name: fixture-hello}}
`

func readRun(t *testing.T, name, ns, spec string) error {
	t.Helper()
	p := filepath.Join(t.TempDir(), "run.yaml")
	text := strings.NewReplacer("%NAME%", name, "%NS%", ns).Replace(runHead) + spec
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadRunFile(context.Background(), p)
	return err
}

// TestReadRunFileAsTheAPIServer: run.yaml is read as the API server reads
// a request. Whole numbers are ints (a CEL rule comparing two limits once
// refused every run that set both: "expected int, got float64"), a key
// given twice is refused, and the metadata is checked (a name that is not
// a DNS subdomain, such as "../../etc", once ran, and named the evidence
// folder).
func TestReadRunFileAsTheAPIServer(t *testing.T) {
	if err := readRun(t, "hello", "default", "  limits: {episodeSeconds: 10, probeSeconds: 5}\n"); err != nil {
		t.Errorf("both limits set: %v", err)
	}
	for name, c := range map[string]struct{ name, ns, spec, want string }{
		"a probe longer than the episode": {"hello", "default", "  limits: {episodeSeconds: 5, probeSeconds: 10}\n", "limits.probeSeconds must not be longer than limits.episodeSeconds"},
		"a key twice":                     {"hello", "default", "  cancel: false\n  cancel: true\n", `key "cancel" already set`},
		"a path for a name":               {"../../../../tmp/x", "default", "", "metadata.name: Invalid value"},
		"upper case and _":                {"Hello_World", "default", "", "metadata.name: Invalid value"},
		"300 characters":                  {strings.Repeat("a", 300), "default", "", "metadata.name: Invalid value"},
		"beyond ASCII":                    {"héllo", "default", "", "metadata.name: Invalid value"},
		"a bad namespace":                 {"hello", "Bad/NS", "", "metadata.namespace: Invalid value"},
		// One HarnessRun per file: a second document was dropped without a
		// word (a Secret beside the run, or a second run).
		"a second document": {"hello", "default", "---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n", "holds 2 YAML documents"},
	} {
		err := readRun(t, c.name, c.ns, c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, c.want)
		}
	}
}

// TestReadRunFileNamesAnotherKind: a HarnessSuite (or any kind but
// HarnessRun) is refused by its kind, not by the fields a run would have.
func TestReadRunFileNamesAnotherKind(t *testing.T) {
	p := filepath.Join(t.TempDir(), "suite.yaml")
	if err := os.WriteFile(p, []byte("apiVersion: harnessfacts.io/v1alpha1\nkind: HarnessSuite\nmetadata: {name: s}\nspec: {agents: []}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRunFile(context.Background(), p); err == nil || !strings.Contains(err.Error(), "holds a HarnessSuite, not a HarnessRun") {
		t.Errorf("%v, want the kind named", err)
	}
	// A leading comment-only document is no second one.
	p = filepath.Join(t.TempDir(), "run.yaml")
	text := "# a comment\n---\n" + strings.NewReplacer("%NAME%", "hello", "%NS%", "default").Replace(runHead)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRunFile(context.Background(), p); err != nil {
		t.Errorf("a run after a comment-only document: %v", err)
	}
}
