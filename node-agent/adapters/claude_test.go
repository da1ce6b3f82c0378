package adapters

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// claudeStandIn installs a stand-in command in PREFIX/bin, as
// hack/install-agent-clis.sh lays the CLIs out, and returns PREFIX/bin.
func claudeStandIn(t *testing.T, name, script string) string {
	t.Helper()
	prefix := t.TempDir()
	bin := filepath.Join(prefix, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestClaudeCodeVersion(t *testing.T) {
	bin := claudeStandIn(t, "claude", `[ "$1" = --version ] && echo "2.1.197 (Claude Code)"`)
	v, err := NewClaudeCode(Config{CLIDir: bin}).Version(context.Background())
	if err != nil || v != "2.1.197" {
		t.Errorf("version %q, %v; want 2.1.197", v, err)
	}
	if _, err := NewClaudeCode(Config{CLIDir: t.TempDir()}).Version(context.Background()); err == nil {
		t.Error("a folder without claude gave a version")
	}
}

func TestClaudeCodePrepare(t *testing.T) {
	bin := claudeStandIn(t, "claude", "exit 0")
	cmd := filepath.Join(bin, "claude")
	a := NewClaudeCode(Config{CLIDir: bin})
	home := "/runs/r1/home"
	mcpFile := home + "/.claude/harnessfacts-mcp.json"
	httpMCP := MCPEndpoint{Transport: harnessv1.MCPTransportHTTP, URL: "http://127.0.0.1:7700/mcp/s3cr3t-path", Server: "harnessfacts", Tool: "get_token"}
	stdioMCP := MCPEndpoint{Transport: harnessv1.MCPTransportStdio, Command: []string{"/hf", "mcp-stdio", "--socket", "/runs/r1/sockets/mcp-stdio.sock"}, Server: "harnessfacts", Tool: "get_token"}
	quiet := []string{"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1", "DISABLE_BUG_COMMAND=1", "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY=1", "CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1"}
	env := func(extra ...string) []string {
		return append(append([]string{"CLAUDE_CONFIG_DIR=" + home + "/.claude"}, quiet...), extra...)
	}
	cases := []struct {
		name      string
		in        Input
		argv      []string
		env       []string
		files     map[string]string
		hosts     []string
		wantError string
	}{{
		name: "MCP over HTTP, a key, the fake provider",
		in: Input{Prompt: "Edit greeting.txt", Home: home, MCP: httpMCP, MaxDecisions: 40,
			Agent:       harnessv1.AgentSpec{ProviderURL: "http://127.0.0.1:8089/s/hello/"},
			Credentials: []Credential{{Env: "ANTHROPIC_API_KEY", Value: []byte("sk-ant-planted")}}},
		argv: []string{cmd, "-p", "--output-format", "stream-json", "--verbose", "--max-turns", "40",
			"--setting-sources", "user", "--permission-mode", "acceptEdits", "--mcp-config", mcpFile, "--strict-mcp-config",
			"--allowedTools", "Bash,Write,Edit,Read,mcp__harnessfacts__get_token"},
		env:   env("ANTHROPIC_BASE_URL=http://127.0.0.1:8089/s/hello", "ANTHROPIC_API_KEY=sk-ant-planted"),
		files: map[string]string{".claude/harnessfacts-mcp.json": `{"mcpServers":{"harnessfacts":{"type":"http","url":"http://127.0.0.1:7700/mcp/s3cr3t-path"}}}`},
	}, {
		name: "MCP over stdio, a model, extra args, a prompt that looks like a flag",
		in: Input{Prompt: "--help me", Home: home, MCP: stdioMCP, MaxDecisions: 5000,
			Agent: harnessv1.AgentSpec{Model: "claude-sonnet-4-5", ExtraArgs: []string{"--add-dir", "/data"}},
			Credentials: []Credential{{Env: "CLAUDE_CODE_OAUTH_TOKEN", Value: []byte("oauth-planted")},
				{Env: "UNRELATED", Value: []byte("unrelated-planted")}}},
		argv: []string{cmd, "-p", "--output-format", "stream-json", "--verbose", "--max-turns", "5000",
			"--setting-sources", "user", "--permission-mode", "acceptEdits", "--mcp-config", mcpFile, "--strict-mcp-config",
			"--allowedTools", "Bash,Write,Edit,Read,mcp__harnessfacts__get_token",
			"--model", "claude-sonnet-4-5", "--add-dir", "/data"},
		env:   env("CLAUDE_CODE_OAUTH_TOKEN=oauth-planted", "UNRELATED=unrelated-planted"),
		files: map[string]string{".claude/harnessfacts-mcp.json": `{"mcpServers":{"harnessfacts":{"args":["mcp-stdio","--socket","/runs/r1/sockets/mcp-stdio.sock"],"command":"/hf","type":"stdio"}}}`},
		hosts: []string{"api.anthropic.com"},
	}, {
		name: "no MCP, the credentials file, no turn limit",
		in: Input{Prompt: "p", Home: home, MCP: MCPEndpoint{Transport: harnessv1.MCPTransportNone},
			Credentials: []Credential{{File: harnessv1.CredentialFileClaudeCredentials, Value: []byte(`{"claudeAiOauth":{"accessToken":"planted"}}`)}}},
		argv: []string{cmd, "-p", "--output-format", "stream-json", "--verbose",
			"--setting-sources", "user", "--permission-mode", "acceptEdits", "--allowedTools", "Bash,Write,Edit,Read"},
		env:   env(),
		files: map[string]string{".claude/.credentials.json": `{"claudeAiOauth":{"accessToken":"planted"}}`},
		hosts: []string{"api.anthropic.com", "platform.claude.com"},
	}, {
		name: "a provider URL and no credential: a placeholder key",
		in:   Input{Prompt: "p", Home: home, Agent: harnessv1.AgentSpec{ProviderURL: "http://127.0.0.1:8089"}},
		argv: []string{cmd, "-p", "--output-format", "stream-json", "--verbose",
			"--setting-sources", "user", "--permission-mode", "acceptEdits", "--allowedTools", "Bash,Write,Edit,Read"},
		env:   env("ANTHROPIC_BASE_URL=http://127.0.0.1:8089", "ANTHROPIC_API_KEY="+ClaudePlaceholderKey),
		files: map[string]string{},
	}, {
		name:      "another CLI's credential file",
		in:        Input{Prompt: "p", Home: home, Credentials: []Credential{{File: harnessv1.CredentialFileCodexAuth, Value: []byte("{}")}}},
		wantError: "cannot place credential file CodexAuth",
	}, {
		name:      "Anthropic's API and no credential",
		in:        Input{Prompt: "p", Home: home},
		wantError: "needs a credential",
	}, {
		name:      "a relative home",
		in:        Input{Prompt: "p", Home: "home"},
		wantError: "absolute path",
	}}
	for _, tc := range cases {
		inv, err := a.Prepare(tc.in)
		if tc.wantError != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantError) {
				t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.wantError)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if diff := cmp.Diff(tc.argv, inv.Argv); diff != "" {
			t.Errorf("%s: argv (-want +got):\n%s", tc.name, diff)
		}
		if string(inv.Stdin) != tc.in.Prompt {
			t.Errorf("%s: stdin %q, want the prompt", tc.name, inv.Stdin)
		}
		if diff := cmp.Diff(tc.env, inv.Env); diff != "" {
			t.Errorf("%s: env (-want +got):\n%s", tc.name, diff)
		}
		files := map[string]string{}
		for k, v := range inv.Files {
			var compact bytes.Buffer
			if json.Compact(&compact, v) == nil {
				v = compact.Bytes()
			}
			files[k] = string(v)
		}
		if diff := cmp.Diff(tc.files, files); diff != "" {
			t.Errorf("%s: files (-want +got):\n%s", tc.name, diff)
		}
		if diff := cmp.Diff(tc.hosts, inv.ProviderHosts); diff != "" {
			t.Errorf("%s: provider hosts (-want +got):\n%s", tc.name, diff)
		}
		// Nothing secret on the command line: no credential, and not the
		// MCP URL (its path is the run's secret).
		for _, arg := range inv.Argv {
			for _, c := range tc.in.Credentials {
				if strings.Contains(arg, string(c.Value)) {
					t.Errorf("%s: credential %q on the command line", tc.name, c.Value)
				}
			}
			if strings.Contains(arg, "s3cr3t-path") {
				t.Errorf("%s: the MCP URL on the command line: %q", tc.name, arg)
			}
		}
		if len(inv.ReadOnly) == 0 || !slices.Equal(inv.PathDirs, []string{bin}) {
			t.Errorf("%s: read-only %v, path %v: want the install prefix and its bin", tc.name, inv.ReadOnly, inv.PathDirs)
		}
	}
}

func TestClaudeCodeActivity(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	hello := read("claude-hello.jsonl")
	cases := []struct {
		name string
		log  []byte
		want Activity
	}{
		// Recorded from Claude Code 2.1.197 in bwrap against fake-provider's
		// hello script: four replies (Read+Write, get_token, Read+Write,
		// the answer), five tool calls; the result event says num_turns 6.
		{"hello", hello, Activity{Turns: 4, ToolCalls: 5}},
		// Bash not allow-listed: the call is refused and listed.
		{"denied", read("claude-denied.jsonl"), Activity{Turns: 2, ToolCalls: 1, PermissionDenials: 1}},
		// --max-turns 1: the run stops after the first reply (exit 1,
		// subtype error_max_turns).
		{"max turns", read("claude-max-turns.jsonl"), Activity{Turns: 1, ToolCalls: 2}},
		// stderr mixed in, and the log cut in the middle of a line before
		// the result event.
		{"cut", append([]byte("node: warning\n"), hello[:strings.Index(string(hello), `"name":"mcp__harnessfacts__get_token"`)]...), Activity{Turns: 1, ToolCalls: 2}},
		{"not login", []byte(`{"type":"assistant","message":{"id":"x","model":"<synthetic>","content":[{"type":"text","text":"Not logged in · Please run /login"}]}}` + "\n" +
			`{"type":"result","subtype":"success","is_error":true,"num_turns":1,"permission_denials":[]}`), Activity{}},
		{"empty", nil, Activity{}},
	}
	for _, tc := range cases {
		if diff := cmp.Diff(tc.want, NewClaudeCode(Config{}).Activity(tc.log)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestRelativeCLIDirIsMadeAbsolute: --agent-clis bin (relative) names the
// CLI and its prefix by absolute paths, which the sandbox needs; the run
// used to fail with `sandbox: path "." is not absolute`.
func TestRelativeCLIDirIsMadeAbsolute(t *testing.T) {
	bin := claudeStandIn(t, "claude", "exit 0")
	t.Chdir(filepath.Dir(bin))
	inv, err := New(Config{CLIDir: "bin"})[harnessv1.AdapterClaudeCode].Prepare(Input{Prompt: "p", Home: "/runs/r1/home",
		MCP:         MCPEndpoint{Transport: harnessv1.MCPTransportHTTP, URL: "http://127.0.0.1:7700/mcp/x", Server: "harnessfacts", Tool: "get_token"},
		Credentials: []Credential{{Env: "ANTHROPIC_API_KEY", Value: []byte("sk-ant-planted")}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range slices.Concat(inv.Argv[:1], inv.ReadOnly, inv.PathDirs) {
		if !filepath.IsAbs(p) {
			t.Errorf("%q is relative: argv %q, read-only %q, PATH %q", p, inv.Argv, inv.ReadOnly, inv.PathDirs)
		}
	}
}
