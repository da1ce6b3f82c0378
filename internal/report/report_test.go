package report

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

func TestWilson(t *testing.T) {
	// Reference values of the Wilson score interval at 95% (as R's
	// binom::binom.wilson gives them).
	cases := []struct {
		passed, n int
		lo, hi    float64
	}{
		{0, 10, 0, 0.2775327},
		{5, 10, 0.2365931, 0.7634069},
		{10, 10, 0.7224673, 1},
		{1, 1, 0.2065493, 1},
		{0, 0, 0, 1},
	}
	for _, tc := range cases {
		lo, hi := Wilson(tc.passed, tc.n, Z95)
		if math.Abs(lo-tc.lo) > 1e-6 || math.Abs(hi-tc.hi) > 1e-6 {
			t.Errorf("Wilson(%d, %d) = [%.7f, %.7f], want [%.7f, %.7f]", tc.passed, tc.n, lo, hi, tc.lo, tc.hi)
		}
	}
	// The interval of the failures mirrors the interval of the passes.
	for k := 0; k <= 37; k++ {
		lo, hi := Wilson(k, 37, Z95)
		flo, fhi := Wilson(37-k, 37, Z95)
		if math.Abs(lo-(1-fhi)) > 1e-12 || math.Abs(hi-(1-flo)) > 1e-12 || lo > float64(k)/37 || hi < float64(k)/37 {
			t.Errorf("Wilson(%d, 37) = [%v, %v] is not symmetric or does not hold the rate", k, lo, hi)
		}
	}
}

func testRun(name, agent, fixture string, repeat string, phase harnessv1.RunPhase, verdict harnessv1.Verdict, digest string) harnessv1.HarnessRun {
	run := harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			harnessv1.LabelSuite: "s", harnessv1.LabelSuiteRound: "2", harnessv1.LabelSuiteAgent: agent},
			Annotations: map[string]string{harnessv1.AnnotationSuiteRepeat: repeat, harnessv1.AnnotationFixtureHash: "sha256:abc"}},
		Spec:   harnessv1.HarnessRunSpec{Fixture: harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: fixture}}},
		Status: harnessv1.HarnessRunStatus{Phase: phase, Verdict: verdict},
	}
	if digest != "" {
		run.Status.Evidence = &harnessv1.EvidenceStatus{Digest: digest, ConfigMapName: name + "-evidence"}
	}
	return run
}

func testSuite() *harnessv1.HarnessSuite {
	return &harnessv1.HarnessSuite{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", UID: types.UID("u")},
		Status: harnessv1.HarnessSuiteStatus{Round: 2, Revision: "abc", Progress: "4/5",
			Counts: harnessv1.SuiteCounts{Total: 5, Created: 5, Finished: 4, Passed: 2, Failed: 1, Errored: 1, Running: 1},
			Cells:  []harnessv1.SuiteCell{{Agent: "codex", Fixture: "hello", Unfinished: 1}, {Agent: "claude", Fixture: "hello"}, {Agent: "claude", Fixture: "empty", Unfinished: 2}}},
	}
}

