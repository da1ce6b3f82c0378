package mcp

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The sample fixture's scripted agent really edits the file and gets the
// token over MCP HTTP with curl.
func TestHelloFixtureAgentScript(t *testing.T) {
	for _, tool := range []string{"sh", "curl", "sed"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s on PATH: %v", tool, err)
		}
	}
	script, err := filepath.Abs("../../fixtures/hello/agent.sh")
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, Options{})
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "greeting.txt"), []byte("hello, world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", script)
	cmd.Dir = ws
	// What the exec adapter gives an agent on transport HTTP.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HARNESSFACTS_MCP_URL=" + s.URL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("agent.sh: %v\n%s", err, out)
	}
	greeting, _ := os.ReadFile(filepath.Join(ws, "greeting.txt"))
	token, _ := os.ReadFile(filepath.Join(ws, "token.txt"))
	if string(greeting) != "hello, harness\n" {
		t.Errorf("greeting.txt = %q", greeting)
	}
	if strings.TrimSpace(string(token)) != s.Token {
		t.Errorf("token.txt = %q, want the run token %q", token, s.Token)
	}
	if sum := s.Summary(); sum.Calls != 1 || !sum.TokenIssued {
		t.Errorf("summary = %+v, want one answered call", sum)
	}
}
