package agents

import (
	"context"
	"encoding/json"
	"math/big"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/fakeprovider"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
	"github.com/harnessfacts/harnessfacts/node-agent/trajectory"
)

// requireModels fails the test unless status.usage (and with it the
// receipt, which RequireUsage compares) names the model the run asked for
// and the models fake-provider said answered the requests that carried key.
// fake-provider answers with a dated snapshot of the model asked for
// (fakeprovider.AnsweredModel), so a model copied from the request instead
// of read from the reply shows. Through the model gateway the gateway reads
// every reply. From the CLI's own output: Claude Code's assistant events
// and Gemini CLI's result stats (keyed by the reply's modelVersion) name
// the model that answered; Codex's and OpenCode's events name none, so
// usage.models stays empty rather than guess. (Every Gemini run here goes
// through the gateway: the adapter has no login file to bypass it.)
func requireModels(t *testing.T, o *Outcome, key string) {
	t.Helper()
	u := o.Run.Status.Usage
	if u == nil {
		t.Fatal("no status.usage")
	}
	if want := adapters.RequestedModel(o.Run.Spec.Agent.Adapter, o.Run.Spec.Agent.Model); u.ModelRequested != want {
		t.Errorf("usage.modelRequested %q, want %q", u.ModelRequested, want)
	}
	var answered []string
	for _, r := range o.Requests {
		if (key == "" || r.KeySHA256 == fakeprovider.KeyDigest(key)) && r.Usage.Model != "" && !slices.Contains(answered, r.Usage.Model) {
			answered = append(answered, r.Usage.Model)
		}
	}
	if len(answered) == 0 {
		t.Fatalf("fake-provider answered no request of the run:\n%s", requests(o))
	}
	for _, m := range answered {
		if !strings.HasSuffix(m, fakeprovider.AnsweredSuffix) {
			t.Fatalf("fake-provider answered with %q, not a model of its own", m)
		}
	}
	t.Logf("usage %+v; fake-provider answered with %q", *u, answered)
	want := answered
	if a := o.Run.Spec.Agent.Adapter; !o.Gateway && a != harnessv1.AdapterClaudeCode && a != harnessv1.AdapterGemini {
		want = nil
	}
	if !slices.Equal(u.Models, want) {
		t.Errorf("usage.models %q, want %q (the models fake-provider said answered; source %s)", u.Models, want, u.Source)
	}
}

// requireNoUsage: an adapter whose CLI reports nothing, outside the model
// gateway, says so — source None, the model asked for, no figures.
func requireNoUsage(t *testing.T, o *Outcome) {
	t.Helper()
	u := o.Run.Status.Usage
	want := harnessv1.UsageStatus{Source: harnessv1.UsageNone, ModelRequested: adapters.RequestedModel(o.Run.Spec.Agent.Adapter, o.Run.Spec.Agent.Model)}
	if u == nil || u.Source != want.Source || u.ModelRequested != want.ModelRequested || len(u.Models) != 0 || u.TotalTokens() != 0 || u.Requests != 0 {
		t.Errorf("usage %+v, want %+v", u, want)
	}
	var receipt evidence.Receipt
	if err := json.Unmarshal([]byte(o.Evidence[evidence.ReceiptName]), &receipt); err != nil || receipt.Usage == nil || receipt.Usage.Source != harnessv1.UsageNone {
		t.Errorf("the receipt's usage %+v (%v)", receipt.Usage, err)
	}
}

// RequireTrajectory fails the test unless the run's evidence holds
// trajectory.json: valid ATIF, the prompt first, the call of mcpTool with
// the token get_token returned (the run's token.txt) as its result, named
// by digest in the receipt, covered by the node's signature — and a
// flipped byte of it fails the verification, naming it.
func RequireTrajectory(t *testing.T, o *Outcome, mcpTool string) {
	t.Helper()
	data, ok := o.Evidence[evidence.TrajectoryName]
	if !ok {
		t.Fatalf("the evidence has no %s (keys: %v)", evidence.TrajectoryName, keys(o.Evidence))
	}
	tr, err := trajectory.Parse([]byte(data))
	if err != nil {
		t.Fatalf("%s is not ATIF: %v\n%s", evidence.TrajectoryName, err, data)
	}
	var receipt evidence.Receipt
	if err := json.Unmarshal([]byte(o.Evidence[evidence.ReceiptName]), &receipt); err != nil {
		t.Fatal(err)
	}
	if r := receipt.Trajectory; r == nil || !r.Stored || r.Format != trajectory.SchemaVersion || r.Steps != len(tr.Steps) || r.Size != int64(len(data)) || r.SHA256 != sha256Hex(data) {
		t.Errorf("the receipt's trajectory %+v does not describe the stored one (%d steps, %d bytes)", r, len(tr.Steps), len(data))
	}
	if tr.Agent.Name != string(o.Run.Spec.Agent.Adapter) || tr.Agent.Version != o.Run.Status.Agent.CLIVersion {
		t.Errorf("trajectory agent %+v", tr.Agent)
	}
	if len(tr.Steps) == 0 || tr.Steps[0].Source != trajectory.SourceUser || !strings.HasPrefix(tr.Steps[0].Message, "Edit greeting.txt") {
		t.Errorf("the first step is not the prompt: %+v", tr.Steps)
	}
	token := strings.TrimSpace(evidenceArtifact(t, o, "token.txt"))
	found := false
	for _, s := range tr.Steps {
		for _, c := range s.ToolCalls {
			if c.FunctionName != mcpTool || s.Observation == nil {
				continue
			}
			for _, r := range s.Observation.Results {
				if r.SourceCallID == c.ToolCallID && strings.Contains(r.Content, token) {
					found = true
				}
			}
		}
	}
	if !found {
		t.Errorf("the trajectory has no call of %s with the token %s as its result:\n%s", mcpTool, token, data)
	}
	rep := evidence.VerifyConfigMap(o.Evidence, o.EvidenceBinary, o.Run.Status.Evidence.Digest, nodeKey)
	if !rep.OK() || rep.SignedBy != nodeKey.ID {
		t.Errorf("the evidence does not verify with the node's key: %v (signed by %q)", rep.Err(), rep.SignedBy)
	}
	tampered := make(map[string]string, len(o.Evidence))
	for k, v := range o.Evidence {
		tampered[k] = v
	}
	b := []byte(data)
	b[len(b)/2] ^= 1
	tampered[evidence.TrajectoryName] = string(b)
	if rep := evidence.VerifyConfigMap(tampered, o.EvidenceBinary, o.Run.Status.Evidence.Digest, nodeKey); rep.OK() ||
		!strings.Contains(rep.Err().Error(), evidence.TrajectoryName+": sha256 ") {
		t.Errorf("a flipped byte of %s: %v", evidence.TrajectoryName, rep.Err())
	}
}

