//go:build linux

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// TestHarborTaskImportedAndRunThroughASuite writes a task folder in Harbor's
// format (instruction.md, task.toml, tests/test.sh writing a reward,
// solution/solve.sh), imports it with `harnessfacts import harbor`, applies
// the kustomization, and runs the suite through the controller and this
// node's node-agent in bubblewrap: an exec agent that hunts for the hidden
// tests and the solution (and finds neither, though the same search finds
// its own file), a lazy one, and the oracle. The verifier's reward lands in
// status and in every form of `harnessfacts report`.
//
// The task names no environment image: it runs on the node's root, where a
// check writes its reward to $HARNESSFACTS_REWARD_DIR (there is no
// /logs/verifier to bind over); test/agents/environment_test.go shows the
// same verifier path in an image.
func TestHarborTaskImportedAndRunThroughASuite(t *testing.T) {
	ns := newNamespace(t, "e2e-harbor")
	tag := randomHex(t)
	task := filepath.Join(t.TempDir(), "reverse-word")
	expected := "expected-" + tag + ".txt"
	for p, content := range map[string]string{
		"instruction.md": "Write the word \"harbor\" spelled backwards, alone on one line, into answer.txt.\n",
		"task.toml": `version = "1.0"
[metadata]
author_name = "HarnessFacts e2e"
difficulty = "easy"
category = "text"
[verifier]
timeout_sec = 30.0
[agent]
timeout_sec = 60.0
[environment]
cpus = 1
memory_mb = 1024
`,
		// The hidden verifier: its expectation, and a marker the agent
		// greps for.
		"tests/" + expected: "robrah\nHIDDEN-EXPECTATION-MARKER\n",
		"tests/test.sh": `#!/bin/sh
out="${HARNESSFACTS_REWARD_DIR:-/logs/verifier}"
want="$(head -n 1 "$(dirname "$0")/` + expected + `")"
if [ "$(cat answer.txt 2>/dev/null)" = "$want" ]; then echo 1 > "$out/reward.txt"; exit 0; fi
echo 0 > "$out/reward.txt"
exit 1
`,
		"solution/solve.sh": "#!/bin/sh\necho robrah > answer.txt\n",
	} {
		full := filepath.Join(task, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The prober looks for the verifier part and the solution where they
	// would be (the run dir, /tmp, /tests, /solution, /logs) by name and
	// by content, and prints what it saw; a file of its own, planted
	// first, is the control that the search works. The marker is split
	// so that its own command line holds no copy of it.
	probe := `set -u
echo PROBE-BEGIN
echo "HARNESSFACTS_TESTS=${HARNESSFACTS_TESTS:-unset}"
touch probe-control-` + tag + `
for d in .. /tmp /tests /solution /logs "$HOME"; do [ -e "$d" ] && find "$d" 2>/dev/null; done | sort -u > ../tmp/seen.txt
grep -E 'test\.sh|solve\.sh|expected-|fixture\.yaml' ../tmp/seen.txt | sed 's/^/SEEN /'
grep -E 'probe-control-' ../tmp/seen.txt | sed 's/^/CONTROL /'
m=HIDDEN-EXPECTATION; m="$m-MARKER"
grep -rl "$m" .. /tmp 2>/dev/null | sed 's/^/SEEN-CONTENT /'
echo PROBE-END
rm probe-control-` + tag + `
echo robrah > answer.txt
`
	agents := "- name: prober\n  agent:\n    adapter: exec\n    command: [sh, -c, " + yamlQuote(probe) + "]\n" +
		"- name: lazy\n  agent:\n    adapter: exec\n    command: [sh, -c, \"echo I did nothing\"]\n"
	dir := t.TempDir()
	agentsFile := filepath.Join(dir, "agents.yaml")
	if err := os.WriteFile(agentsFile, []byte(agents), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "imported")
	imp := exec.Command(binary, "import", "harbor", task, "-o", out, "--agents-file", agentsFile, "--oracle", "--suite", "tb", "--repeats", "2")
	var stderr bytes.Buffer
	imp.Stderr = &stderr
	if err := imp.Run(); err != nil {
		t.Fatalf("import harbor: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"runs on the node's own root file system", "environment.cpus = 1 is not applied"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the import did not say %q:\n%s", want, stderr.String())
		}
	}

	// kubectl apply -k, into the test's namespace.
	rendered, err := exec.Command(filepath.Join(env.Assets, "kubectl"), "kustomize", out).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", out, err)
	}
	ctx := context.Background()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		obj.SetNamespace(ns)
		if obj.GetKind() == "HarnessSuite" {
			if err := unstructured.SetNestedStringMap(obj.Object, map[string]string{mainNodeLabel: "main"}, "spec", "template", "nodeSelector"); err != nil {
				t.Fatal(err)
			}
		}
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}

	suite := &harnessv1.HarnessSuite{}
	deadline := time.Now().Add(4 * time.Minute)
	for {
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "tb"}, suite); err != nil {
			t.Fatal(err)
		}
		if meta.IsStatusConditionTrue(suite.Status.Conditions, harnessv1.SuiteConditionComplete) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("suite did not complete: progress %s counts %+v conditions %+v", suite.Status.Progress, suite.Status.Counts, suite.Status.Conditions)
		}
		time.Sleep(250 * time.Millisecond)
	}
	runs := &harnessv1.HarnessRunList{}
	if err := k8s.List(ctx, runs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(runs.Items) != 6 {
		t.Fatalf("%d runs, want 3 agents × 1 task × 2 repeats", len(runs.Items))
	}
	for _, r := range runs.Items {
		agent := r.Labels[harnessv1.LabelSuiteAgent]
		wantVerdict, wantReward := harnessv1.VerdictPass, "1"
		if agent == "lazy" {
			wantVerdict, wantReward = harnessv1.VerdictFail, "0"
		}
		if r.Status.Verdict != wantVerdict || r.Status.Reward != wantReward {
			t.Errorf("run %s (%s): verdict %s reward %q (%s: %s); want %s and %s\n%s", r.Name, agent, r.Status.Verdict, r.Status.Reward,
				r.Status.Reason, r.Status.Message, wantVerdict, wantReward, tailOf(r.Status))
		}
		if r.Spec.Fixture.ConfigMapRef == nil || r.Spec.Fixture.ConfigMapRef.Name != "reverse-word" {
			t.Errorf("run %s fixture %+v", r.Name, r.Spec.Fixture)
		}
		if agent != "prober" {
			continue
		}
		tail := tailOf(r.Status)
		if !strings.Contains(tail, "PROBE-END") || !strings.Contains(tail, "CONTROL ") || !strings.Contains(tail, "probe-control-"+tag) {
			t.Errorf("run %s: the probe did not run to its end or its control found nothing:\n%s", r.Name, tail)
		}
		if strings.Contains(tail, "SEEN") || !strings.Contains(tail, "HARNESSFACTS_TESTS=unset") {
			t.Errorf("run %s: the agent saw the hidden tests or the solution:\n%s", r.Name, tail)
		}
	}
	cells := map[string]harnessv1.SuiteCell{}
	for _, c := range suite.Status.Cells {
		cells[c.Agent] = c
	}
	for agent, want := range map[string]struct{ rate, mean string }{"prober": {"100.0%", "1"}, "lazy": {"0.0%", "0"}, "oracle": {"100.0%", "1"}} {
		c := cells[agent]
		if c.PassRate != want.rate || c.RewardN != 2 || c.RewardMean != want.mean || c.RewardInterval != "["+want.mean+", "+want.mean+"]" {
			t.Errorf("cell %s: %+v; want pass rate %s, 2 rewards of mean %s", agent, c, want.rate, want.mean)
		}
	}

	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"html": filepath.Join(dir, "r.html"), "json": filepath.Join(dir, "r.json"), "junit": filepath.Join(dir, "r.xml")}
	md, err := exec.Command(binary, "report", "tb", "-n", ns, "--kubeconfig", kubeconfig,
		"--html", files["html"], "--json", files["json"], "--junit", files["junit"]).Output()
	if err != nil {
		t.Fatalf("harnessfacts report: %v", err)
	}
	reports := map[string]string{"markdown": string(md)}
	for form, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		reports[form] = string(b)
	}
	for form, wants := range map[string][]string{
		"markdown": {"| prober | reverse-word | 2 | 2 | 0 | 0 | 0 | 100.0% |", "| 1 [1, 1] (n=2) |", "| lazy | reverse-word | 2 | 0 | 2 | 0 | 0 | 0.0% |", "| 0 [0, 0] (n=2) |", "| oracle | reverse-word | 2 | 2 |", "- lazy × reverse-word: "},
		"html":     {"<td class=\"n\">1 [1, 1] (n=2)</td>", "<td class=\"n\">0 [0, 0] (n=2)</td>"},
		"json":     {"\"reward\": {\n        \"n\": 2,\n        \"mean\": 1,", "\"reward\": 0"},
		"junit":    {"<property name=\"rewardMean\" value=\"1\"></property>", "<property name=\"reward\" value=\"0\"></property>"},
	} {
		for _, want := range wants {
			if !strings.Contains(reports[form], want) {
				t.Errorf("the %s report lacks %q:\n%s", form, want, reports[form])
			}
		}
	}
}

func randomHex(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// yamlQuote is s as a double-quoted YAML scalar.
func yamlQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
