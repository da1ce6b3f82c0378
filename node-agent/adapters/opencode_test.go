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

// openCodeStubCLI makes PREFIX/bin/name, a script printing out, and returns the
// Config finding it.
func openCodeStubCLI(t *testing.T, name, out string) (Config, string) {
	t.Helper()
	prefix := t.TempDir()
	bin := filepath.Join(prefix, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(bin, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho '"+out+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return Config{CLIDir: bin}, p
}

const openCodeSecret = "sk-planted-opencode-0123456789"

func openCodeInput(home string) Input {
	return Input{
		Agent:     harnessv1.AgentSpec{Adapter: harnessv1.AdapterOpenCode, ProviderURL: "http://127.0.0.1:8089/s/hello"},
		Prompt:    "-Edit greeting.txt",
		Workspace: "/run/x/workspace",
		Home:      home,
		MCP: MCPEndpoint{Transport: harnessv1.MCPTransportHTTP, URL: "http://127.0.0.1:7700/mcp",
			Server: "harnessfacts", Tool: "get_token"},
		MaxDecisions: 25,
		Credentials:  []Credential{{Env: "OPENAI_API_KEY", Value: []byte(openCodeSecret)}},
	}
}

func TestOpenCodePrepareWithProviderURL(t *testing.T) {
	cfg, cmd := openCodeStubCLI(t, "opencode", "1.18.33")
	home := "/run/x/home"
	inv, err := NewOpenCode(cfg).Prepare(openCodeInput(home))
	if err != nil {
		t.Fatal(err)
	}
	wantArgv := []string{cmd, "run", "--format", "json", "-m", "harnessfacts/default"}
	if diff := cmp.Diff(wantArgv, inv.Argv); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	if string(inv.Stdin) != "-Edit greeting.txt" {
		t.Errorf("stdin %q, want the prompt", inv.Stdin)
	}
	for _, a := range inv.Argv {
		if strings.Contains(a, openCodeSecret) {
			t.Errorf("the credential is on the command line: %q", inv.Argv)
		}
	}
	for _, want := range []string{
		"OPENCODE_CONFIG=" + home + "/" + openCodeConfigFile,
		"OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_AUTOUPDATE=1",
		"OPENAI_API_KEY=" + openCodeSecret,
		`OPENCODE_PERMISSION={"bash":"allow","edit":"allow","external_directory":"deny","harnessfacts_get_token":"allow"}`,
	} {
		if !slices.Contains(inv.Env, want) {
			t.Errorf("env %q lacks %q", inv.Env, want)
		}
	}
	if len(inv.ProviderHosts) != 0 {
		t.Errorf("provider hosts %v with a provider URL", inv.ProviderHosts)
	}
	if inv.MCPUnsupported {
		t.Error("OpenCode has MCP")
	}

	conf := inv.Files[openCodeConfigFile]
	if strings.Contains(string(conf), openCodeSecret) {
		t.Errorf("the config file holds the credential: %s", conf)
	}
	var got map[string]any
	if err := json.Unmarshal(conf, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"$schema":    "https://opencode.ai/config.json",
		"model":      "harnessfacts/default",
		"share":      "disabled",
		"autoupdate": false,
		"permission": map[string]any{"edit": "allow", "bash": "allow", "external_directory": "deny", "harnessfacts_get_token": "allow"},
		"agent":      map[string]any{"title": map[string]any{"disable": true}, "build": map[string]any{"steps": float64(25)}},
		"mcp":        map[string]any{"harnessfacts": map[string]any{"type": "remote", "url": "http://127.0.0.1:7700/mcp", "enabled": true}},
		"provider": map[string]any{"harnessfacts": map[string]any{
			"npm":     "@ai-sdk/openai-compatible",
			"name":    "HarnessFacts provider URL",
			"options": map[string]any{"baseURL": "http://127.0.0.1:8089/s/hello/v1", "apiKey": "{env:OPENAI_API_KEY}"},
			"models":  map[string]any{"default": map[string]any{"name": "default"}},
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	// Nothing for OpenCode's background plugin install to do.
	var lock struct {
		Packages map[string]struct {
			Dependencies map[string]string `json:"dependencies"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(inv.Files[".config/opencode/package-lock.json"], &lock); err != nil || lock.Packages[""].Dependencies["@opencode-ai/plugin"] == "" {
		t.Errorf("package-lock.json %s: %v", inv.Files[".config/opencode/package-lock.json"], err)
	}
	if _, ok := inv.Files[".config/opencode/node_modules/.harnessfacts"]; !ok {
		t.Errorf("no node_modules in OpenCode's config folder: %v", inv.Files)
	}
	if len(inv.ReadOnly) == 0 || inv.PathDirs[0] != filepath.Dir(cmd) {
		t.Errorf("mounts %v %v", inv.ReadOnly, inv.PathDirs)
	}
}

func TestOpenCodePrepareStdioAndAuthFile(t *testing.T) {
	cfg, _ := openCodeStubCLI(t, "opencode", "1.18.33")
	in := openCodeInput("/h")
	in.Agent.Model = "harnessfacts/qwen3"
	in.MaxDecisions = 0
	in.MCP = MCPEndpoint{Transport: harnessv1.MCPTransportStdio, Command: []string{"/hf", "mcp-stdio", "--socket", "/s"}, Server: "harnessfacts", Tool: "get_token"}
	auth := []byte(`{"harnessfacts":{"type":"api","key":"` + openCodeSecret + `"}}`)
	in.Credentials = []Credential{{File: harnessv1.CredentialFileOpenCodeAuth, Value: auth}}
	inv, err := NewOpenCode(cfg).Prepare(in)
	if err != nil {
		t.Fatal(err)
	}
	if got := inv.Files[".local/share/opencode/auth.json"]; string(got) != string(auth) {
		t.Errorf("auth.json %q", got)
	}
	var conf struct {
		Model    string
		MCP      map[string]map[string]any `json:"mcp"`
		Agent    map[string]any
		Provider map[string]struct {
			Options map[string]any
			Models  map[string]any
		}
	}
	if err := json.Unmarshal(inv.Files[openCodeConfigFile], &conf); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]any{"type": "local", "command": []any{"/hf", "mcp-stdio", "--socket", "/s"}, "enabled": true}, conf.MCP["harnessfacts"]); diff != "" {
		t.Errorf("mcp (-want +got):\n%s", diff)
	}
	if conf.Model != "harnessfacts/qwen3" || conf.Provider["harnessfacts"].Models["qwen3"] == nil {
		t.Errorf("model %q, provider %+v", conf.Model, conf.Provider)
	}
	if _, ok := conf.Provider["harnessfacts"].Options["apiKey"]; ok {
		t.Errorf("an apiKey with no env credential: %+v (auth.json's entry is the key)", conf.Provider["harnessfacts"].Options)
	}
	if _, ok := conf.Agent["build"]; ok {
		t.Errorf("a step limit without maxDecisions: %+v", conf.Agent)
	}
	for _, e := range inv.Env {
		if strings.Contains(e, openCodeSecret) {
			t.Errorf("the file credential is in the environment: %q", e)
		}
	}
}

func TestOpenCodePrepareRealProvider(t *testing.T) {
	cfg, cmd := openCodeStubCLI(t, "opencode", "1.18.33")
	for _, tc := range []struct {
		model string
		argv  []string
		hosts []string
	}{
		{"anthropic/claude-sonnet-4-5", []string{cmd, "run", "--format", "json", "-m", "anthropic/claude-sonnet-4-5"}, []string{"api.anthropic.com"}},
		{"openai/gpt-5", []string{cmd, "run", "--format", "json", "-m", "openai/gpt-5"}, []string{"api.openai.com"}},
		{"", []string{cmd, "run", "--format", "json"}, []string{"api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com"}},
	} {
		in := Input{Agent: harnessv1.AgentSpec{Model: tc.model}, Prompt: "p", Home: "/h",
			Credentials: []Credential{{Env: "ANTHROPIC_API_KEY", Value: []byte(openCodeSecret)}}}
		inv, err := NewOpenCode(cfg).Prepare(in)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.argv, inv.Argv); diff != "" {
			t.Errorf("%s: argv (-want +got):\n%s", tc.model, diff)
		}
		if diff := cmp.Diff(tc.hosts, inv.ProviderHosts); diff != "" {
			t.Errorf("%s: hosts (-want +got):\n%s", tc.model, diff)
		}
		var conf map[string]any
		if err := json.Unmarshal(inv.Files[openCodeConfigFile], &conf); err != nil {
			t.Fatal(err)
		}
		if _, ok := conf["provider"]; ok {
			t.Errorf("%s: a provider without a provider URL: %v", tc.model, conf["provider"])
		}
		if _, ok := conf["mcp"]; ok {
			t.Errorf("%s: an MCP server the run did not ask for", tc.model)
		}
	}
}

func TestOpenCodePrepareRefusesOtherFiles(t *testing.T) {
	cfg, _ := openCodeStubCLI(t, "opencode", "1.18.33")
	in := openCodeInput("/h")
	in.Credentials = []Credential{{File: harnessv1.CredentialFileCodexAuth, Value: []byte("{}")}}
	if _, err := NewOpenCode(cfg).Prepare(in); err == nil || !strings.Contains(err.Error(), "CodexAuth") {
		t.Errorf("err %v, want CodexAuth refused", err)
	}
}

func TestOpenCodeVersion(t *testing.T) {
	cfg, _ := openCodeStubCLI(t, "opencode", "1.18.33")
	v, err := NewOpenCode(cfg).Version(context.Background())
	if err != nil || v != "1.18.33" {
		t.Errorf("version %q, %v", v, err)
	}
	if _, err := NewOpenCode(Config{CLIDir: t.TempDir()}).Version(context.Background()); err == nil {
		t.Error("a version without the CLI")
	}
}

// A run's output as `opencode run --format json` writes it (cut from 1.18.33),
// with a stderr line mixed in.
const openCodeLog = `{"type":"step_start","part":{"type":"step-start"}}
{"type":"tool_use","part":{"type":"tool","tool":"write","state":{"status":"completed","output":"Wrote file successfully."}}}
{"type":"step_finish","part":{"reason":"tool-calls","type":"step-finish"}}
some stderr line
{"type":"step_start","part":{"type":"step-start"}}
{"type":"tool_use","part":{"type":"tool","tool":"bash","state":{"status":"error","error":"The user has specified a rule which prevents you from using this specific tool call. Here are some of the relevant rules []"}}}
{"type":"step_finish","part":{"reason":"tool-calls","type":"step-finish"}}
{"type":"step_start","part":{"type":"step-start"}}
{"type":"tool_use","part":{"type":"tool","tool":"bash","state":{"status":"error","error":"exit status 1"}}}
{"type":"step_start","part":{"type":"step-start"}}
{"type":"text","part":{"type":"text","text":"Done."}}
{"type":"step_finish","part":{"reason":"stop","type":"step-fin`

func TestOpenCodeActivity(t *testing.T) {
	got := NewOpenCode(Config{}).Activity([]byte(openCodeLog))
	if diff := cmp.Diff(Activity{Turns: 4, ToolCalls: 3, PermissionDenials: 1}, got); diff != "" {
		t.Errorf("activity (-want +got):\n%s", diff)
	}
}

func TestOpenCodeNeedsACredentialOrAProviderURL(t *testing.T) {
	cfg, _ := openCodeStubCLI(t, "opencode", "1.18.33")
	if _, err := NewOpenCode(cfg).Prepare(Input{Prompt: "p", Home: "/h"}); err == nil || !strings.Contains(err.Error(), "providerURL") {
		t.Errorf("err %v", err)
	}
	in := Input{Prompt: "p", Home: "/h", Credentials: []Credential{{File: harnessv1.CredentialFileOpenCodeAuth, Value: []byte("{}")}}}
	if _, err := NewOpenCode(cfg).Prepare(in); err != nil {
		t.Errorf("an auth.json alone: %v", err)
	}
}