// requireNoTrajectory: an adapter whose CLI writes no event stream (Aider,
// Antigravity, exec) has no trajectory; output.log is its record.
func requireNoTrajectory(t *testing.T, o *Outcome) {
	t.Helper()
	if _, ok := o.Evidence[evidence.TrajectoryName]; ok {
		t.Errorf("a %s run has a %s", o.Run.Spec.Agent.Adapter, evidence.TrajectoryName)
	}
	var receipt evidence.Receipt
	if err := json.Unmarshal([]byte(o.Evidence[evidence.ReceiptName]), &receipt); err != nil || receipt.Trajectory != nil {
		t.Errorf("receipt trajectory %+v (%v)", receipt.Trajectory, err)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestUsageIsPriced: a HarnessPolicy over the run's namespace holds a price
// table; Claude Code's hello run through the model gateway ends with
// status.usage.estimatedCost — the fake-provider's figures of each reply at
// the price of the model that answered (a prefix entry covers the dated
// snapshot) — and the signed receipt carries the same (RequireUsage
// compares it whole). A second run, in a namespace whose table has no
// price for that model, has no estimate and says why.
func TestUsageIsPriced(t *testing.T) {
	const key, key2 = "sk-ant-api03-planted-priced-7d1e", "sk-ant-api03-planted-unpriced-2b9f"
	ctx := context.Background()
	mk := func(name, ns string, models ...harnessv1.ModelPrice) {
		p := &harnessv1.HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: harnessv1.HarnessPolicySpec{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			Pricing:           &harnessv1.PolicyPricing{Currency: "USD", Models: models},
		}}
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, p) })
	}
	mk("pricing-priced", "agents-priced",
		harnessv1.ModelPrice{Model: "claude-opus-4-8*", Input: "15", Output: "75", CacheRead: "1.5", CacheWrite: "18.75"},
		harnessv1.ModelPrice{Model: "claude-opus-4-8", Input: "999", Output: "999"}) // the model asked for: not what is priced
	mk("pricing-unpriced", "agents-unpriced", harnessv1.ModelPrice{Model: "gpt-5.5", Input: "1", Output: "1"})

	o := Run(t, Case{Name: "priced", Adapter: harnessv1.AdapterClaudeCode, Fixture: "hello",
		Transport: harnessv1.MCPTransportHTTP, Creds: []Cred{{Env: "ANTHROPIC_API_KEY", Value: key}}})
	RequirePass(t, o)
	RequireUsage(t, o, key)
	want := new(big.Rat)
	for _, r := range o.Requests {
		if r.KeySHA256 != fakeprovider.KeyDigest(key) {
			continue
		}
		// Per million tokens: 15 input, 75 output, 1.5 cache read, 18.75 cache write.
		want.Add(want, big.NewRat(r.Usage.Input*1500+r.Usage.Output*7500+r.Usage.CacheRead*150+r.Usage.CacheWrite*1875, 100_000_000))
	}
	if got := o.Run.Status.Usage.EstimatedCost; got != want.FloatString(6)+" USD" || want.Sign() == 0 {
		t.Errorf("estimatedCost %q, want %s USD", got, want.FloatString(6))
	}
	RequireClean(t, o, key)

	o = Run(t, Case{Name: "unpriced", Adapter: harnessv1.AdapterClaudeCode, Fixture: "hello",
		Transport: harnessv1.MCPTransportHTTP, Creds: []Cred{{Env: "ANTHROPIC_API_KEY", Value: key2}}})
	RequireUsage(t, o, key2)
	if u := o.Run.Status.Usage; u.EstimatedCost != "" {
		t.Errorf("estimatedCost %q without a price for the model", u.EstimatedCost)
	}
	if ag := o.Run.Status.Agent; ag == nil || !slices.ContainsFunc(ag.Notes, func(n string) bool {
		return strings.Contains(n, `no estimated cost: the price table has no price for model "claude-opus-4-8`+fakeprovider.AnsweredSuffix+`"`) && strings.Contains(n, "pricing-unpriced")
	}) {
		t.Errorf("the run does not say why it has no estimate: %+v", o.Run.Status.Agent)
	}
}