func TestBuild(t *testing.T) {
	runs := []harnessv1.HarnessRun{
		testRun("s-3", "codex", "hello", "1", harnessv1.RunSucceeded, harnessv1.VerdictFail, "sha256:3"),
		testRun("s-1", "codex", "hello", "0", harnessv1.RunSucceeded, harnessv1.VerdictPass, "sha256:1"),
		testRun("s-2", "codex", "hello", "2", harnessv1.RunRunning, "", ""),
		testRun("s-4", "claude", "hello", "0", harnessv1.RunSucceeded, harnessv1.VerdictPass, "sha256:4"),
		testRun("s-5", "claude", "hello", "1", harnessv1.RunFailed, harnessv1.VerdictError, ""),
	}
	old := testRun("s-0", "codex", "hello", "0", harnessv1.RunSucceeded, harnessv1.VerdictPass, "sha256:0")
	old.Labels[harnessv1.LabelSuiteRound] = "1"
	runs = append(runs, old)

	r := Build(testSuite(), runs, time.Unix(0, 0))
	type cellSum struct {
		Agent, Fixture                      string
		Passed, Failed, Errored, Unfinished int
		Runs                                []string
	}
	var got []cellSum
	for _, c := range r.Cells {
		cs := cellSum{c.Agent, c.Fixture, c.Passed, c.Failed, c.Errored, c.Unfinished, nil}
		for _, run := range c.Runs {
			cs.Runs = append(cs.Runs, run.Name)
		}
		got = append(got, cs)
	}
	want := []cellSum{
		{"codex", "hello", 1, 1, 0, 1, []string{"s-1", "s-3", "s-2"}},
		{"claude", "hello", 1, 0, 1, 0, []string{"s-4", "s-5"}},
		{"claude", "empty", 0, 0, 0, 2, nil},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cells (-want +got):\n%s", diff)
	}
	if r.Rate != 2.0/3 {
		t.Errorf("rate %v, want 2/3", r.Rate)
	}
	if r.Cells[0].Runs[0].Digest != "sha256:1" || r.Cells[0].Runs[0].EvidenceConfigMap != "s-1-evidence" {
		t.Errorf("run evidence %+v", r.Cells[0].Runs[0])
	}
}

