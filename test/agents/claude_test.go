package agents

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Claude Code (claude-code adapter) through the whole path: the real CLI in
// bwrap with egress ProviderOnly, the fake provider's Anthropic Messages
// dialect, the run's MCP server over HTTP and over stdio.

// claudeCredentialsFile is a .credentials.json like the one
// `claude setup-token` leaves: an OAuth token scoped to inference only.
// (A full login's token also has user:profile, with which Claude Code
// fetches the account profile from api.anthropic.com at start.)
func claudeCredentialsFile(access, refresh string) string {
	return fmt.Sprintf(`{"claudeAiOauth":{"accessToken":%q,"refreshToken":%q,"expiresAt":4102444800000,"scopes":["user:inference"],"subscriptionType":null}}`, access, refresh)
}

func TestClaudeCodeMCPOverHTTP(t *testing.T) {
	const key = "sk-ant-api03-planted-claude-http-5e0b71d2"
	o := Run(t, Case{Name: "claude-http", Adapter: harnessv1.AdapterClaudeCode, Fixture: "hello",
		Transport: harnessv1.MCPTransportHTTP, Creds: []Cred{{Env: "ANTHROPIC_API_KEY", Value: key}}})
	requireClaudeHello(t, o, harnessv1.MCPTransportHTTP)
	RequireTrajectory(t, o, "mcp__harnessfacts__get_token")
	RequireKeyArrived(t, o, key)
	RequireUsage(t, o, key)
	RequireClean(t, o, key)
	for _, r := range o.Requests {
		if r.AuthHeader != "x-api-key" {
			t.Errorf("request %s carried its key in %q, want x-api-key", r.Path, r.AuthHeader)
		}
	}
}

func TestClaudeCodeMCPOverStdioWithTheCredentialsFile(t *testing.T) {
	const access, refresh = "sk-ant-oat01-planted-claude-file-8f2d", "sk-ant-ort01-planted-claude-refresh-41c9"
	file := claudeCredentialsFile(access, refresh)
	o := Run(t, Case{Name: "claude-stdio", Adapter: harnessv1.AdapterClaudeCode, Fixture: "hello",
		Transport: harnessv1.MCPTransportStdio, Creds: []Cred{{File: harnessv1.CredentialFileClaudeCredentials, Value: file}}})
	requireClaudeHello(t, o, harnessv1.MCPTransportStdio)
	RequireTrajectory(t, o, "mcp__harnessfacts__get_token")
	// The file's access token is what reaches the provider, as a bearer token.
	RequireKeyArrived(t, o, access)
	RequireUsage(t, o, access)
	RequireClean(t, o, file, access, refresh)
	for _, r := range o.Requests {
		if r.AuthHeader != "authorization" {
			t.Errorf("request %s carried its key in %q, want authorization", r.Path, r.AuthHeader)
		}
	}
}

// TestClaudeCodeStopsAtMaxDecisions: limits.maxDecisions is Claude Code's
// --max-turns. With 1 the CLI stops after its first reply (greeting.txt
// written, get_token never called) and exits 1: the run fails, and its
// status says what the agent did.
func TestClaudeCodeStopsAtMaxDecisions(t *testing.T) {
	const token = "sk-ant-oat01-planted-claude-env-0c77a3"
	o := Run(t, Case{Name: "claude-max-turns", Adapter: harnessv1.AdapterClaudeCode, Fixture: "hello",
		Transport: harnessv1.MCPTransportHTTP, MaxDecisions: 1,
		Creds: []Cred{{Env: "CLAUDE_CODE_OAUTH_TOKEN", Value: token}}})
	st := o.Run.Status
	if st.Verdict == harnessv1.VerdictPass {
		t.Fatalf("verdict Pass after one turn: %s", st.Message)
	}
	if st.Agent == nil || st.Agent.ExitCode == nil || *st.Agent.ExitCode != 1 || st.Agent.Turns != 1 || st.Agent.ToolCalls != 2 {
		t.Errorf("agent status %+v, want exit code 1 after 1 turn of 2 tool calls", st.Agent)
	}
	if st.Agent != nil && !strings.Contains(st.Agent.OutputTail, `"subtype":"error_max_turns"`) {
		t.Errorf("the output does not say the turn limit ended the run:\n%s", st.Agent.OutputTail)
	}
	if st.MCP == nil || st.MCP.Calls != 0 {
		t.Errorf("MCP status %+v, want no call", st.MCP)
	}
	RequireArtifact(t, o, "greeting.txt", "hello, harness\n")
	RequireKeyArrived(t, o, token)
	RequireUsage(t, o, token)
	RequireClean(t, o, token)
}

