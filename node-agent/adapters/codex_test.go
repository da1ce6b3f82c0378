package adapters

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/pelletier/go-toml/v2"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// codexCLI makes a CLI folder whose codex prints what codex 0.171.0 prints
// for --version.
func codexCLI(t *testing.T) (dir, cmd string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd = filepath.Join(dir, "codex")
	if err := os.WriteFile(cmd, []byte("#!/bin/sh\necho 'codex-cli 0.171.0'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, cmd
}

// codexConfig parses the config.toml Prepare wrote.
func codexConfig(t *testing.T, inv *Invocation) map[string]any {
	t.Helper()
	b, ok := inv.Files[".codex/config.toml"]
	if !ok {
		t.Fatalf("no .codex/config.toml among %v", inv.Files)
	}
	var cfg map[string]any
	if err := toml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("config.toml is not TOML: %v\n%s", err, b)
	}
	return cfg
}

// codexDig follows keys through nested tables.
func codexDig(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		t, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = t[k]
	}
	return v
}

const codexSecret = "sk-planted-codex-secret-value"

func TestCodexPrepareHTTP(t *testing.T) {
	dir, cmd := codexCLI(t)
	inv, err := NewCodex(Config{CLIDir: dir}).Prepare(Input{
		Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex, ProviderURL: "http://127.0.0.1:8089/s/hello/",
			ExtraArgs: []string{"-c", "model_reasoning_effort=\"low\""}},
		Prompt:    "-fix it",
		Workspace: "/run/w",
		Home:      "/run/home",
		MCP: MCPEndpoint{Transport: harnessv1.MCPTransportHTTP, URL: "http://127.0.0.1:7700/mcp/abc",
			Server: "harnessfacts", Tool: "get_token"},
		MaxDecisions: 7,
		Credentials:  []Credential{{Env: "OPENAI_API_KEY", Value: []byte(codexSecret)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{cmd, "exec", "--json", "--skip-git-repo-check", "--ephemeral", "--color", "never",
		"-s", "danger-full-access", "-m", CodexDefaultModel, "-C", "/run/w",
		"-c", "model_reasoning_effort=\"low\"", "--", "-"}
	if diff := cmp.Diff(want, inv.Argv); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	if string(inv.Stdin) != "-fix it" {
		t.Errorf("stdin %q, want the prompt", inv.Stdin)
	}
	if strings.Contains(strings.Join(inv.Argv, " "), codexSecret) {
		t.Error("a credential is on the command line")
	}
	if diff := cmp.Diff([]string{"CODEX_HOME=/run/home/.codex", "OPENAI_API_KEY=" + codexSecret}, inv.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	cfg := codexConfig(t, inv)
	for keys, want := range map[string]any{
		// The provider: the providerURL's /v1, Responses, the key's variable.
		"model_provider":                                    "harnessfacts",
		"model_providers.harnessfacts.base_url":             "http://127.0.0.1:8089/s/hello/v1",
		"model_providers.harnessfacts.wire_api":             "responses",
		"model_providers.harnessfacts.env_key":              "OPENAI_API_KEY",
		"model_providers.harnessfacts.requires_openai_auth": nil,
		// The MCP server, its one tool approved in its own table.
		"mcp_servers.harnessfacts.url":                           "http://127.0.0.1:7700/mcp/abc",
		"mcp_servers.harnessfacts.command":                       nil,
		"mcp_servers.harnessfacts.tools.get_token.approval_mode": "approve",
		// Quiet, and credentials in files of the run's CODEX_HOME.
		"check_for_update_on_startup": false,
		"analytics.enabled":           false,
		"features.plugins":            false,
		"cli_auth_credentials_store":  "file",
		"web_search":                  "disabled",
	} {
		if got := codexDig(cfg, strings.Split(keys, ".")...); !cmp.Equal(got, want) {
			t.Errorf("config.toml %s = %v, want %v", keys, got, want)
		}
	}
	if got := codexDig(cfg, "shell_environment_policy", "exclude"); !cmp.Equal(got, []any{"OPENAI_API_KEY", "CODEX_API_KEY"}) {
		t.Errorf("shell_environment_policy.exclude %v, want the key variables kept from Codex's commands", got)
	}
	if got := codexDig(cfg, "mcp_servers", "harnessfacts", "enabled_tools"); !cmp.Equal(got, []any{"get_token"}) {
		t.Errorf("enabled_tools %v", got)
	}
	if strings.Contains(string(inv.Files[".codex/config.toml"]), codexSecret) {
		t.Error("a credential is in config.toml")
	}
	if _, ok := inv.Files[".codex/auth.json"]; ok || len(inv.Files) != 1 {
		t.Errorf("files %v, want config.toml alone", inv.Files)
	}
	if len(inv.ProviderHosts) != 0 {
		t.Errorf("provider hosts %v with a providerURL", inv.ProviderHosts)
	}
	if diff := cmp.Diff([]string{CodexSandboxNote, CodexTurnsNote}, inv.Notes); diff != "" {
		t.Errorf("notes (-want +got):\n%s", diff)
	}
	if inv.MCPUnsupported {
		t.Error("MCP marked unsupported")
	}
	if diff := cmp.Diff([]string{filepath.Dir(dir)}, inv.ReadOnly); diff != "" {
		t.Errorf("read-only (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{dir}, inv.PathDirs); diff != "" {
		t.Errorf("path dirs (-want +got):\n%s", diff)
	}
}

func TestCodexPrepareStdioAndModel(t *testing.T) {
	dir, _ := codexCLI(t)
	inv, err := NewCodex(Config{CLIDir: dir}).Prepare(Input{
		Agent:  harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex, Model: "gpt-6.2-sol", ProviderURL: "http://127.0.0.1:1"},
		Prompt: "p", Workspace: "/w", Home: "/h",
		MCP: MCPEndpoint{Transport: harnessv1.MCPTransportStdio, Command: []string{"/bin/harnessfacts", "mcp-stdio", "--socket", "/s"},
			Server: "harnessfacts", Tool: "get_token"},
		Credentials: []Credential{{Env: "CODEX_API_KEY", Value: []byte(codexSecret)}, {Env: "OTHER", Value: []byte("x")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if i := codexIndexOf(inv.Argv, "-m"); i < 0 || inv.Argv[i+1] != "gpt-6.2-sol" {
		t.Errorf("argv %q, want -m gpt-6.2-sol", inv.Argv)
	}
	cfg := codexConfig(t, inv)
	if got := codexDig(cfg, "mcp_servers", "harnessfacts", "command"); got != "/bin/harnessfacts" {
		t.Errorf("command %v", got)
	}
	if got := codexDig(cfg, "mcp_servers", "harnessfacts", "args"); !cmp.Equal(got, []any{"mcp-stdio", "--socket", "/s"}) {
		t.Errorf("args %v", got)
	}
	if got := codexDig(cfg, "mcp_servers", "harnessfacts", "url"); got != nil {
		t.Errorf("url %v for stdio", got)
	}
	if got := codexDig(cfg, "mcp_servers", "harnessfacts", "tools", "get_token", "approval_mode"); got != "approve" {
		t.Errorf("approval_mode %v", got)
	}
	if got := codexDig(cfg, "model_providers", "harnessfacts", "env_key"); got != "CODEX_API_KEY" {
		t.Errorf("env_key %v, want CODEX_API_KEY", got)
	}
	if diff := cmp.Diff([]string{"CODEX_HOME=/h/.codex", "CODEX_API_KEY=" + codexSecret, "OTHER=x"}, inv.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

func TestCodexPrepareAuthFile(t *testing.T) {
	dir, _ := codexCLI(t)
	auth := []byte(`{"OPENAI_API_KEY":"` + codexSecret + `"}`)
	for name, tc := range map[string]struct {
		providerURL string
		env         bool
		wantHosts   []string
		wantEnvKey  any
		wantAuth    any
	}{
		"provider URL":         {providerURL: "http://127.0.0.1:1", wantAuth: true},
		"provider URL and env": {providerURL: "http://127.0.0.1:1", env: true, wantEnvKey: "OPENAI_API_KEY"},
		"OpenAI":               {wantHosts: []string{"api.openai.com", "chatgpt.com", "auth.openai.com"}},
	} {
		creds := []Credential{{File: harnessv1.CredentialFileCodexAuth, Value: auth}}
		if tc.env {
			creds = append(creds, Credential{Env: "OPENAI_API_KEY", Value: []byte("sk-other")})
		}
		inv, err := NewCodex(Config{CLIDir: dir}).Prepare(Input{
			Agent:  harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex, ProviderURL: tc.providerURL},
			Prompt: "p", Workspace: "/w", Home: "/h", Credentials: creds,
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := inv.Files[".codex/auth.json"]; string(got) != string(auth) {
			t.Errorf("%s: auth.json %q, want the credential as it is", name, got)
		}
		if strings.Contains(strings.Join(inv.Argv, " ")+strings.Join(inv.Env, " "), codexSecret) {
			t.Errorf("%s: the file's credential is on the command line or in the env", name)
		}
		cfg := codexConfig(t, inv)
		if got := codexDig(cfg, "model_providers", "harnessfacts", "env_key"); got != tc.wantEnvKey {
			t.Errorf("%s: env_key %v, want %v", name, got, tc.wantEnvKey)
		}
		if got := codexDig(cfg, "model_providers", "harnessfacts", "requires_openai_auth"); got != tc.wantAuth {
			t.Errorf("%s: requires_openai_auth %v, want %v", name, got, tc.wantAuth)
		}
		if tc.providerURL == "" && (codexDig(cfg, "model_provider") != nil || codexDig(cfg, "model_providers") != nil) {
			t.Errorf("%s: a provider of its own without a providerURL: %v", name, cfg)
		}
		if codexDig(cfg, "mcp_servers") != nil {
			t.Errorf("%s: MCP servers with transport None: %v", name, cfg["mcp_servers"])
		}
		if diff := cmp.Diff(tc.wantHosts, inv.ProviderHosts); diff != "" {
			t.Errorf("%s: provider hosts (-want +got):\n%s", name, diff)
		}
	}
}

func TestCodexPrepareOpenAIWithKey(t *testing.T) {
	dir, _ := codexCLI(t)
	inv, err := NewCodex(Config{CLIDir: dir}).Prepare(Input{
		Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex}, Prompt: "p", Workspace: "/w", Home: "/h",
		Credentials: []Credential{{Env: "OPENAI_API_KEY", Value: []byte(codexSecret)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"api.openai.com"}, inv.ProviderHosts); diff != "" {
		t.Errorf("provider hosts (-want +got):\n%s", diff)
	}
}

func TestCodexPrepareRefuses(t *testing.T) {
	dir, _ := codexCLI(t)
	for name, tc := range map[string]struct {
		cfg   Config
		creds []Credential
		want  string
	}{
		"auth.json not JSON": {Config{CLIDir: dir}, []Credential{{File: harnessv1.CredentialFileCodexAuth, Value: []byte(codexSecret)}}, "not JSON"},
		"another CLI's file": {Config{CLIDir: dir}, []Credential{{File: harnessv1.CredentialFileClaudeCredentials, Value: []byte("{}")}}, "cannot place credential file ClaudeCredentials"},
		"not installed":      {Config{CLIDir: t.TempDir()}, []Credential{{Env: "OPENAI_API_KEY", Value: []byte("k")}}, "codex is not installed"},
		"nothing to log in":  {Config{CLIDir: dir}, nil, "needs a credential"},
	} {
		_, err := NewCodex(tc.cfg).Prepare(Input{Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex}, Prompt: "p", Home: "/h", Credentials: tc.creds})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), codexSecret) {
			t.Errorf("%s: the error shows the credential: %v", name, err)
		}
	}
}

func TestCodexVersion(t *testing.T) {
	dir, _ := codexCLI(t)
	v, err := NewCodex(Config{CLIDir: dir}).Version(context.Background())
	if err != nil || v != "0.171.0" {
		t.Errorf("version %q, %v; want 0.171.0", v, err)
	}
	if _, err := NewCodex(Config{CLIDir: t.TempDir()}).Version(context.Background()); err == nil {
		t.Error("a version without the CLI")
	}
}

// codexLog is `codex exec --json` 0.171.0's output of a hello run, with a
// stderr line, a declined command, a failed MCP call that needed approval,
// and a cut last line, as the run's log holds them.
const codexLog = `Reading additional input from stdin...
{"type":"thread.started","thread_id":"01a22caa"}
{"type":"turn.started"}
{"type":"item.started","item":{"id":"item_0","type":"command_execution","command":"/bin/bash -lc \"printf hi > greeting.txt\"","aggregated_output":"","exit_code":null,"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"/bin/bash -lc \"printf hi > greeting.txt\"","aggregated_output":"","exit_code":0,"status":"completed"}}
2026-11-30T13:31:39.435463Z ERROR rmcp::transport::worker: worker quit
{"type":"item.completed","item":{"id":"item_1","type":"mcp_tool_call","server":"harnessfacts","tool":"get_token","arguments":{},"result":{"content":[{"type":"text","text":"hft_x"}]},"error":null,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"command_execution","command":"rm -rf /","aggregated_output":"","exit_code":null,"status":"declined"}}
{"type":"item.completed","item":{"id":"item_3","type":"mcp_tool_call","server":"harnessfacts","tool":"other","arguments":{},"result":null,"error":{"message":"tool call requires approval, but approval policy is never"},"status":"failed"}}
{"type":"item.completed","item":{"id":"item_4","type":"file_change","changes":[{"path":"a","kind":"add"}],"status":"completed"}}
{"type":"item.completed","item":{"id":"item_5","type":"agent_message","text":"done"}}
{"type":"item.completed","item":{"id":"item_6","type":"error","message":"a warning"}}
{"type":"turn.completed","usage":{"input_tokens":0,"cached_input_tokens":0,"output_tokens":0}}
{"type":"turn.started"}
{"type":"turn.failed","error":{"message":"stream disconnected"}}
{"type":"item.completed","item":{"id":"item_7","type":"command_exec`

func TestCodexActivity(t *testing.T) {
	got := NewCodex(Config{}).Activity([]byte(codexLog))
	if want := (Activity{Turns: 2, ToolCalls: 5, PermissionDenials: 2}); got != want {
		t.Errorf("activity %+v, want %+v", got, want)
	}
	if got := NewCodex(Config{}).Activity(nil); got != (Activity{}) {
		t.Errorf("activity of nothing %+v", got)
	}
}

func codexIndexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