func TestHTMLIsSelfContainedAndEscapes(t *testing.T) {
	s := testSuite()
	s.Status.Revision = `<script>alert("rev")</script>`
	s.Status.Cells = nil
	runs := []harnessv1.HarnessRun{
		testRun("s-1", `<img src=x onerror=alert(1)>`, `fix"ture<b>`, "0", harnessv1.RunSucceeded, harnessv1.VerdictPass, "sha256:1"),
	}
	var b bytes.Buffer
	if err := Build(s, runs, time.Unix(0, 0)).HTML(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, bad := range []string{"<script>", "<img", "<b>", "http://", "https://", "<link", "@import", `src="`} {
		if bad == "http://" {
			// The SVG namespace is a name, not a fetched asset.
			out := strings.ReplaceAll(out, `xmlns="http://www.w3.org/2000/svg"`, "")
			if strings.Contains(out, bad) {
				t.Errorf("the page refers to an external asset (%q)", bad)
			}
			continue
		}
		if strings.Contains(out, bad) {
			t.Errorf("the page contains %q unescaped", bad)
		}
	}
	for _, want := range []string{"&lt;img src=x onerror=alert(1)&gt;", "fix&#34;ture&lt;b&gt;", "sha256:1", `<svg`, `id="run-s-1"`, "100.0% (n=1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

func TestMarkdown(t *testing.T) {
	runs := []harnessv1.HarnessRun{
		testRun("s-1", "co|dex", "hello", "0", harnessv1.RunSucceeded, harnessv1.VerdictPass, "sha256:1"),
		testRun("s-2", "co|dex", "hello", "1", harnessv1.RunSucceeded, harnessv1.VerdictFail, "sha256:2"),
	}
	// Distinct figures, so a summing bug shows: 1200+30 in, 345+4 out,
	// 67+8+1 cache.
	runs[0].Status.Usage = &harnessv1.UsageStatus{Source: harnessv1.UsageFromGateway, Models: []string{"m-1"},
		InputTokens: 1200, OutputTokens: 345, CacheReadTokens: 67, CacheWriteTokens: 8}
	runs[1].Status.Usage = &harnessv1.UsageStatus{Source: harnessv1.UsageFromGateway, InputTokens: 30, OutputTokens: 4, CacheReadTokens: 1, UncountedResponses: 2}
	s := testSuite()
	s.Status.Cells = nil
	s.Status.Rounds = []harnessv1.RoundSummary{{Round: 1, Revision: "old", PassRate: "40.0%"}}
	var b bytes.Buffer
	if err := Build(s, runs, time.Unix(0, 0)).Markdown(&b); err != nil {
		t.Fatal(err)
	}
	want := `## HarnessSuite ns/s — round 2 (revision abc)

Progress **2/5**: 1 passed, 1 failed, 0 errored, 0 running, 0 pending. Pass rate **50.0%** (95% CI 9.5%–90.5%, n=2).

| Agent | Fixture | n | Passed | Failed | Errored | Unfinished | Pass rate | 95% CI | Reward [95% CI] (n) | Tokens in / out / cache |
|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|
| co\|dex | hello | 2 | 1 | 1 | 0 | 0 | 50.0% | 9.5%–90.5% | – | 1230 / 349 / 76 (1 runs with answers uncounted) |

Earlier rounds: round 1 (revision old) 40.0%.
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("markdown (-want +got):\n%s", diff)
	}
}

// A revision (free text in the suite's spec) or a name carrying terminal
// control sequences reaches neither the Markdown printed on stdout nor the
// HTML file as sequences: OSC 52 (clipboard), OSC 8 (link) and CSI (erase,
// colour) are shown as inert text.
func TestReportsNeutraliseTerminalSequences(t *testing.T) {
	const osc52, osc8, csi = "\x1b]52;c;ZXZpbA==\x07", "\x1b]8;;https://evil.example/\x1b\\", "\x1b[2K\x1b[1A"
	s := testSuite()
	s.Status.Revision = "rev" + osc52 + osc8 + csi
	s.Status.Cells = nil
	s.Status.Rounds = []harnessv1.RoundSummary{{Round: 1, Revision: "old" + csi, PassRate: "40.0%"}}
	runs := []harnessv1.HarnessRun{testRun("s-1", "codex"+csi, "hello"+osc8, "0", harnessv1.RunSucceeded, harnessv1.VerdictPass, "sha256:1")}
	// The usage line, the signer and the stored reference, held by the
	// status: a model with a sequence (the CRD refuses one now; an older
	// run's may hold it) reached the HTML file raw.
	runs[0].Status.Usage = &harnessv1.UsageStatus{Source: harnessv1.UsageFromGateway, ModelRequested: "m" + osc52, Models: []string{"m2" + csi}}
	runs[0].Status.Evidence.SignedBy = "sha256:k" + csi
	runs[0].Status.Evidence.StoredRef = "registry.example/ev" + osc8
	r := Build(s, runs, time.Unix(0, 0))
	var md, page bytes.Buffer
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := r.HTML(&page); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"markdown": md.String(), "html": page.String()} {
		if strings.ContainsAny(out, "\x1b\x07") {
			t.Errorf("the %s report holds a raw ESC or BEL: %q", name, out)
		}
		if !strings.Contains(out, "rev^[]52;c;ZXZpbA==^G") {
			t.Errorf("the %s report does not show the OSC 52 sequence as text", name)
		}
	}
	if r.Revision != s.Status.Revision {
		t.Errorf("the report's data was changed: %q", r.Revision)
	}
}

// The HTML report and the JSON show each run's model and tokens, the
// cell's sums and how many runs had no figures, and each run's signer and
// stored evidence.
func TestUsageAndSignaturesInReports(t *testing.T) {
	runs := []harnessv1.HarnessRun{
		testRun("s-1", "codex", "hello", "0", harnessv1.RunSucceeded, harnessv1.VerdictPass, "sha256:1"),
		testRun("s-2", "codex", "hello", "1", harnessv1.RunSucceeded, harnessv1.VerdictFail, "sha256:2"),
		testRun("s-3", "codex", "hello", "2", harnessv1.RunFailed, harnessv1.VerdictError, ""),
	}
	runs[0].Status.Usage = &harnessv1.UsageStatus{Source: harnessv1.UsageFromGateway, ModelRequested: "gpt-x", Models: []string{"gpt-x-2026"},
		Requests: 3, InputTokens: 1200, OutputTokens: 345, CacheReadTokens: 67, CacheWriteTokens: 8}
	runs[0].Status.Evidence.SignedBy = "sha256:k1"
	runs[0].Status.Evidence.StoredRef = "registry.example/ev@sha256:d1"
	runs[1].Status.Usage = &harnessv1.UsageStatus{Source: harnessv1.UsageFromGateway, InputTokens: 30, OutputTokens: 4, CacheReadTokens: 1, UncountedResponses: 2}
	runs[2].Status.Usage = &harnessv1.UsageStatus{Source: harnessv1.UsageNone, ModelRequested: "gpt-x"}
	s := testSuite()
	s.Status.Cells = nil
	r := Build(s, runs, time.Unix(0, 0))
	if c := r.Cells[0]; c.InputTokens != 1230 || c.OutputTokens != 349 || c.CacheTokens != 76 || c.Counted != 2 || c.Uncounted != 1 || c.PartlyCounted != 1 {
		t.Fatalf("cell sums %+v", c)
	}
	var h bytes.Buffer
	if err := r.HTML(&h); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1230 / 349 / 76 (1 runs without figures, 1 runs with answers uncounted)", "gpt-x-2026 1200 in / 345 out / 75 cache (Gateway)",
		"30 in / 4 out / 1 cache (Gateway; 2 answers uncounted)",
		"gpt-x (no usage figures)", "signed by <code>sha256:k1</code>", "stored as <code>registry.example/ev@sha256:d1</code>"} {
		if !strings.Contains(h.String(), want) {
			t.Errorf("the HTML report lacks %q", want)
		}
	}
	var j bytes.Buffer
	if err := r.JSON(&j); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"tokens": {
        "input": 1230,
        "output": 349,
        "cache": 76,
        "countedRuns": 2,
        "uncountedRuns": 1,
        "partlyCountedRuns": 1
      }`, `"signedBy": "sha256:k1"`, `"storedEvidence": "registry.example/ev@sha256:d1"`, `"inputTokens": 1200`} {
		if !strings.Contains(j.String(), want) {
			t.Errorf("the JSON report lacks %s:\n%s", want, j.String())
		}
	}
}

func TestMeanInterval95(t *testing.T) {
	// Reference: mean 0.5, sd 0.5773503 (n=4), t(3) 3.182446: half width
	// 0.9187; as R's t.test(c(0, 0, 1, 1))$conf.int gives, to 3 decimals
	// (the table rounds t to 4.303/3.182).
	for _, tc := range []struct {
		v            []float64
		mean, lo, hi float64
		ok           bool
	}{
		{nil, 0, 0, 0, false},
		{[]float64{0.75}, 0.75, 0.75, 0.75, false},
		{[]float64{0, 0, 1, 1}, 0.5, -0.4186, 1.4186, true},
		{[]float64{1, 1, 1}, 1, 1, 1, true},
	} {
		mean, lo, hi, ok := MeanInterval95(tc.v)
		if ok != tc.ok || math.Abs(mean-tc.mean) > 1e-9 || math.Abs(lo-tc.lo) > 1e-3 || math.Abs(hi-tc.hi) > 1e-3 {
			t.Errorf("MeanInterval95(%v) = %v [%v, %v] %v, want %v [%v, %v] %v", tc.v, mean, lo, hi, ok, tc.mean, tc.lo, tc.hi, tc.ok)
		}
	}
}

// Rewards (Harbor-style verifiers') show per cell (mean, interval, n) and
// per run in every form; runs without one, and an unfinished run's, do not
// count; a reward is text from the cluster and is neutralised.
func TestRewardsInEveryForm(t *testing.T) {
	runs := []harnessv1.HarnessRun{
		testRun("s-1", "codex", "hello", "0", harnessv1.RunSucceeded, harnessv1.VerdictPass, "sha256:1"),
		testRun("s-2", "codex", "hello", "1", harnessv1.RunSucceeded, harnessv1.VerdictFail, "sha256:2"),
		testRun("s-3", "codex", "hello", "2", harnessv1.RunSucceeded, harnessv1.VerdictPass, "sha256:3"),
		testRun("s-4", "codex", "hello", "3", harnessv1.RunRunning, "", ""),
		testRun("s-5", "oracle", "hello", "0", harnessv1.RunSucceeded, harnessv1.VerdictPass, "sha256:5"),
		testRun("s-6", "lazy", "hello", "0", harnessv1.RunSucceeded, harnessv1.VerdictFail, "sha256:6"),
	}
	runs[0].Status.Reward = "1"
	runs[1].Status.Reward = "0"
	runs[2].Status.Reward = "0.5"
	runs[3].Status.Reward = "1" // not finished: not counted
	runs[4].Status.Reward = "1"
	runs[5].Status.Reward = "0.25\x1b[2K" // not a number: shown neutralised, not counted
	s := testSuite()
	s.Status.Cells = nil
	r := Build(s, runs, time.Unix(0, 0))
	byAgent := map[string]Cell{}
	for _, c := range r.Cells {
		byAgent[c.Agent] = c
	}
	if c := byAgent["codex"]; c.RewardN != 3 || math.Abs(c.RewardMean-0.5) > 1e-9 || !c.HasRewardInterval() || math.Abs(c.RewardLo-(0.5-4.303*0.5/math.Sqrt(3))) > 1e-9 {
		t.Errorf("codex cell rewards: n %d mean %v [%v, %v]", c.RewardN, c.RewardMean, c.RewardLo, c.RewardHi)
	}
	if c := byAgent["oracle"]; c.RewardN != 1 || c.RewardMean != 1 || c.HasRewardInterval() || c.RewardText() != "1 (n=1)" {
		t.Errorf("oracle cell: %+v %q", c, c.RewardText())
	}
	if c := byAgent["lazy"]; c.RewardN != 0 || c.RewardText() != "–" {
		t.Errorf("lazy cell: %+v", c)
	}
	var md, page, js, junit bytes.Buffer
	for _, f := range []func() error{func() error { return r.Markdown(&md) }, func() error { return r.HTML(&page) }, func() error { return r.JSON(&js) }, func() error { return r.JUnit(&junit) }} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	codex := byAgent["codex"].RewardText()
	if codex != "0.5 [-0.7422, 1.742] (n=3)" {
		t.Errorf("codex reward text %q", codex)
	}
	for name, tc := range map[string]struct {
		out  string
		want []string
	}{
		"markdown": {md.String(), []string{"| " + codex + " |", "| 1 (n=1) |", "- codex × hello: s-1 1, s-2 0, s-3 0.5, s-4 1", "- oracle × hello: s-5 1", "s-6 0.25^[[2K"}},
		"html":     {page.String(), []string{"<td class=\"n\">" + codex + "</td>", "<td class=\"n\">0.5</td>", "0.25^[[2K"}},
		"json": {js.String(), []string{`"reward": {
        "n": 3,
        "mean": 0.5,
        "low": -0.742`, `"reward": 0.5`}},
		"junit": {junit.String(), []string{`<property name="rewardN" value="3"></property>`, `<property name="rewardMean" value="0.5"></property>`,
			`<property name="rewardInterval" value="[-0.7422, 1.742]"></property>`, `<property name="reward" value="0.5"></property>`}},
	} {
		for _, w := range tc.want {
			if !strings.Contains(tc.out, w) {
				t.Errorf("the %s report lacks %q:\n%s", name, w, tc.out)
			}
		}
		if strings.ContainsAny(tc.out, "\x1b") {
			t.Errorf("the %s report holds a raw ESC", name)
		}
	}
	if strings.Contains(js.String(), `"reward": 0.25`) {
		t.Error("a reward that is no number reached the JSON as one")
	}
}
