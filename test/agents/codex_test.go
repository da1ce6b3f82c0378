package agents

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
)

// The planted Codex credentials: each must reach the provider (as a bearer
// token) and nothing a user or another process can read.
const (
	codexKey     = "sk-hf-planted-codex-5d1e8a3b7c90f246"
	codexFileKey = "sk-hf-planted-codex-file-a83c61e0d2b4"
	codexAltKey  = "sk-hf-planted-codex-alt-4b7e0f93c158"
)

// TestCodexHTTP: Codex CLI edits greeting.txt, calls get_token over
// streamable HTTP and writes the token into token.txt, in bwrap, offline;
// the default model, so in code mode (each call a JavaScript exec); the key
// comes from OPENAI_API_KEY.
func TestCodexHTTP(t *testing.T) {
	o := Run(t, Case{Name: "codex-http", Adapter: harnessv1.AdapterCodex, Fixture: "hello",
		Transport: harnessv1.MCPTransportHTTP, Creds: []Cred{{Env: "OPENAI_API_KEY", Value: codexKey}}})
	requireCodexHello(t, o, harnessv1.MCPTransportHTTP, adapters.CodexDefaultModel)
	RequireClean(t, o, codexKey)
	RequireKeyArrived(t, o, codexKey)
	RequireUsage(t, o, codexKey)
}

// TestCodexStdio: the same with the MCP server on the CLI's stdio, a model
// named in spec.agent.model that Codex drives with function tools (MCP tools
// found through tool_search) and the key in CODEX_API_KEY.
func TestCodexStdio(t *testing.T) {
	o := Run(t, Case{Name: "codex-stdio", Adapter: harnessv1.AdapterCodex, Fixture: "hello",
		Transport: harnessv1.MCPTransportStdio, Model: "gpt-5.5",
		Creds: []Cred{{Env: "CODEX_API_KEY", Value: codexAltKey}}})
	requireCodexHello(t, o, harnessv1.MCPTransportStdio, "gpt-5.5")
	RequireClean(t, o, codexAltKey)
	RequireKeyArrived(t, o, codexAltKey)
	RequireUsage(t, o, codexAltKey)
}

// TestCodexAuthFile: the key comes in Codex's own login file (CodexAuth),
// which the adapter copies as CODEX_HOME/auth.json and nothing else.
func TestCodexAuthFile(t *testing.T) {
	auth := fmt.Sprintf(`{"OPENAI_API_KEY": %q}`, codexFileKey)
	o := Run(t, Case{Name: "codex-authfile", Adapter: harnessv1.AdapterCodex, Fixture: "hello",
		Transport: harnessv1.MCPTransportHTTP, Creds: []Cred{{File: harnessv1.CredentialFileCodexAuth, Value: auth}}})
	requireCodexHello(t, o, harnessv1.MCPTransportHTTP, adapters.CodexDefaultModel)
	RequireClean(t, o, codexFileKey, auth)
	RequireKeyArrived(t, o, codexFileKey)
	RequireUsage(t, o, codexFileKey)
}

// TestCodexWithoutCredentials: against a providerURL, Codex needs no key
// (the no-credentials demo): its provider has no env_key and it sends none.
func TestCodexWithoutCredentials(t *testing.T) {
	o := Run(t, Case{Name: "codex-nocreds", Adapter: harnessv1.AdapterCodex, Fixture: "hello", Transport: harnessv1.MCPTransportHTTP})
	requireCodexHello(t, o, harnessv1.MCPTransportHTTP, adapters.CodexDefaultModel)
	RequireClean(t, o)
	for _, r := range o.Requests {
		if r.AuthHeader != "" {
			t.Errorf("a request carried a credential in %s: %+v", r.AuthHeader, r)
		}
	}
}

// requireCodexHello checks a passing hello run of Codex CLI: the greeting,
// the token in token.txt (the token is not known in advance: token.txt's
// stored content is a token, its digest is the status's, and Codex's own
// JSONL shows the same token coming back from get_token), the CLI version,
// the activity parsed from --json, the sandbox note, and the calls the
// provider answered.
func requireCodexHello(t *testing.T, o *Outcome, transport harnessv1.MCPTransport, model string) {
	t.Helper()
	RequirePass(t, o)
	RequireToken(t, o, transport)
	RequireArtifact(t, o, "greeting.txt", "hello, harness\n")
	RequireTrajectory(t, o, "mcp__harnessfacts__get_token")
	if rep := evidence.VerifyConfigMap(o.Evidence, nil, o.Run.Status.Evidence.Digest); !rep.OK() {
		t.Errorf("evidence: %v", rep.Err())
	}
	token := evidenceArtifact(t, o, "token.txt")
	if !mcpTokenRE.MatchString(token) {
		t.Errorf("token.txt holds %q, want the MCP token alone on a line", token)
	}
	RequireArtifact(t, o, "token.txt", token)
	if out := o.Evidence[evidence.OutputName]; !strings.Contains(out, fmt.Sprintf(`"tool":"get_token","arguments":{},"result":{"content":[{"type":"text","text":%q}]`, strings.TrimSpace(token))) {
		t.Errorf("Codex's output does not show get_token returning %q:\n%s", strings.TrimSpace(token), out)
	}
	ag := o.Run.Status.Agent
	if ag == nil || ag.CLIVersion != "0.171.0" {
		t.Fatalf("agent status %+v, want CLI version 0.171.0", ag)
	}
	// One Codex turn (the whole prompt); write, get_token, write.
	if ag.Turns != 1 || ag.ToolCalls != 3 || ag.PermissionDenials != 0 {
		t.Errorf("turns %d tool calls %d denials %d, want 1, 3, 0", ag.Turns, ag.ToolCalls, ag.PermissionDenials)
	}
	if !slices.Contains(ag.Notes, adapters.CodexSandboxNote) || !slices.Contains(ag.Notes, adapters.CodexTurnsNote) {
		t.Errorf("status.agent.notes %q lack the notes that Codex's own sandbox was off and that it has no turn limit", ag.Notes)
	}
	var calls []string
	for _, r := range o.Requests {
		if r.Dialect != "responses" || r.Status != 200 || r.Error != "" {
			t.Errorf("provider request %+v", r)
		}
		if r.Model != model {
			t.Errorf("request for model %q, want %q", r.Model, model)
		}
		calls = append(calls, r.Tool)
	}
	want := "exec:exec_command exec:mcp__harnessfacts__get_token exec:exec_command "
	if model == "gpt-5.5" {
		want = "exec_command tool_search mcp__harnessfacts__get_token exec_command "
	}
	if strings.Join(calls, " ") != want {
		t.Errorf("tools called %q, want %q:\n%s", strings.Join(calls, " "), want, requests(o))
	}
}
