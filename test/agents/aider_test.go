package agents

import (
	"strings"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// The Aider runs. Aider has no tools: the fake provider's Chat Completions
// dialect answers its whole-file edit format with the script's writes as
// text. It has no MCP either: a run that asks for MCP must say so.

const aiderKey = "hf-planted-aider-env-3e9a7c51"

// aiderAnthropicKey is TestAiderAnthropicKeyAtProviderURL's own: it runs
// beside TestAiderEdit on the same fixture, and the provider's records of
// the two are told apart by their key.
const aiderAnthropicKey = "hf-planted-aider-anth-8d2f4b60"

func TestAiderEdit(t *testing.T) {
	t.Parallel()
	o := Run(t, Case{Name: "aider-edit", Adapter: harnessv1.AdapterAider, Fixture: "edit",
		Creds: []Cred{{Env: "OPENAI_API_KEY", Value: aiderKey}}})
	RequirePass(t, o)
	RequireArtifact(t, o, "greeting.txt", "hello, harness\n")
	RequireClean(t, o, aiderKey)
	RequireKeyArrived(t, o, aiderKey)
	RequireUsage(t, o, aiderKey)
	aiderRequireStatus(t, o)
	requireNoTrajectory(t, o)
	if len(o.Requests) == 0 || o.Requests[0].Dialect != "chat" || o.Requests[0].Tool != "aider-whole-file" {
		t.Errorf("the provider did not answer Aider's whole-file format:\n%s", requests(o))
	}
	if m := o.Run.Status.MCP; m == nil || m.Message != "the run asked for no MCP server" {
		t.Errorf("MCP status %+v", m)
	}
}

// TestAiderAnthropicKeyAtProviderURL: a run that delivers only
// ANTHROPIC_API_KEY reaches the provider URL (openai/NAME) with that key.
func TestAiderAnthropicKeyAtProviderURL(t *testing.T) {
	t.Parallel()
	o := Run(t, Case{Name: "aider-anthkey", Adapter: harnessv1.AdapterAider, Fixture: "edit",
		Creds: []Cred{{Env: "ANTHROPIC_API_KEY", Value: aiderAnthropicKey}}})
	RequirePass(t, o)
	RequireClean(t, o, aiderAnthropicKey)
	RequireKeyArrived(t, o, aiderAnthropicKey)
	RequireUsage(t, o, aiderAnthropicKey)
}

// TestAiderMCPUnsupported: hello asks for MCP over HTTP. Aider runs without
// it (greeting.txt is edited, token.txt is not), and status says plainly
// that Aider has no MCP support; the verdict is not Pass.
func TestAiderMCPUnsupported(t *testing.T) {
	t.Parallel()
	o := Run(t, Case{Name: "aider-hello", Adapter: harnessv1.AdapterAider, Fixture: "hello",
		Transport: harnessv1.MCPTransportHTTP, Creds: []Cred{{Env: "OPENAI_API_KEY", Value: aiderKey}}})
	st := o.Run.Status
	if st.Verdict == harnessv1.VerdictPass {
		t.Fatalf("an Aider run that asked for MCP passed: %s", st.Message)
	}
	if st.Phase != harnessv1.RunSucceeded || st.Verdict != harnessv1.VerdictFail || st.Reason != harnessv1.ReasonMCPUnsupported ||
		!strings.Contains(st.Message, "Aider has no MCP support") {
		t.Errorf("phase %s verdict %s reason %s: %s; want Fail, MCPUnsupported, saying Aider has no MCP support",
			st.Phase, st.Verdict, st.Reason, st.Message)
	}
	if st.MCP == nil || st.MCP.Calls != 0 || st.MCP.TokenSeen || !strings.Contains(st.MCP.Message, "Aider has no MCP support") {
		t.Errorf("MCP status %+v", st.MCP)
	}
	found := false
	for _, c := range st.Conditions {
		if c.Type == harnessv1.ConditionMCPVerified {
			found = true
			if c.Status != "False" || c.Reason != harnessv1.ReasonMCPUnsupported {
				t.Errorf("condition %+v", c)
			}
		}
	}
	if !found {
		t.Errorf("no %s condition: %+v", harnessv1.ConditionMCPVerified, st.Conditions)
	}
	if ag := st.Agent; ag == nil || len(ag.Notes) == 0 || !strings.HasPrefix(ag.Notes[0], "Aider has no MCP support") {
		t.Errorf("agent status %+v: want the note that Aider has no MCP support", ag)
	}
	// What Aider could do, it did.
	RequireArtifact(t, o, "greeting.txt", "hello, harness\n")
	RequireClean(t, o, aiderKey)
	aiderRequireStatus(t, o)
}

func aiderRequireStatus(t *testing.T, o *Outcome) {
	t.Helper()
	if ag := o.Run.Status.Agent; ag == nil || ag.CLIVersion != "0.86.2" {
		t.Errorf("agent status %+v: want Aider's version", ag)
	}
}
