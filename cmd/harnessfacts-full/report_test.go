//go:build !windows

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
	"github.com/harnessfacts/harnessfacts/node-agent/trajectory"
)

// TestReportCommand runs `harnessfacts report` against a real API server
// holding a suite and the runs of two of its rounds (as the controller and
// the node-agents leave them): only the current round is reported, in
// Markdown on stdout and in the HTML file.
func TestReportCommand(t *testing.T) {
	const ns = "reports"
	c, kubeconfig := apiServerWithNamespace(t, ns)
	ctx := context.Background()
	suite := &harnessv1.HarnessSuite{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns},
		Spec: harnessv1.HarnessSuiteSpec{
			Agents:   []harnessv1.SuiteAgent{{Name: "codex", Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex}}},
			Fixtures: harnessv1.SuiteFixtures{Names: []string{"fixture-hello"}},
			Repeats:  3,
		},
	}
	if err := c.Create(ctx, suite); err != nil {
		t.Fatal(err)
	}
	suite.Status = harnessv1.HarnessSuiteStatus{Round: 2, Revision: "v2", Counts: harnessv1.SuiteCounts{Total: 3},
		Cells:  []harnessv1.SuiteCell{{Agent: "codex", Fixture: "fixture-hello"}},
		Rounds: []harnessv1.RoundSummary{{Round: 1, Revision: "v1", PassRate: "33.3%"}}}
	if err := c.Status().Update(ctx, suite); err != nil {
		t.Fatal(err)
	}
	mk := func(name, round string, verdict harnessv1.Verdict, digest string) {
		run := &harnessv1.HarnessRun{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
				Labels: map[string]string{harnessv1.LabelSuite: "nightly", harnessv1.LabelSuiteRound: round, harnessv1.LabelSuiteAgent: "codex"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: harnessv1.GroupVersion.String(), Kind: "HarnessSuite",
					Name: "nightly", UID: suite.UID, Controller: ptr.To(true)}}},
			Spec: harnessv1.HarnessRunSpec{Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex},
				Fixture: harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "fixture-hello"}}},
		}
		if err := c.Create(ctx, run); err != nil {
			t.Fatal(err)
		}
		run.Status = harnessv1.HarnessRunStatus{Phase: harnessv1.RunSucceeded, Verdict: verdict,
			Evidence: &harnessv1.EvidenceStatus{Digest: digest, ConfigMapName: name + "-evidence"}}
		if err := c.Status().Update(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	// nightly-a's evidence holds a trajectory whose texts try to act on
	// the page and the reader's terminal; nightly-b's was changed after
	// it was sealed; nightly-c's ConfigMap is gone.
	hostile := "<script>alert(1)</script> \x1b]52;c;cGF3bmVk\x07 \u202eevil"
	tr := &trajectory.Trajectory{SessionID: "s", Agent: trajectory.Agent{Name: "codex", Version: "0.171.0"}, Steps: []trajectory.Step{
		{Source: trajectory.SourceUser, Message: "Edit greeting.txt"},
		{Source: trajectory.SourceAgent, ToolCalls: []trajectory.ToolCall{{ToolCallID: "c1", FunctionName: "mcp__harnessfacts__get_token", Arguments: json.RawMessage(`{}`)}}},
		{Source: trajectory.SourceAgent, Message: hostile},
	}}
	tr.Steps[1].AddResult("c1", "hft_tokenvalue")
	trJSON, steps, err := trajectory.Seal(tr, func(b []byte) []byte { return b }, 0)
	if err != nil {
		t.Fatal(err)
	}
	sealed := func(name string) *evidence.Bundle {
		b, err := evidence.SealParts(evidence.Receipt{Run: evidence.RunRef{Namespace: ns, Name: name}},
			evidence.Parts{Output: evidence.BytesLog("log\n"), Trajectory: trJSON, TrajectoryFormat: trajectory.SchemaVersion, TrajectorySteps: steps}, 0)
		if err != nil {
			t.Fatal(err)
		}
		data, bin := b.ConfigMapData()
		if name == "nightly-b" {
			data[evidence.TrajectoryName] = strings.Replace(data[evidence.TrajectoryName], "hft_tokenvalue", "hft_forgedvalue", 1)
		}
		if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-evidence", Namespace: ns}, Data: data, BinaryData: bin}); err != nil {
			t.Fatal(err)
		}
		return b
	}
	mk("nightly-a", "2", harnessv1.VerdictPass, sealed("nightly-a").Digest)
	mk("nightly-b", "2", harnessv1.VerdictPass, sealed("nightly-b").Digest)
	mk("nightly-c", "2", harnessv1.VerdictFail, "sha256:cccc")
	mk("nightly-old", "1", harnessv1.VerdictFail, "sha256:0000")

	htmlFile := filepath.Join(t.TempDir(), "report.html")
	jsonFile := filepath.Join(t.TempDir(), "report.json")
	junitFile := filepath.Join(t.TempDir(), "report.xml")
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"report", "nightly", "-n", ns, "--kubeconfig", kubeconfig, "--html", htmlFile, "--json", jsonFile, "--junit", junitFile})
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	for _, want := range []string{
		"## HarnessSuite reports/nightly — round 2 (revision v2)",
		"Progress **3/3**: 2 passed, 1 failed",
		"| codex | fixture-hello | 3 | 2 | 1 | 0 | 0 | 66.7% | 20.8%–93.9% |",
		"round 1 (revision v1) 33.3%",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the Markdown lacks %q:\n%s", want, md)
		}
	}
	page, err := os.ReadFile(htmlFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sha256:cccc", `id="run-nightly-a"`, "<svg",
		// nightly-a links to its trajectory, shown with the MCP call and its
		// result, every text escaped and inert.
		`href="#trajectory-nightly-a"`, `id="trajectory-nightly-a"`, "mcp__harnessfacts__get_token", "hft_tokenvalue",
		"&lt;script&gt;alert(1)&lt;/script&gt;", "^[]52;c;cGF3bmVk^G", "202E&gt;evil",
		// nightly-b's changed trajectory is not shown; nightly-c's evidence is gone.
		"trajectory not shown: the evidence does not verify", "evidence not read: "} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("the HTML lacks %q", want)
		}
	}
	for _, bad := range []string{"<script>alert", "\x1b", "\u202e", "hft_forgedvalue", `id="trajectory-nightly-b"`} {
		if bytes.Contains(page, []byte(bad)) {
			t.Errorf("the HTML holds %q", bad)
		}
	}
	if bytes.Contains(page, []byte("sha256:0000")) || strings.Contains(md, "nightly-old") {
		t.Error("the report shows a run of the earlier round")
	}

	// The machine-readable forms: JSON for CI jobs, JUnit XML for CI systems.
	var js struct {
		Round    int32 `json:"round"`
		PassRate struct {
			Rate float64 `json:"rate"`
			N    int     `json:"n"`
		} `json:"passRate"`
		Cells []struct {
			Agent, Fixture string
			Runs           []struct {
				Name, Verdict, EvidenceDigest string
			} `json:"runs"`
		} `json:"cells"`
	}
	raw, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &js); err != nil {
		t.Fatalf("the JSON report does not parse: %v\n%s", err, raw)
	}
	if js.Round != 2 || js.PassRate.N != 3 || js.PassRate.Rate < 0.66 || js.PassRate.Rate > 0.67 || len(js.Cells) != 1 || len(js.Cells[0].Runs) != 3 ||
		js.Cells[0].Runs[2].Verdict != "Fail" || js.Cells[0].Runs[2].EvidenceDigest != "sha256:cccc" {
		t.Errorf("the JSON report: %+v", js)
	}
	var ju struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Errors   int `xml:"errors,attr"`
		Suites   []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				Name    string    `xml:"name,attr"`
				Failure *struct{} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	raw, err = os.ReadFile(junitFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(raw, &ju); err != nil {
		t.Fatalf("the JUnit report does not parse: %v\n%s", err, raw)
	}
	if ju.Tests != 3 || ju.Failures != 1 || ju.Errors != 0 || len(ju.Suites) != 1 || len(ju.Suites[0].Cases) != 3 ||
		ju.Suites[0].Cases[2].Name != "nightly-c" || ju.Suites[0].Cases[2].Failure == nil || ju.Suites[0].Cases[0].Failure != nil {
		t.Errorf("the JUnit report:\n%s", raw)
	}
}

// apiServerWithNamespace starts a real API server for the test, with the
// namespace ns, and returns a client and a kubeconfig file for it.
func apiServerWithNamespace(t *testing.T, ns string) (client.Client, string) {
	t.Helper()
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return c, kubeconfig
}