// requireClaudeHello checks a hello run of Claude Code: it passed in bwrap,
// called get_token over transport and wrote the token it got, the provider
// was asked exactly the script's four turns (no side request: nonessential
// traffic is off), and status reports the CLI's version and activity.
func requireClaudeHello(t *testing.T, o *Outcome, transport harnessv1.MCPTransport) {
	t.Helper()
	RequirePass(t, o)
	RequireToken(t, o, transport)
	RequireArtifact(t, o, "greeting.txt", "hello, harness\n")
	token := evidenceArtifact(t, o, "token.txt")
	if !regexp.MustCompile(`^hft_[A-Za-z0-9_-]{16,}\n$`).MatchString(token) {
		t.Errorf("token.txt holds %q, want the get_token token on one line", token)
	}
	RequireArtifact(t, o, "token.txt", token)
	if !strings.Contains(o.Evidence["output.log"], strings.TrimSpace(token)) {
		t.Error("the token in token.txt is not the one get_token returned in the agent's output")
	}

	var got []string
	for _, r := range o.Requests {
		if r.Dialect != "anthropic" {
			continue // another CLI's run of the same fixture, at the same time
		}
		if r.Status != 200 || r.Error != "" {
			t.Errorf("provider request %+v", r)
		}
		got = append(got, fmt.Sprintf("%d %s %s", r.Results, r.Action, r.Tool))
	}
	want := []string{"0 write Write", "1 mcp mcp__harnessfacts__get_token", "2 write Write", "3 answer "}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("provider requests (-want +got):\n%s\n%s", diff, requests(o))
	}

	ag := o.Run.Status.Agent
	version, err := registry[harnessv1.AdapterClaudeCode].Version(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Four replies: Read+Write greeting.txt, get_token, Read+Write token.txt, the answer.
	if ag == nil || ag.CLIVersion != version || ag.Turns != 4 || ag.ToolCalls != 5 || ag.PermissionDenials != 0 {
		t.Errorf("agent status %+v, want CLI version %s, 4 turns, 5 tool calls, no permission denial", ag, version)
	}
}

// TestClaudeCodeLoadsNoProjectSettings: the fixture's workspace carries
// .claude/settings.json with a SessionStart hook. Claude Code runs project
// hooks by itself, before the model decides anything, in the agent's
// sandbox with its home, credentials and MCP token: a fixture forged
// MCPVerified and took the run author's login that way. The adapter loads
// the run's own settings only (--setting-sources user), so the hook never
// runs and the fixture's check that it did not passes.
func TestClaudeCodeLoadsNoProjectSettings(t *testing.T) {
	const key = "sk-ant-api03-planted-claude-settings-77e1"
	o := Run(t, Case{Name: "claude-project-settings", Adapter: harnessv1.AdapterClaudeCode, Fixture: "project-settings",
		Creds: []Cred{{Env: "ANTHROPIC_API_KEY", Value: key}}})
	RequirePass(t, o)
	if out := o.Evidence["output.log"]; strings.Contains(out, "hook_started") || strings.Contains(out, "hook ran") {
		t.Errorf("the fixture's project hook ran:\n%s", out)
	}
	RequireClean(t, o, key)
}
