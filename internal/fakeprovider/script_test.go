package fakeprovider

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseScriptRejects(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"empty":           {"steps: []", "no steps"},
		"two kinds":       {"steps:\n- write: {path: a, content: b}\n  answer: x", "exactly one"},
		"none":            {"steps:\n- {}", "exactly one"},
		"escape":          {"steps:\n- write: {path: ../etc/passwd, content: x}", "inside the workspace"},
		"absolute":        {"steps:\n- write: {path: /etc/passwd, content: x}", "inside the workspace"},
		"answer early":    {"steps:\n- answer: hi\n- shell: {command: ls}", "last step"},
		"unknown field":   {"steps:\n- write: {path: a, content: b, mode: 7}", "unknown field"},
		"mcp no tool":     {"steps:\n- mcp: {server: harnessfacts}", "server and tool"},
		"empty command":   {"steps:\n- shell: {command: ' '}", "empty"},
		"dot in the path": {"steps:\n- write: {path: a/./b, content: x}", "inside the workspace"},
	} {
		if _, err := ParseScript([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, tc.want)
		}
	}
}

func TestNextFollowsTheConversationNotArrivalOrder(t *testing.T) {
	s, err := LoadScript(filepath.Join("..", "..", "fixtures", "hello", ScriptName))
	if err != nil {
		t.Fatal(err)
	}
	tools := []string{"Bash", "Write", "mcp__harnessfacts__get_token"}
	cases := []struct {
		name string
		turn Turn
		want Action
	}{
		{"first", Turn{Tools: tools}, Action{Kind: ActWrite, Step: 0, Path: "greeting.txt", Content: "hello, harness\n"}},
		{"mcp", Turn{Tools: tools, Results: []string{"ok"}}, Action{Kind: ActMCP, Step: 1, Tool: "mcp__harnessfacts__get_token", Arguments: map[string]any{}}},
		{"token", Turn{Tools: tools, Results: []string{"ok", " hft_abc \n"}}, Action{Kind: ActWrite, Step: 2, Path: "token.txt", Content: "hft_abc\n"}},
		{"answer", Turn{Tools: tools, Results: []string{"ok", "hft_abc", "ok"}}, Action{Kind: ActAnswer, Step: 3, Text: "greeting.txt now says hello, harness, and token.txt holds the token get_token returned."}},
		// A side request (title generation) in the middle of the task
		// gets text and does not move the script.
		{"no tools", Turn{Results: []string{"ok"}}, Action{Kind: ActAnswer, Step: 4, Text: "greeting.txt now says hello, harness, and token.txt holds the token get_token returned."}},
		{"again first", Turn{Tools: tools}, Action{Kind: ActWrite, Step: 0, Path: "greeting.txt", Content: "hello, harness\n"}},
	}
	for _, tc := range cases {
		got, err := s.Next(tc.turn)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	// Each CLI's spelling of the MCP tool is found.
	for _, offered := range []string{"mcp__harnessfacts__get_token", "mcp_harnessfacts_get_token", "harnessfacts_get_token"} {
		a, err := s.Next(Turn{Tools: []string{"x", offered}, Results: []string{"ok"}})
		if err != nil || a.Tool != offered {
			t.Errorf("offered %s: got %+v, %v", offered, a, err)
		}
	}
	// A CLI that does not offer the tool gets the answer, and the log says why.
	if a, err := s.Next(Turn{Tools: []string{"Bash"}, Results: []string{"ok"}}); a.Kind != ActAnswer || err == nil {
		t.Errorf("tool not offered: got %+v, %v; want the answer and an error", a, err)
	}
}

func TestShellWriteWritesExactly(t *testing.T) {
	dir := t.TempDir()
	content := "it's $HOME `x` \\n %s\nline 2\n"
	cmd := exec.Command("sh", "-c", ShellWrite("out.txt", content))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, "out.txt"))
	if err != nil || string(got) != content {
		t.Errorf("wrote %q, %v; want %q", got, err, content)
	}
}
