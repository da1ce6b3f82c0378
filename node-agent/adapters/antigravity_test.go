package adapters

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// agyCLI makes a folder holding an executable named name, as the CLI
// folder of a node.
func agyCLI(t *testing.T, name string) (dir, cmd string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd = filepath.Join(dir, name)
	if err := os.WriteFile(cmd, []byte("#!/bin/sh\necho \"$0 1.2.3\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, cmd
}

func TestAntigravityPrepare(t *testing.T) {
	dir, cmd := agyCLI(t, "agy")
	a := NewAntigravity(Config{CLIDir: dir})
	const secret = "AIza-planted-secret-value"
	inv, err := a.Prepare(Input{
		Agent:       harnessv1.AgentSpec{Adapter: harnessv1.AdapterAntigravity, Model: "gemini-3-pro", ExtraArgs: []string{"--add-dir", "."}},
		Prompt:      "fix it",
		MCP:         MCPEndpoint{Transport: harnessv1.MCPTransportHTTP, URL: "http://127.0.0.1:7700/mcp", Server: "harnessfacts", Tool: "get_token"},
		Credentials: []Credential{{Env: "GEMINI_API_KEY", Value: []byte(secret)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{cmd, "-p", "fix it", "--dangerously-skip-permissions", "--model", "gemini-3-pro", "--add-dir", "."}
	if diff := cmp.Diff(want, inv.Argv); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	if strings.Contains(strings.Join(inv.Argv, " "), secret) {
		t.Error("a credential is on the command line")
	}
	if diff := cmp.Diff([]string{"GEMINI_API_KEY=" + secret}, inv.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	var settings map[string]any
	if err := json.Unmarshal(inv.Files[".gemini/antigravity-cli/settings.json"], &settings); err != nil {
		t.Fatal(err)
	}
	if settings["enableTelemetry"] != false {
		t.Errorf("telemetry not off: %v", settings)
	}
	srv, _ := settings["mcpServers"].(map[string]any)["harnessfacts"].(map[string]any)
	if srv["httpUrl"] != "http://127.0.0.1:7700/mcp" || srv["trust"] != true {
		t.Errorf("MCP server %v", srv)
	}
	if diff := cmp.Diff([]string{"generativelanguage.googleapis.com"}, inv.ProviderHosts); diff != "" {
		t.Errorf("provider hosts (-want +got):\n%s", diff)
	}
	if len(inv.Notes) != 1 || !strings.Contains(inv.Notes[0], "never ran the real agy CLI") {
		t.Errorf("notes %v: want the plain statement that the real CLI was not exercised", inv.Notes)
	}
	if diff := cmp.Diff([]string{dir}, inv.PathDirs); diff != "" {
		t.Errorf("PATH dirs (-want +got):\n%s", diff)
	}

	// A provider URL replaces the provider hosts with the base URL.
	inv, err = a.Prepare(Input{Agent: harnessv1.AgentSpec{ProviderURL: "http://127.0.0.1:8089/s/hello"},
		MCP: MCPEndpoint{Transport: harnessv1.MCPTransportStdio, Command: []string{"/hf", "mcp-stdio", "--socket", "/s"}, Server: "harnessfacts"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.ProviderHosts) != 0 || !agyHas(inv.Env, "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8089/s/hello") {
		t.Errorf("provider URL: hosts %v env %v", inv.ProviderHosts, inv.Env)
	}
	if !strings.Contains(string(inv.Files[".gemini/antigravity-cli/settings.json"]), `"command": "/hf"`) {
		t.Errorf("stdio MCP not wired: %s", inv.Files[".gemini/antigravity-cli/settings.json"])
	}

	// A credential file has nowhere to go.
	if _, err := a.Prepare(Input{Credentials: []Credential{{File: harnessv1.CredentialFileCodexAuth, Value: []byte("x")}}}); err == nil {
		t.Error("a credential file was accepted")
	}
	if v, err := a.Version(t.Context()); err != nil || v != "1.2.3" {
		t.Errorf("version %q, %v", v, err)
	}
	if _, err := NewAntigravity(Config{CLIDir: t.TempDir()}).Version(t.Context()); err == nil {
		t.Error("a node without agy reports a version")
	}
}

func agyHas(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestMountsOnlyForAnInstallTheOperatorNamed: a CLI found on PATH (say in a
// host home's ~/.local/bin) uncovers nothing in the sandbox; one in the
// named CLI folder shows its install prefix.
func TestMountsOnlyForAnInstallTheOperatorNamed(t *testing.T) {
	ro, path := Config{}.mounts("/root/.local/bin/agy")
	if len(ro) != 0 || len(path) != 1 || path[0] != "/root/.local/bin" {
		t.Errorf("PATH lookup: read-only %v, PATH %v; want no bind and the command's folder on PATH", ro, path)
	}
	dir, cmd := agyCLI(t, "agy")
	ro, path = Config{CLIDir: dir}.mounts(cmd)
	if len(ro) != 1 || ro[0] != filepath.Dir(dir) || len(path) != 1 || path[0] != dir {
		t.Errorf("CLI folder %s: read-only %v, PATH %v; want its prefix bound and the folder on PATH", dir, ro, path)
	}
}
