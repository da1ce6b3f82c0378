package harbor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// makeTask writes a Harbor task folder made up for the test: files by
// path (a path ending in "*" is written executable, without the star).
func makeTask(t *testing.T, name string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	for p, content := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, "*") {
			p, mode = strings.TrimSuffix(p, "*"), 0o755
		}
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A task in the schema-1.0 layout, with every field the docs list.
const fullToml = `version = "1.0"
source = "made-up-bench"

[metadata]
author_name = "Test Author"
author_email = "author@example.test"
difficulty = "medium"
category = "file-operations"
tags = ["shell", "text"]

[verifier]
timeout_sec = 90.5
env = { EXPECTED = "it's 3", MODE = "strict" }

[agent]
timeout_sec = 300.0

[environment]
build_timeout_sec = 600.0
docker_image = "registry.example.test/tasks/count-words:v1@` + digest + `"
cpus = 2
memory_mb = 4096
storage_mb = 10240
allow_internet = false
`

func fullTask(t *testing.T) string {
	return makeTask(t, "count-words", map[string]string{
		"instruction.md":         "Count the words in /app/input.txt and write the number to /app/count.txt.\n",
		"task.toml":              fullToml,
		"environment/Dockerfile": "FROM debian:trixie-slim\nWORKDIR /app\n",
		"tests/test.sh*":         "#!/bin/bash\npytest /tests/test_outputs.py && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
		"tests/test_outputs.py":  "def test_count():\n    assert open('/app/count.txt').read().strip() == '3'\n",
		"tests/helper.sh*":       "#!/bin/sh\ntrue\n",
		"solution/solve.sh":      "#!/bin/bash\nwc -w < /app/input.txt > /app/count.txt\n",
	})
}

