package adapters

import (
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

// fakeGemini installs a stand-in `gemini` the way hack/install-agent-clis.sh
// lays a CLI out (PREFIX/bin/gemini → PREFIX/gemini-V/bin/gemini) and
// returns PREFIX/bin.
func fakeGemini(t *testing.T) string {
	t.Helper()
	prefix := t.TempDir()
	target := filepath.Join(prefix, "gemini-0.61.0", "bin", "gemini")
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, []byte("#!/bin/sh\necho 0.61.0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(prefix, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../gemini-0.61.0/bin/gemini", filepath.Join(bin, "gemini")); err != nil {
		t.Fatal(err)
	}
	return bin
}

func geminiInput(home string) Input {
	return Input{
		Agent:     harnessv1.AgentSpec{Adapter: harnessv1.AdapterGemini},
		Prompt:    "Edit greeting.txt.",
		Workspace: "/run/x/workspace",
		Home:      home,
		MCP: MCPEndpoint{Transport: harnessv1.MCPTransportHTTP, URL: "http://127.0.0.1:7700/mcp",
			Server: "harnessfacts", Tool: "get_token"},
		MaxDecisions: 40,
		Credentials:  []Credential{{Env: "GEMINI_API_KEY", Value: []byte("planted-gemini-key")}},
	}
}

func geminiSettings(t *testing.T, inv *Invocation) map[string]any {
	t.Helper()
	b, ok := inv.Files[filepath.Join(".gemini", "settings.json")]
	if !ok {
		t.Fatalf("no .gemini/settings.json in %v", inv.Files)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGeminiPrepare(t *testing.T) {
	bin := fakeGemini(t)
	g := NewGemini(Config{CLIDir: bin})
	inv, err := g.Prepare(geminiInput("/run/x/home"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := filepath.Join(bin, "gemini")
	if diff := cmp.Diff([]string{cmd, "-o", "stream-json", "-m", GeminiDefaultModel,
		"--skip-trust", "--approval-mode", "yolo"}, inv.Argv); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	if string(inv.Stdin) != "Edit greeting.txt." {
		t.Errorf("stdin %q, want the prompt", inv.Stdin)
	}
	if diff := cmp.Diff([]string{
		"GEMINI_CLI_HOME=/run/x/home",
		"GEMINI_CLI_SYSTEM_SETTINGS_PATH=/run/x/home/.gemini/system-settings.json",
		"GEMINI_CLI_SYSTEM_DEFAULTS_PATH=/run/x/home/.gemini/system-defaults.json",
		"NO_COLOR=1",
		"GEMINI_API_KEY=planted-gemini-key",
	}, inv.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	want := map[string]any{
		"security":  map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"}},
		"privacy":   map[string]any{"usageStatisticsEnabled": false},
		"telemetry": map[string]any{"enabled": false, "logPrompts": false},
		"general":   map[string]any{"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
		"advanced":  map[string]any{"ignoreLocalEnv": true},
		"model":     map[string]any{"maxSessionTurns": float64(40)},
		"mcpServers": map[string]any{"harnessfacts": map[string]any{
			"httpUrl": "http://127.0.0.1:7700/mcp", "trust": true, "includeTools": []any{"get_token"},
		}},
	}
	if diff := cmp.Diff(want, geminiSettings(t, inv)); diff != "" {
		t.Errorf("settings (-want +got):\n%s", diff)
	}
	// No provider URL: the CLI reaches Google's Gemini API.
	if diff := cmp.Diff([]string{"generativelanguage.googleapis.com"}, inv.ProviderHosts); diff != "" {
		t.Errorf("provider hosts (-want +got):\n%s", diff)
	}
	// The whole install prefix is shown to the sandbox, and its bin is on PATH.
	if diff := cmp.Diff([]string{filepath.Dir(bin)}, inv.ReadOnly); diff != "" {
		t.Errorf("read-only (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{bin}, inv.PathDirs); diff != "" {
		t.Errorf("path dirs (-want +got):\n%s", diff)
	}
	for _, a := range inv.Argv {
		if strings.Contains(a, "planted-gemini-key") {
			t.Errorf("the credential is on the command line: %q", inv.Argv)
		}
	}
	for name, b := range inv.Files {
		if strings.Contains(string(b), "planted-gemini-key") {
			t.Errorf("the credential is in %s", name)
		}
	}
}

func TestGeminiPrepareStdioModelProviderURL(t *testing.T) {
	g := NewGemini(Config{CLIDir: fakeGemini(t)})
	in := geminiInput("/h")
	in.Agent.Model = "gemini-2.5-flash"
	in.Agent.ExtraArgs = []string{"--debug"}
	in.Agent.ProviderURL = "http://127.0.0.1:8089/s/hello"
	in.MCP = MCPEndpoint{Transport: harnessv1.MCPTransportStdio, Command: []string{"/sandbox/harnessfacts", "mcp-stdio", "--socket", "/s"},
		Server: "harnessfacts", Tool: "get_token"}
	in.MaxDecisions = 0
	inv, err := g.Prepare(in)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.Index(inv.Argv, "-m"); i < 0 || inv.Argv[i+1] != "gemini-2.5-flash" {
		t.Errorf("argv %q, want -m gemini-2.5-flash", inv.Argv)
	}
	if inv.Argv[len(inv.Argv)-1] != "--debug" {
		t.Errorf("argv %q, want the extra args last", inv.Argv)
	}
	if !slices.Contains(inv.Env, "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8089/s/hello") {
		t.Errorf("env %q, want the provider URL as GOOGLE_GEMINI_BASE_URL", inv.Env)
	}
	if slices.Contains(inv.Env, "GEMINI_API_KEY="+geminiPlaceholderKey) {
		t.Errorf("env %q: a placeholder key beside the run's own", inv.Env)
	}
	if len(inv.ProviderHosts) != 0 {
		t.Errorf("provider hosts %q with a provider URL, want none", inv.ProviderHosts)
	}
	s := geminiSettings(t, inv)
	if _, ok := s["model"]; ok {
		t.Errorf("settings %v: a turn limit without maxDecisions", s)
	}
	if diff := cmp.Diff(map[string]any{"harnessfacts": map[string]any{
		"command": "/sandbox/harnessfacts", "args": []any{"mcp-stdio", "--socket", "/s"}, "trust": true, "includeTools": []any{"get_token"},
	}}, s["mcpServers"]); diff != "" {
		t.Errorf("mcpServers (-want +got):\n%s", diff)
	}

	// No credential and a provider URL (the fake provider): the CLI gets a
	// placeholder key, since it will not start without one.
	in.Credentials = nil
	if inv, err = g.Prepare(in); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(inv.Env, "GEMINI_API_KEY="+geminiPlaceholderKey) {
		t.Errorf("env %q, want the placeholder key", inv.Env)
	}
	// No MCP: no servers.
	in.MCP = MCPEndpoint{Transport: harnessv1.MCPTransportNone}
	if inv, err = g.Prepare(in); err != nil {
		t.Fatal(err)
	}
	if _, ok := geminiSettings(t, inv)["mcpServers"]; ok {
		t.Errorf("mcpServers without MCP")
	}
}

func TestGeminiPrepareRefuses(t *testing.T) {
	g := NewGemini(Config{CLIDir: fakeGemini(t)})
	for name, mod := range map[string]func(*Input){
		"credential file": func(in *Input) {
			in.Credentials = []Credential{{File: harnessv1.CredentialFileCodexAuth, Value: []byte("x")}}
		},
		"server with _":     func(in *Input) { in.MCP.Server = "harness_facts" },
		"stdio, no command": func(in *Input) { in.MCP = MCPEndpoint{Transport: harnessv1.MCPTransportStdio} },
		"bad provider URL":  func(in *Input) { in.Agent.ProviderURL = "127.0.0.1:8089" },
	} {
		in := geminiInput(t.TempDir())
		mod(&in)
		if _, err := g.Prepare(in); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := NewGemini(Config{CLIDir: t.TempDir()}).Prepare(geminiInput("/h")); err == nil {
		t.Error("no gemini installed: no error")
	}
}

func TestGeminiVersion(t *testing.T) {
	v, err := NewGemini(Config{CLIDir: fakeGemini(t)}).Version(context.Background())
	if err != nil || v != "0.61.0" {
		t.Errorf("version %q, %v", v, err)
	}
	if _, err := NewGemini(Config{CLIDir: t.TempDir()}).Version(context.Background()); err == nil {
		t.Error("no gemini installed: no error")
	}
}

// geminiLog is a real `gemini -o stream-json` run of the hello fixture,
// with the stderr lines the run's log mixes in.
const geminiLog = `Warning: Basic terminal detected (TERM=dumb).
YOLO mode is enabled. All tool calls will be automatically approved.
{"type":"init","timestamp":"2026-11-30T13:34:08.931Z","session_id":"d5da2df8","model":"gemini-2.5-pro"}
{"type":"message","timestamp":"2026-11-30T13:34:08.934Z","role":"user","content":"Edit greeting.txt"}
{"type":"tool_use","timestamp":"2026-11-30T13:34:08.995Z","tool_name":"write_file","tool_id":"w1","parameters":{"content":"hello, harness\n","file_path":"greeting.txt"}}
{"type":"tool_result","timestamp":"2026-11-30T13:34:09.036Z","tool_id":"w1","status":"success"}
{"type":"tool_use","timestamp":"2026-11-30T13:34:09.049Z","tool_name":"mcp_harnessfacts_get_token","tool_id":"m1","parameters":{}}
{"type":"tool_result","timestamp":"2026-11-30T13:34:09.056Z","tool_id":"m1","status":"success","output":"hft_XO6m"}
{"type":"message","timestamp":"2026-11-30T13:34:09.060Z","role":"assistant","content":"Writing it.","delta":true}
{"type":"tool_use","timestamp":"2026-11-30T13:34:09.071Z","tool_name":"write_file","tool_id":"w2","parameters":{"content":"hft_XO6m\n","file_path":"/etc/token.txt"}}
{"type":"tool_use","timestamp":"2026-11-30T13:34:09.072Z","tool_name":"run_shell_command","tool_id":"s1","parameters":{"command":"rm -rf /"}}
{"type":"tool_result","timestamp":"2026-11-30T13:34:09.078Z","tool_id":"w2","status":"error","error":{"type":"path_not_in_workspace","message":"Path not in workspace"}}
{"type":"tool_result","timestamp":"2026-11-30T13:34:09.079Z","tool_id":"s1","status":"error","error":{"type":"policy_violation","message":"denied by policy"}}
{"type":"message","timestamp":"2026-11-30T13:34:09.092Z","role":"assistant","content":"Done","delta":true}
{"type":"message","timestamp":"2026-11-30T13:34:09.093Z","role":"assistant","content":".","delta":true}
{"type":"result","timestamp":"2026-11-30T13:34:09.094Z","status":"success","stats":{"tool_calls":4}}
{"type":"tool_use","tool_name":"cut off`

func TestGeminiActivity(t *testing.T) {
	got := Gemini{}.Activity([]byte(geminiLog))
	if diff := cmp.Diff(Activity{Turns: 4, ToolCalls: 4, PermissionDenials: 2}, got); diff != "" {
		t.Errorf("activity (-want +got):\n%s", diff)
	}
	if got := (Gemini{}).Activity([]byte("Error: When using Gemini API, you must specify the GEMINI_API_KEY environment variable.\n")); got != (Activity{}) {
		t.Errorf("no stream-json: %+v", got)
	}
}
