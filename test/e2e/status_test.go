//go:build linux

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
)

// A run whose status message outgrows the schema (64 failing checks with
// long names make "64 of 64 checks failed: …" over 8 KiB; each check prints
// multi-byte text) still reaches its terminal phase on the real API server,
// its message cut and marked.
func TestAHugeStatusMessageStillEndsTheRun(t *testing.T) {
	ns := newNamespace(t, "e2e-huge-status")
	var manifest strings.Builder
	manifest.WriteString("prompt: fail every check\nlimits:\n  probeSeconds: 30\nchecks:\n")
	for i := range 64 {
		fmt.Fprintf(&manifest, "- name: %s-%02d\n  shell: \"printf '%%.0sé' $(seq 3000); exit 1\"\n", strings.Repeat("check-with-a-long-name", 5), i)
	}
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "huge-status", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent:   harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": manifest.String()}}},
		},
	}
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	got := waitTerminal(t, client.ObjectKeyFromObject(run))
	if got.Status.Verdict != harnessv1.VerdictFail || got.Status.Reason != harnessv1.ReasonChecksFailed {
		t.Errorf("verdict %s, reason %s: want Fail, ChecksFailed", got.Status.Verdict, got.Status.Reason)
	}
	if n := utf8.RuneCountInString(got.Status.Message); n > harnessv1.MaxMessageLength || !strings.HasSuffix(got.Status.Message, "[truncated]") {
		t.Errorf("status.message is %d characters and ends %q: want at most %d, marked as cut", n, got.Status.Message[max(0, len(got.Status.Message)-40):], harnessv1.MaxMessageLength)
	}
	if len(got.Status.Checks) != 64 {
		t.Errorf("%d check results, want 64", len(got.Status.Checks))
	}
	waitNoRunDirs(t)
}

// TestOutputYAMLRefusesStillShowsTheStatus: an agent that prints U+FFFE (a
// check's output U+FFFF), valid UTF-8 that no YAML parser takes, made
// `harnessfacts run` print "yaml: control characters are not allowed"
// instead of its status, and `kubectl get -o yaml` fail for the run and
// for every list holding it (both convert the run's JSON with a YAML
// parser). The output tail and check messages show them inert instead.
func TestOutputYAMLRefusesStillShowsTheStatus(t *testing.T) {
	const fixture = "prompt: print\nchecks:\n- {name: prints, shell: 'printf \"check says \\357\\277\\277\\n\"'}\n"
	const script = `printf 'all good \357\277\276\n'`
	st := localRun(t, "", localRunYAML("nonchar", fixture, script, ""))
	if st.Verdict != harnessv1.VerdictPass {
		t.Errorf("verdict %s %s: %s", st.Verdict, st.Reason, st.Message)
	}
	check := func(where string, st harnessv1.HarnessRunStatus) {
		t.Helper()
		if _, err := yaml.Marshal(st); err != nil {
			t.Errorf("%s: the status is not printable as YAML: %v", where, err)
		}
		if st.Agent == nil || !strings.Contains(st.Agent.OutputTail, "all good <U+FFFE>") {
			t.Errorf("%s: the output tail does not show U+FFFE inert: %+v", where, st.Agent)
		}
		if len(st.Checks) != 1 || strings.ContainsRune(st.Checks[0].Message, 0xffff) {
			t.Errorf("%s: the check's message: %+v", where, st.Checks)
		}
	}
	check("harnessfacts run", st)

	ns := newNamespace(t, "e2e-nonchar")
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "nonchar", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent:   harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"bash", "-c", script}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": fixture}}},
		},
	}
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	got := waitTerminal(t, client.ObjectKeyFromObject(run))
	if _, err := yaml.Marshal(got); err != nil {
		t.Errorf("kubectl get -o yaml would fail: %v", err)
	}
	check("on the cluster", got.Status)
	waitNoRunDirs(t)
}

// TestControlsInOutputKeepItsEvidencePrintableAsYAML: an agent's output
// with an 8-bit CSI (U+009B, valid UTF-8) or a DEL in it was put in the
// evidence ConfigMap's data as it was; JSON does not escape them, and
// `kubectl get -o yaml` cannot print them ("yaml: control characters are
// not allowed"), for that ConfigMap and for every ConfigMap list of its
// namespace. Such content goes to binaryData, and the evidence still
// verifies and shows; colours alone (ESC, which JSON escapes) stay in data.
func TestControlsInOutputKeepItsEvidencePrintableAsYAML(t *testing.T) {
	ns := newNamespace(t, "e2e-colours")
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "colours", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent:   harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"bash", "-c", `printf '\033[32mall green\033[0m \302\2332J \177\n'`}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: colour\n"}}},
		},
	}
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	got := waitTerminal(t, client.ObjectKeyFromObject(run))
	if got.Status.Verdict != harnessv1.VerdictPass || got.Status.Evidence == nil {
		t.Fatalf("verdict %s %s: %s", got.Status.Verdict, got.Status.Reason, got.Status.Message)
	}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: got.Status.Evidence.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	if _, err := yaml.Marshal(cm); err != nil {
		t.Errorf("kubectl get -o yaml of the evidence ConfigMap would fail: %v", err)
	}
	if _, ok := cm.Data["receipt.json"]; !ok {
		t.Errorf("the receipt is not in data: %v", cm.Data)
	}
	if rep := evidence.VerifyConfigMap(cm.Data, cm.BinaryData, got.Status.Evidence.Digest); !rep.OK() {
		t.Errorf("the evidence does not verify: %+v", rep)
	}
	if out := cli(t, ns, false, "logs", "colours"); !strings.Contains(out, "^[[32mall green^[[0m <U+009B>2J ^?") {
		t.Errorf("harnessfacts logs does not show the stored output, inert:\n%s", out)
	}
	if out := cli(t, ns, false, "evidence", "verify", "colours"); !strings.Contains(out, "verified") {
		t.Errorf("harnessfacts evidence verify:\n%s", out)
	}
	waitNoRunDirs(t)
}
