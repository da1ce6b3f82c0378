package agents

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/fakeprovider"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
)

// The planted Gemini API keys: each must reach the provider (as
// x-goog-api-key) and nothing a user or another process can read.
const (
	geminiKey      = "hf-planted-gemini-3f9a0c1d5e7b2468"
	geminiTurnsKey = "hf-planted-gemini-turns-0b8e61f2a4c7"
)

// TestGeminiHTTP: Gemini CLI edits greeting.txt, calls get_token over
// streamable HTTP and writes the token into token.txt, in bwrap, offline.
func TestGeminiHTTP(t *testing.T) {
	o := Run(t, Case{Name: "gemini-http", Adapter: harnessv1.AdapterGemini, Fixture: "hello",
		Transport: harnessv1.MCPTransportHTTP, Creds: []Cred{{Env: "GEMINI_API_KEY", Value: geminiKey}}})
	requireGeminiHello(t, o, harnessv1.MCPTransportHTTP)
	RequireClean(t, o, geminiKey)
	RequireKeyArrived(t, o, geminiKey)
	RequireUsage(t, o, geminiKey)
}

// TestGeminiStdio: the same with the MCP server on the CLI's stdio, and no
// credential at all (the adapter gives the CLI a placeholder key for the
// scripted provider).
func TestGeminiStdio(t *testing.T) {
	o := Run(t, Case{Name: "gemini-stdio", Adapter: harnessv1.AdapterGemini, Fixture: "hello",
		Transport: harnessv1.MCPTransportStdio, Model: "gemini-2.5-flash"})
	requireGeminiHello(t, o, harnessv1.MCPTransportStdio)
	RequireClean(t, o)
	requireModels(t, o, "")
	for _, r := range geminiRequests(o) {
		if r.Model != "gemini-2.5-flash" {
			t.Errorf("request for model %q, want spec.agent.model gemini-2.5-flash: %+v", r.Model, r)
		}
	}
}

// TestGeminiTurnLimit: maxDecisions becomes model.maxSessionTurns, so the
// CLI stops after two model turns (before writing token.txt) and the run
// does not pass.
func TestGeminiTurnLimit(t *testing.T) {
	o := Run(t, Case{Name: "gemini-turns", Adapter: harnessv1.AdapterGemini, Fixture: "hello",
		Transport: harnessv1.MCPTransportHTTP, MaxDecisions: 2, Creds: []Cred{{Env: "GEMINI_API_KEY", Value: geminiTurnsKey}}})
	st := o.Run.Status
	if st.Verdict == harnessv1.VerdictPass {
		t.Fatalf("verdict Pass with a two-turn limit; provider saw:\n%s", requests(o))
	}
	if st.Agent == nil || st.Agent.ExitCode == nil || *st.Agent.ExitCode != 53 {
		t.Errorf("agent %+v, want Gemini CLI's turn-limit exit code 53", st.Agent)
	}
	if n := len(geminiRequests(o)); n != 2 {
		t.Errorf("%d provider requests, want 2:\n%s", n, requests(o))
	}
	if st.Agent != nil && (st.Agent.Turns != 2 || st.Agent.ToolCalls != 2) {
		t.Errorf("turns %d tool calls %d, want 2 and 2", st.Agent.Turns, st.Agent.ToolCalls)
	}
	RequireClean(t, o, geminiTurnsKey)
	RequireKeyArrived(t, o, geminiTurnsKey)
	RequireUsage(t, o, geminiTurnsKey)
}

// TestGeminiCredentialFileRefused: Gemini CLI has no login file a run can
// carry (its key is env GEMINI_API_KEY): the API refuses a gemini run that
// asks for a credential file, before anything runs. The adapter refuses
// one as well (node-agent/adapters' unit test).
func TestGeminiCredentialFileRefused(t *testing.T) {
	for _, f := range []harnessv1.CredentialFile{harnessv1.CredentialFileCodexAuth, harnessv1.CredentialFileClaudeCredentials, harnessv1.CredentialFileOpenCodeAuth} {
		run := &harnessv1.HarnessRun{
			ObjectMeta: metav1.ObjectMeta{Name: "gemini-file", Namespace: "default"},
			Spec: harnessv1.HarnessRunSpec{
				Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterGemini, Credentials: []harnessv1.Credential{{
					SecretKeyRef: harnessv1.SecretKeySelector{Name: "creds", Key: "k0"}, File: f,
				}}},
				Fixture: harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "fixture-hello"}},
			},
		}
		err := k8s.Create(context.Background(), run)
		if err == nil || !strings.Contains(err.Error(), "credential file "+string(f)) {
			t.Errorf("%s: create: %v, want the API to refuse the credential file", f, err)
		}
	}
}

var mcpTokenRE = regexp.MustCompile(`^hft_[A-Za-z0-9_-]+\n$`)