func TestReadMapsEveryDocumentedField(t *testing.T) {
	dir := fullTask(t)
	task, err := Read(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mem, disk := resource.MustParse("4Gi"), resource.MustParse("10Gi")
	want := fixture.Manifest{
		Prompt: "Count the words in /app/input.txt and write the number to /app/count.txt.\n",
		Checks: []fixture.Check{{Name: CheckName, Shell: "export EXPECTED='it'\\''s 3'\nexport MODE='strict'\nexec \"$HARNESSFACTS_TESTS/test.sh\""}},
		// test.sh always; helper.sh and solve.sh: the first by its mode on
		// disk, the second as the solution's command.
		Executables: []string{"solution/solve.sh", "tests/helper.sh", "tests/test.sh"},
		Environment: &fixture.Environment{Image: "registry.example.test/tasks/count-words:v1@" + digest},
		Solution:    &fixture.Solution{Command: "solution/solve.sh"},
		Limits:      &harnessv1.Limits{EpisodeSeconds: 300, ProbeSeconds: 91, Memory: &mem, Disk: &disk},
	}
	if d := cmp.Diff(want, task.Manifest); d != "" {
		t.Errorf("manifest (-want +got):\n%s", d)
	}
	if task.Name != "count-words" || task.Image == "" || task.BuildContext != "" || !task.HasSolution || task.AllowInternet {
		t.Errorf("task = name %q image %q build %q solution %v internet %v", task.Name, task.Image, task.BuildContext, task.HasSolution, task.AllowInternet)
	}
	if d := cmp.Diff(map[string]string{LabelDifficulty: "medium", LabelCategory: "file-operations"}, task.Labels); d != "" {
		t.Errorf("labels (-want +got):\n%s", d)
	}
	wantAnn := map[string]string{
		AnnotationSchema:   "1.0",
		AnnotationSource:   "made-up-bench",
		AnnotationMetadata: `{"author_email":"author@example.test","author_name":"Test Author","category":"file-operations","difficulty":"medium","tags":["shell","text"]}`,
	}
	if d := cmp.Diff(wantAnn, task.Annotations); d != "" {
		t.Errorf("annotations (-want +got):\n%s", d)
	}
	// The fields with no HarnessFacts counterpart are each named.
	joined := strings.Join(task.Warnings, "\n")
	for _, w := range []string{"environment.build_timeout_sec", "environment.cpus = 2", "must hold no secret"} {
		if !strings.Contains(joined, w) {
			t.Errorf("no warning about %s in:\n%s", w, joined)
		}
	}
	if len(task.Warnings) != 3 {
		t.Errorf("%d warnings, want 3:\n%s", len(task.Warnings), joined)
	}
	if d := cmp.Diff([]string{"tests/helper.sh", "tests/test.sh", "tests/test_outputs.py", "solution/solve.sh"}, keys(task.Files), sortStrings); d != "" {
		t.Errorf("files (-want +got):\n%s", d)
	}
}

func TestReadTheNewerLayoutAndDeprecatedSizes(t *testing.T) {
	dir := makeTask(t, "folder-name", map[string]string{
		"instruction.md": "Do it.",
		"task.toml": `schema_version = "1.1"
[task]
name = "made-up-org/Fix The_Build"
description = "A short description"
authors = [{ name = "A. Author", email = "a@example.test" }]
keywords = ["build"]
[metadata]
difficulty_explanation = "trivial"
[agent]
timeout_sec = 120.0
user = "agent"
[verifier]
timeout_sec = 600.0
[environment]
memory = "512M"
storage = "2G"
docker_image = "registry.example.test/fix:latest"
`,
		"tests/test.sh": "exit 0",
	})
	task, err := Read(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if task.Name != "made-up-org-fix-the-build" || task.Annotations[AnnotationTask] != "made-up-org/Fix The_Build" {
		t.Errorf("name %q, annotation %q", task.Name, task.Annotations[AnnotationTask])
	}
	l := task.Manifest.Limits
	if l.EpisodeSeconds != 120 || l.ProbeSeconds != 120 || l.Memory.String() != "512Mi" || l.Disk.String() != "2Gi" {
		t.Errorf("limits = %+v", l)
	}
	if !strings.Contains(task.Annotations[AnnotationMetadata], `"authors":[{"Name":"A. Author","Email":"a@example.test"}]`) &&
		!strings.Contains(task.Annotations[AnnotationMetadata], `"authors":[{"name"`) {
		t.Errorf("metadata annotation lacks the authors: %s", task.Annotations[AnnotationMetadata])
	}
	joined := strings.Join(task.Warnings, "\n")
	for _, w := range []string{"verifier.timeout_sec (600 s) is longer than agent.timeout_sec (120 s)", "agent.user"} {
		if !strings.Contains(joined, w) {
			t.Errorf("no warning %q in:\n%s", w, joined)
		}
	}
	// A tag alone cannot be kept: the placeholder, and a build hint.
	if !strings.HasPrefix(task.Manifest.Environment.Image, PlaceholderPrefix) || !strings.Contains(task.Manifest.Environment.Image, "not pinned by digest") {
		t.Errorf("environment.image = %q, want the placeholder", task.Manifest.Environment.Image)
	}
	if !task.AllowInternet {
		t.Error("allow_internet unset must read as Harbor's default, true")
	}
}

func TestUnknownFieldsAreWarnedAbout(t *testing.T) {
	dir := makeTask(t, "t", map[string]string{
		"instruction.md": "Do it.",
		"task.toml":      "version = \"1.0\"\nnew_top = 1\n[environment]\nfancy = true\ndocker_image = \"r.example.test/x@" + digest + "\"\n[environment.extra]\na = 1\n[brand_new]\nx = 1\n[metadata]\nanything = { goes = 1 }\n",
		"tests/test.sh":  "exit 0",
	})
	task, err := Read(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var unknown []string
	for _, w := range task.Warnings {
		if strings.Contains(w, "is not a field this importer knows") {
			unknown = append(unknown, strings.Fields(w)[1])
		}
	}
	if d := cmp.Diff([]string{"brand_new", "environment.extra", "environment.fancy", "new_top"}, unknown); d != "" {
		t.Errorf("unknown fields warned about (-want +got):\n%s\nall: %q", d, task.Warnings)
	}
}

func TestADockerfileOnlyTaskGetsAPlaceholderTheFixtureRefuses(t *testing.T) {
	dir := makeTask(t, "build-me", map[string]string{
		"instruction.md":         "Do it.",
		"environment/Dockerfile": "FROM scratch\n",
		"tests/test.sh":          "exit 0",
	})
	task, err := Read(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if task.BuildContext != filepath.Join(dir, "environment") || task.Image != "" {
		t.Errorf("build context %q image %q", task.BuildContext, task.Image)
	}
	out := t.TempDir()
	if _, err := Write(out, []*Task{task}, SuiteOptions{Name: "s", Agents: []harnessv1.SuiteAgent{{Name: "claude", Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterClaudeCode}}}}); err != nil {
		t.Fatal(err)
	}
	cm, err := hftesting.FixtureConfigMap("ns", "build-me", out)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fixture.FromConfigMap(cm.Data, cm.BinaryData, fixture.Limits{})
	if !errors.Is(err, fixture.ErrInvalidManifest) || !strings.Contains(err.Error(), PlaceholderPrefix+" build-me") || !strings.Contains(err.Error(), "pinned by digest") {
		t.Errorf("the placeholder fixture: %v, want ErrInvalidManifest quoting the placeholder", err)
	}
	if cm.Annotations[AnnotationDockerfile] != "environment/Dockerfile" {
		t.Errorf("annotations %v", cm.Annotations)
	}

	// The image built and pushed for it, given by task name, replaces it.
	ref := "registry.example.test/build-me@" + digest
	task, err = Read(dir, Options{Images: map[string]string{"build-me": ref}})
	if err != nil || task.Manifest.Environment.Image != ref || task.BuildContext != "" {
		t.Fatalf("with --image: %v, %+v", err, task)
	}
	if _, err := Read(dir, Options{Images: map[string]string{"build-me": "registry.example.test/build-me:v1"}}); err == nil || !strings.Contains(err.Error(), "not pinned by digest") {
		t.Errorf("a tag given for a task: %v", err)
	}
}

func TestTasksHarnessFactsCannotRunAreRefused(t *testing.T) {
	base := map[string]string{"instruction.md": "Do it.", "tests/test.sh": "exit 0", "environment/Dockerfile": "FROM scratch\n"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range base {
			m[a] = b
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for name, tc := range map[string]struct {
		files map[string]string
		want  string
	}{
		"no instruction":      {with("instruction.md", ""), "instruction.md"},
		"empty prompt":        {with("instruction.md", " \n"), "instruction.md is empty"},
		"a NUL in the prompt": {with("instruction.md", "do it\x00--share-net\n"), "instruction.md holds a NUL byte"},
		"no test.sh":          {with("tests/test.sh", ""), "tests/test.sh"},
		"multi-step":          {with("task.toml", "[[steps]]\nname = \"one\"\n"), "multi-step"},
		"windows":             {with("task.toml", "[environment]\nos = \"windows\"\n"), "Linux"},
		"bad toml":            {with("task.toml", "[agent\n"), "task.toml line 1"},
		"bad verifier env":    {with("task.toml", "[verifier]\nenv = { \"A B\" = \"x\" }\n"), "not an environment variable name"},
		"harness variable":    {with("task.toml", "[verifier]\nenv = { HARNESSFACTS_TESTS = \"/x\" }\n"), "harness's own"},
	} {
		dir := makeTask(t, "task", tc.files)
		if _, err := Read(dir, Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
	// A symbolic link in tests/ is refused, not followed.
	dir := makeTask(t, "task", base)
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "tests", "passwd")); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir, Options{}); err == nil || !strings.Contains(err.Error(), "tests/passwd is not a regular file") {
		t.Errorf("a link in tests/: %v", err)
	}
}

// The whole round: the written folder, rendered by kustomize as `kubectl
// apply -k` does, read back by the node-agent's fixture package; tests/ and
// solution/ are in no agent's run dir; the suite is a valid HarnessSuite.
func TestATaskWithoutEnvironmentRunsOnTheNodesRoot(t *testing.T) {
	task, err := Read(makeTask(t, "bare", map[string]string{"instruction.md": "x", "tests/test.sh": "exit 0"}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if task.Manifest.Environment != nil || task.BuildContext != "" || !strings.Contains(strings.Join(task.Warnings, "\n"), "node's own root") {
		t.Errorf("environment %+v, build %q, warnings %q", task.Manifest.Environment, task.BuildContext, task.Warnings)
	}
}

// TestATaskFoldersNameWritesNothingIntoTheManifest: a downloaded data
// set names its task folders; one named "task\nverifier: shown\n#" ended
// the manifest's comment line and set verifier: shown, so the hidden
// tests/ (the expected answers) were given to every agent.
func TestATaskFoldersNameWritesNothingIntoTheManifest(t *testing.T) {
	task, err := Read(makeTask(t, "task\nverifier: shown\n#", map[string]string{
		"instruction.md": "Do it.", "tests/test.sh": "exit 0", "tests/expected.txt": "the answer"}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	if _, err := Write(out, []*Task{task}, SuiteOptions{Name: "s",
		Agents: []harnessv1.SuiteAgent{{Name: "a", Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}}}}}); err != nil {
		t.Fatal(err)
	}
	fix, err := fixture.FromDir(filepath.Join(out, task.Name), fixture.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if fix.Manifest.Verifier != "" || !fix.CheckOnly("tests/expected.txt") {
		t.Errorf("verifier %q; tests/expected.txt hidden from the agent: %v", fix.Manifest.Verifier, fix.CheckOnly("tests/expected.txt"))
	}
}

func TestWrittenFixturesRoundTripThroughKustomize(t *testing.T) {
	a, err := Read(fullTask(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Read(makeTask(t, "odd-names", map[string]string{
		"instruction.md":          "Do it.",
		"task.toml":               "[environment]\ndocker_image = \"r.example.test/x@" + digest + "\"\n",
		"tests/test.sh":           "exit 0",
		"tests/data__v2.txt":      "a name a flat ConfigMap key cannot carry",
		"solution/solve.sh":       "true",
		"solution/with space.txt": "x",
	}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	w, err := Write(out, []*Task{a, b}, SuiteOptions{Name: "tb", Oracle: true, Repeats: 3,
		Agents: []harnessv1.SuiteAgent{{Name: "scripted", Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"sh", "-c", "true"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"tb"}, w.Suites); d != "" {
		t.Errorf("suites: %s", d)
	}
	for _, tc := range []struct{ name, archive string }{{"count-words", ""}, {"odd-names", "fixture.tar.gz"}} {
		cm, err := hftesting.FixtureConfigMap("ns", tc.name, out)
		if err != nil {
			t.Fatal(err)
		}
		if cm.Labels["harnessfacts.io/fixture"] != "true" || cm.Labels[LabelFixtureSet] != "tb" {
			t.Errorf("%s labels %v", tc.name, cm.Labels)
		}
		if tc.archive != "" {
			if _, ok := cm.BinaryData[tc.archive]; !ok || len(cm.Data) != 0 {
				t.Errorf("%s: want the archive form, got data keys %v", tc.name, keys(byteMap(cm.Data)))
			}
		} else if _, ok := cm.Data["tests__test.sh"]; !ok {
			t.Errorf("%s: no tests__test.sh key in %v", tc.name, keys(byteMap(cm.Data)))
		}
		fix, err := fixture.FromConfigMap(cm.Data, cm.BinaryData, fixture.Limits{})
		if err != nil {
			t.Fatalf("%s: the node-agent refuses the imported fixture: %v", tc.name, err)
		}
		d, err := fix.Materialize(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		for _, hidden := range []string{"tests", "solution"} {
			if _, err := os.Lstat(d.Join("fixture", hidden)); !os.IsNotExist(err) {
				t.Errorf("%s: %s/ is in an agent's run dir (%v)", tc.name, hidden, err)
			}
		}
		tests, err := fix.MaterializeChecks(d)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(filepath.Join(tests, "test.sh")); err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("%s: tests/test.sh for the checks: %v %v", tc.name, st, err)
		}
		solve, err := fix.MaterializeSolution(d)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(solve); err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("%s: the oracle's solve.sh: %v %v", tc.name, st, err)
		}
		if err := d.Remove(); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(filepath.Join(out, "suite.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var suite harnessv1.HarnessSuite
	if err := yaml.UnmarshalStrict([]byte(strings.TrimPrefix(string(raw[strings.Index(string(raw), "---\n"):]), "---\n")), &suite); err != nil {
		t.Fatalf("suite.yaml: %v\n%s", err, raw)
	}
	if suite.Name != "tb" || len(suite.Spec.Agents) != 2 || suite.Spec.Agents[1].Agent.Adapter != harnessv1.AdapterOracle ||
		suite.Spec.Repeats != 3 || suite.Spec.Fixtures.Selector.MatchLabels[LabelFixtureSet] != "tb" ||
		suite.Spec.Template.Network.Egress != harnessv1.EgressProviderOnly || suite.Spec.Template.Isolation.Policy != harnessv1.IsolationRequired {
		t.Errorf("suite = %+v", suite.Spec)
	}
}

func TestWriteRefusesWhatCannotBeApplied(t *testing.T) {
	a, err := Read(fullTask(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	noSolution, err := Read(makeTask(t, "plain", map[string]string{"instruction.md": "x", "tests/test.sh": "exit 0", "environment/Dockerfile": "FROM scratch"}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	twin, err := Read(fullTask(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	agent := []harnessv1.SuiteAgent{{Name: "c", Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex}}}
	for name, tc := range map[string]struct {
		tasks []*Task
		so    SuiteOptions
		want  string
	}{
		"no agent":                {[]*Task{a}, SuiteOptions{Name: "s"}, "at least one agent"},
		"twice the name":          {[]*Task{a, twin}, SuiteOptions{Name: "s", Agents: agent}, "would both be the fixture"},
		"oracle without solution": {[]*Task{a, noSolution}, SuiteOptions{Name: "s", Oracle: true}, "no solution/solve.sh"},
	} {
		if _, err := Write(t.TempDir(), tc.tasks, tc.so); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	huge := makeTask(t, "huge", map[string]string{"instruction.md": "x", "tests/test.sh": "exit 0", "environment/Dockerfile": "FROM scratch", "tests/blob": strings.Repeat("x", 1100<<10)})
	if _, err := Read(huge, Options{}); err == nil || !strings.Contains(err.Error(), "tests/blob is 1126400 bytes") {
		t.Errorf("a file too big for a ConfigMap: %v", err)
	}
	big := makeTask(t, "big", map[string]string{"instruction.md": "x", "tests/test.sh": "exit 0", "environment/Dockerfile": "FROM scratch",
		"tests/blob1": strings.Repeat("x", 600<<10), "solution/solve.sh": "true", "solution/blob2": strings.Repeat("y", 600<<10)})
	task, err := Read(big, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Write(t.TempDir(), []*Task{task}, SuiteOptions{Name: "s", Agents: agent}); err == nil || !strings.Contains(err.Error(), "do not fit in a ConfigMap") {
		t.Errorf("a task too big for a ConfigMap: %v", err)
	}
}

func TestMoreThan64TasksAreSplitOverSuites(t *testing.T) {
	var tasks []*Task
	for i := 0; i < 65; i++ {
		task, err := Read(makeTask(t, "t"+strings.Repeat("x", i%3)+string(rune('a'+i%26))+string(rune('a'+i/26)), map[string]string{"instruction.md": "x", "tests/test.sh": "exit 0", "environment/Dockerfile": "FROM scratch"}), Options{})
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, task)
	}
	w, err := Write(t.TempDir(), tasks, SuiteOptions{Name: "tb", Agents: []harnessv1.SuiteAgent{{Name: "c", Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex}}}})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"tb-1", "tb-2"}, w.Suites); d != "" {
		t.Errorf("suites: %s", d)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func byteMap(m map[string]string) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out
}

var sortStrings = cmp.Transformer("sort", func(in []string) []string {
	out := append([]string(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
})
