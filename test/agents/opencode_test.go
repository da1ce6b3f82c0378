package agents

import (
	"strings"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// The OpenCode runs: the hello fixture over MCP HTTP (key as env) and Stdio
// (key in OpenCode's auth.json), and a write outside the workspace that
// OpenCode's external_directory rule must refuse. Every request reaches the
// fake provider as Chat Completions through the "harnessfacts" provider.

const (
	openCodeEnvKey  = "hf-planted-opencode-env-5b1f0c9e"
	openCodeFileKey = "hf-planted-opencode-file-7d20aa43"
)

func TestOpenCodeHTTP(t *testing.T) {
	t.Parallel()
	o := Run(t, Case{Name: "opencode-http", Adapter: harnessv1.AdapterOpenCode, Fixture: "hello",
		Transport: harnessv1.MCPTransportHTTP, Creds: []Cred{{Env: "OPENAI_API_KEY", Value: openCodeEnvKey}}})
	RequirePass(t, o)
	RequireToken(t, o, harnessv1.MCPTransportHTTP)
	RequireTrajectory(t, o, "harnessfacts_get_token")
	RequireArtifact(t, o, "greeting.txt", "hello, harness\n")
	openCodeRequireTokenArtifact(t, o)
	openCodeRequireActivity(t, o, 3)
	RequireClean(t, o, openCodeEnvKey)
	RequireKeyArrived(t, o, openCodeEnvKey)
	RequireUsage(t, o, openCodeEnvKey)
	openCodeRequireTools(t, o, "harnessfacts_get_token")
}

func TestOpenCodeStdio(t *testing.T) {
	t.Parallel()
	auth := `{"harnessfacts":{"type":"api","key":"` + openCodeFileKey + `"}}`
	o := Run(t, Case{Name: "opencode-stdio", Adapter: harnessv1.AdapterOpenCode, Fixture: "hello",
		Transport: harnessv1.MCPTransportStdio, Creds: []Cred{{File: harnessv1.CredentialFileOpenCodeAuth, Value: auth}}})
	RequirePass(t, o)
	RequireToken(t, o, harnessv1.MCPTransportStdio)
	RequireTrajectory(t, o, "harnessfacts_get_token")
	RequireArtifact(t, o, "greeting.txt", "hello, harness\n")
	openCodeRequireTokenArtifact(t, o)
	openCodeRequireActivity(t, o, 3)
	RequireClean(t, o, openCodeFileKey, auth)
	RequireKeyArrived(t, o, openCodeFileKey)
	RequireUsage(t, o, openCodeFileKey)
	openCodeRequireTools(t, o, "harnessfacts_get_token")
}

// TestOpenCodeRefusesOutsideWorkspace: the script asks OpenCode's bash tool
// to create a file in the run's HOME (writable in the sandbox, outside the
// workspace); external_directory: deny refuses it (the status counts the
// denial, the output shows it), and the run goes on and writes inside.txt.
func TestOpenCodeRefusesOutsideWorkspace(t *testing.T) {
	t.Parallel()
	o := Run(t, Case{Name: "opencode-outside", Adapter: harnessv1.AdapterOpenCode, Fixture: "outside-workspace",
		Creds: []Cred{{Env: "OPENAI_API_KEY", Value: openCodeEnvKey}}})
	RequirePass(t, o)
	RequireArtifact(t, o, "inside.txt", "inside\n")
	if ag := o.Run.Status.Agent; ag == nil || ag.PermissionDenials < 1 {
		t.Errorf("agent status %+v: want the write outside the workspace counted as a permission denial", ag)
	}
	if !strings.Contains(tailOf(o.Run.Status), "prevents you from using this specific tool call") {
		t.Errorf("the output does not show OpenCode's refusal:\n%s", tailOf(o.Run.Status))
	}
	RequireClean(t, o, openCodeEnvKey)
}

// openCodeRequireTokenArtifact: token.txt was collected with a digest, and
// the token (not known in advance) reached it, which RequireToken's
// tokenSeen already ties to the run's own get_token.
func openCodeRequireTokenArtifact(t *testing.T, o *Outcome) {
	t.Helper()
	for _, a := range o.Run.Status.Artifacts {
		if a.Path == "token.txt" {
			if a.Rejected != "" || len(a.SHA256) != 64 || a.Size < 2 {
				t.Errorf("token.txt artifact %+v", a)
			}
			return
		}
	}
	t.Errorf("token.txt not collected: %+v", o.Run.Status.Artifacts)
}

// openCodeRequireActivity: status shows the CLI's version and what its
// JSON events say it did.
func openCodeRequireActivity(t *testing.T, o *Outcome, minCalls int32) {
	t.Helper()
	ag := o.Run.Status.Agent
	if ag == nil || ag.CLIVersion != "1.18.33" {
		t.Fatalf("agent status %+v: want OpenCode's version", ag)
	}
	if ag.Turns < minCalls+1 || ag.ToolCalls < minCalls || ag.PermissionDenials != 0 {
		t.Errorf("agent status turns %d toolCalls %d denials %d: want at least %d turns, %d tool calls, no denial",
			ag.Turns, ag.ToolCalls, ag.PermissionDenials, minCalls+1, minCalls)
	}
}

// openCodeRequireTools: every task request offered tool and spoke Chat
// Completions.
func openCodeRequireTools(t *testing.T, o *Outcome, tool string) {
	t.Helper()
	if len(o.Requests) == 0 {
		t.Fatal("the provider saw no request")
	}
	for _, r := range o.Requests {
		if r.Dialect != "chat" {
			t.Errorf("request %+v: want Chat Completions", r)
		}
		found := false
		for _, n := range r.Tools {
			found = found || n == tool
		}
		if len(r.Tools) > 0 && !found {
			t.Errorf("request offered %v, not %s", r.Tools, tool)
		}
	}
}

// TestOpenCodeLoadsNoProjectConfig: the fixture's workspace carries an
// opencode.json with an MCP server of its own and a plugin in
// .opencode/plugin. OpenCode starts both at its start, before the model
// decides anything: the fixture author's code ran in the agent's sandbox
// with its home, credentials and MCP token. The adapter turns project
// config off (OPENCODE_DISABLE_PROJECT_CONFIG): the run's config alone
// applies, nothing of the fixture's runs, and its check that none did
// passes.
func TestOpenCodeLoadsNoProjectConfig(t *testing.T) {
	o := Run(t, Case{Name: "opencode-project-config", Adapter: harnessv1.AdapterOpenCode, Fixture: "project-settings",
		Creds: []Cred{{Env: "OPENAI_API_KEY", Value: openCodeEnvKey}}})
	RequirePass(t, o)
	RequireClean(t, o, openCodeEnvKey)
}