// requireGeminiHello checks a passing hello run of Gemini CLI: the
// greeting, the token in token.txt (the token is not known in advance:
// token.txt's stored content is a token, its digest is the status's, and
// the CLI's own output shows the same token coming back from get_token),
// the CLI version and the activity parsed from stream-json.
func requireGeminiHello(t *testing.T, o *Outcome, transport harnessv1.MCPTransport) {
	t.Helper()
	RequirePass(t, o)
	RequireToken(t, o, transport)
	RequireArtifact(t, o, "greeting.txt", "hello, harness\n")
	RequireTrajectory(t, o, "mcp_harnessfacts_get_token")
	if rep := evidence.VerifyConfigMap(o.Evidence, nil, o.Run.Status.Evidence.Digest); !rep.OK() {
		t.Errorf("evidence: %v", rep.Err())
	}
	token := evidenceArtifact(t, o, "token.txt")
	if !mcpTokenRE.MatchString(token) {
		t.Errorf("token.txt holds %q, want the MCP token alone on a line", token)
	}
	RequireArtifact(t, o, "token.txt", token)
	if out := o.Evidence[evidence.OutputName]; !strings.Contains(out, fmt.Sprintf(`"output":%q`, strings.TrimSpace(token))) {
		t.Errorf("the CLI's output does not show get_token returning %q:\n%s", strings.TrimSpace(token), out)
	}
	ag := o.Run.Status.Agent
	if ag == nil || ag.CLIVersion != "0.61.0" {
		t.Errorf("agent status %+v, want CLI version 0.61.0", ag)
	} else if ag.Turns != 4 || ag.ToolCalls != 3 || ag.PermissionDenials != 0 {
		t.Errorf("turns %d tool calls %d denials %d, want 4, 3, 0 (write, get_token, write, answer)", ag.Turns, ag.ToolCalls, ag.PermissionDenials)
	}
	var calls []string
	for _, r := range geminiRequests(o) {
		if r.Status != 200 || r.Error != "" {
			t.Errorf("provider request %+v", r)
		}
		calls = append(calls, r.Tool)
	}
	if want := "write_file mcp_harnessfacts_get_token write_file "; strings.Join(calls, " ") != want {
		t.Errorf("tools called %q, want %q:\n%s", strings.Join(calls, " "), want, requests(o))
	}
}

// evidenceArtifact is the stored content of the artifact at path, from the
// evidence ConfigMap (key artifact-NN, NN its index in the receipt).
func evidenceArtifact(t *testing.T, o *Outcome, path string) string {
	t.Helper()
	var receipt struct {
		Artifacts []struct {
			Path string `json:"path"`
		} `json:"artifacts"`
	}
	if err := json.Unmarshal([]byte(o.Evidence[evidence.ReceiptName]), &receipt); err != nil {
		t.Fatalf("receipt: %v", err)
	}
	for i, a := range receipt.Artifacts {
		if a.Path == path {
			v, ok := o.Evidence[fmt.Sprintf("artifact-%02d", i)]
			if !ok {
				t.Fatalf("artifact %s is not stored in the evidence", path)
			}
			return v
		}
	}
	t.Fatalf("artifact %s is not in the receipt", path)
	return ""
}

// geminiRequests are the run's provider requests in the Gemini dialect
// (Run gathers every request to the fixture's script while the run was
// active, whichever CLI sent it).
func geminiRequests(o *Outcome) []fakeprovider.Record {
	var out []fakeprovider.Record
	for _, r := range o.Requests {
		if r.Dialect == "gemini" {
			out = append(out, r)
		}
	}
	return out
}

// TestGeminiKeepsTheRunsSettings: the fixture's workspace carries
// .gemini/settings.json whose SessionStart hook, MCP server and tool
// discovery command would each run the fixture author's command in the
// agent's sandbox before the model decides anything, and which turns the
// run's own settings back (local .env files). Nothing of it runs, and the
// fixture's check that none did passes. Gemini CLI 0.61 does not load an
// untrusted workspace's settings at all (the folder trust is judged before
// --skip-trust is read), so this holds without the adapter's pins too;
// they are system settings, which override the workspace's, for a CLI that
// loads them.
func TestGeminiKeepsTheRunsSettings(t *testing.T) {
	o := Run(t, Case{Name: "gemini-project-settings", Adapter: harnessv1.AdapterGemini, Fixture: "project-settings",
		Creds: []Cred{{Env: "GEMINI_API_KEY", Value: geminiKey}}})
	RequirePass(t, o)
	if out := o.Evidence["output.log"]; strings.Contains(out, "gemini-hook") || strings.Contains(out, "gemini-mcp") || strings.Contains(out, "gemini-discovery") {
		t.Errorf("a command of the fixture's settings ran:\n%s", out)
	}
	RequireClean(t, o, geminiKey)
}
