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

const aiderSecret = "sk-planted-aider-0123456789"

func aiderWorkspace(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	for _, f := range []string{"greeting.txt", "src/main.py", "notes.md", ".hidden/greeting.txt"} {
		p := filepath.Join(ws, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

func TestAiderPrepareWithProviderURL(t *testing.T) {
	cfg, cmd := openCodeStubCLI(t, "aider", "aider 0.86.2")
	ws := aiderWorkspace(t)
	in := Input{
		Agent:     harnessv1.AgentSpec{Adapter: harnessv1.AdapterAider, ProviderURL: "http://127.0.0.1:8089/s/edit/"},
		Prompt:    `Edit greeting.txt so that its only line is "hello, harness". Leave src/main.py; notes.md.bak is not here.`,
		Workspace: ws, Home: "/run/x/home", MaxDecisions: 10,
		Credentials: []Credential{{Env: "OPENAI_API_KEY", Value: []byte(aiderSecret)}},
	}
	inv, err := NewAider(cfg).Prepare(in)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{cmd, "--message-file", "/run/x/home/" + aiderPromptFile,
		"--no-pretty", "--no-fancy-input", "--yes-always", "--no-git",
		"--no-check-update", "--no-analytics", "--no-show-model-warnings", "--no-show-release-notes", "--no-detect-urls",
		"--input-history-file", "/run/x/home/.aider.input.history",
		"--chat-history-file", "/run/x/home/.aider.chat.history.md",
		"--model", "openai/default", "--openai-api-base", "http://127.0.0.1:8089/s/edit/v1",
		"--model-metadata-file", "/run/x/home/" + aiderMetadataFile,
		"--", "greeting.txt", "src/main.py"}
	if diff := cmp.Diff(want, inv.Argv); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	if string(inv.Files[aiderPromptFile]) != in.Prompt {
		t.Errorf("the prompt file holds %q, want the prompt", inv.Files[aiderPromptFile])
	}
	for _, a := range inv.Argv {
		if strings.Contains(a, aiderSecret) {
			t.Errorf("the credential is on the command line")
		}
	}
	for _, e := range []string{"OPENAI_API_KEY=" + aiderSecret, "LITELLM_LOCAL_MODEL_COST_MAP=True"} {
		if !slices.Contains(inv.Env, e) {
			t.Errorf("env %q lacks %q", inv.Env, e)
		}
	}
	if inv.MCPUnsupported || len(inv.Notes) != 0 || len(inv.ProviderHosts) != 0 {
		t.Errorf("invocation %+v", inv)
	}
	var meta map[string]map[string]any
	if err := json.Unmarshal(inv.Files[aiderMetadataFile], &meta); err != nil || meta["openai/default"]["max_input_tokens"] == nil {
		t.Errorf("model metadata %s: %v", inv.Files[aiderMetadataFile], err)
	}
	var cache map[string]any
	if err := json.Unmarshal(inv.Files[aiderCacheFile], &cache); err != nil || len(cache) == 0 {
		t.Errorf("the model-info cache must be a non-empty map: %s", inv.Files[aiderCacheFile])
	}
	for name, b := range inv.Files {
		if strings.Contains(string(b), aiderSecret) {
			t.Errorf("file %s holds the credential", name)
		}
	}
}

func TestAiderMCPIsUnsupported(t *testing.T) {
	cfg, _ := openCodeStubCLI(t, "aider", "aider 0.86.2")
	for _, tr := range []harnessv1.MCPTransport{harnessv1.MCPTransportHTTP, harnessv1.MCPTransportStdio} {
		inv, err := NewAider(cfg).Prepare(Input{Prompt: "p", Home: "/h",
			Agent: harnessv1.AgentSpec{ProviderURL: "http://127.0.0.1:1"},
			MCP:   MCPEndpoint{Transport: tr, URL: "http://127.0.0.1:7700/mcp", Command: []string{"/hf", "mcp-stdio"}, Server: "harnessfacts", Tool: "get_token"}})
		if err != nil {
			t.Fatal(err)
		}
		if !inv.MCPUnsupported || len(inv.Notes) != 1 || !strings.HasPrefix(inv.Notes[0], AiderNoMCP) || !strings.Contains(inv.Notes[0], string(tr)) {
			t.Errorf("%s: MCPUnsupported %v notes %q", tr, inv.MCPUnsupported, inv.Notes)
		}
		if strings.Contains(strings.Join(inv.Argv, " "), "mcp") {
			t.Errorf("%s: argv mentions MCP: %q", tr, inv.Argv)
		}
	}
	inv, err := NewAider(cfg).Prepare(Input{Prompt: "p", Home: "/h", Agent: harnessv1.AgentSpec{ProviderURL: "http://127.0.0.1:1"}, MCP: MCPEndpoint{Transport: harnessv1.MCPTransportNone}})
	if err != nil || inv.MCPUnsupported {
		t.Errorf("no MCP asked: %+v, %v", inv, err)
	}
}

func TestAiderCredentials(t *testing.T) {
	cfg, _ := openCodeStubCLI(t, "aider", "aider 0.86.2")
	prep := func(url string, creds ...Credential) *Invocation {
		t.Helper()
		inv, err := NewAider(cfg).Prepare(Input{Prompt: "p", Home: "/h", Agent: harnessv1.AgentSpec{ProviderURL: url}, Credentials: creds})
		if err != nil {
			t.Fatal(err)
		}
		return inv
	}
	// Only ANTHROPIC_API_KEY, at a provider URL: also the OpenAI client's key.
	inv := prep("http://p", Credential{Env: "ANTHROPIC_API_KEY", Value: []byte(aiderSecret)})
	if !slices.Contains(inv.Env, "OPENAI_API_KEY="+aiderSecret) || !slices.Contains(inv.Env, "ANTHROPIC_API_KEY="+aiderSecret) {
		t.Errorf("env %q", inv.Env)
	}
	// No credential at a provider URL: a placeholder, so litellm starts.
	if inv := prep("http://p"); !slices.Contains(inv.Env, "OPENAI_API_KEY=harnessfacts-no-key") {
		t.Errorf("env %q", inv.Env)
	}
	// No provider URL: the real provider's hosts, the key as it is.
	inv = prep("", Credential{Env: "ANTHROPIC_API_KEY", Value: []byte(aiderSecret)})
	if diff := cmp.Diff([]string{"api.anthropic.com"}, inv.ProviderHosts); diff != "" || slices.Contains(inv.Env, "OPENAI_API_KEY="+aiderSecret) {
		t.Errorf("hosts (-want +got):\n%s\nenv %q", diff, inv.Env)
	}
	if slices.Contains(inv.Argv, "--model") || slices.Contains(inv.Argv, "--openai-api-base") {
		t.Errorf("argv %q", inv.Argv)
	}
	if _, err := NewAider(cfg).Prepare(Input{Prompt: "p", Credentials: []Credential{{File: harnessv1.CredentialFileOpenCodeAuth, Value: []byte("{}")}}}); err == nil {
		t.Error("a credential file was accepted")
	}
}

func TestAiderHosts(t *testing.T) {
	for model, want := range map[string][]string{
		"sonnet":                     {"api.anthropic.com"},
		"anthropic/claude-sonnet-4":  {"api.anthropic.com"},
		"gpt-4o":                     {"api.openai.com"},
		"openai/o3-mini":             {"api.openai.com"},
		"":                           {"api.anthropic.com", "api.openai.com"},
		"deepseek/deepseek-chat-xyz": {"api.anthropic.com", "api.openai.com"},
	} {
		if diff := cmp.Diff(want, aiderHosts(model, nil)); diff != "" {
			t.Errorf("%q (-want +got):\n%s", model, diff)
		}
	}
}

func TestAiderPythonPrefix(t *testing.T) {
	prefix := t.TempDir()
	venv := filepath.Join(t.TempDir(), "aider-0.86.2")
	if err := os.MkdirAll(filepath.Join(venv, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(prefix, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := filepath.Join(venv, "bin", "aider")
	if err := os.WriteFile(cmd, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(home string) {
		if err := os.WriteFile(filepath.Join(venv, "pyvenv.cfg"), []byte("home = "+home+"\ninclude-system-site-packages = false\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(prefix, "bin"))
	if got := aiderPythonPrefix(cmd); got != prefix {
		t.Errorf("prefix %q, want %q", got, prefix)
	}
	write("/usr/bin")
	if got := aiderPythonPrefix(cmd); got != "" {
		t.Errorf("the system's python gave %q", got)
	}
}

func TestAiderVersion(t *testing.T) {
	cfg, _ := openCodeStubCLI(t, "aider", "aider 0.86.2")
	if v, err := NewAider(cfg).Version(context.Background()); err != nil || v != "0.86.2" {
		t.Errorf("version %q, %v", v, err)
	}
}

func TestAiderNeedsAKeyOrAProviderURL(t *testing.T) {
	cfg, _ := openCodeStubCLI(t, "aider", "aider 0.86.2")
	if _, err := NewAider(cfg).Prepare(Input{Prompt: "p", Home: "/h"}); err == nil || !strings.Contains(err.Error(), "providerURL") {
		t.Errorf("err %v", err)
	}
}
