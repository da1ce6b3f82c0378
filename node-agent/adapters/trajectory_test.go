package adapters

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harnessfacts/harnessfacts/node-agent/trajectory"
)

// TestTrajectoryFromEachCLI maps each CLI's real output of the hello
// fixture (recorded from the test/agents runs) to ATIF: it validates, the
// prompt is its first step, the MCP call get_token is there with the token
// it returned as its result in the same step, and the agent's last words
// are its last agent message.
func TestTrajectoryFromEachCLI(t *testing.T) {
	const prompt = "Edit greeting.txt so that its only line is \"hello, harness\".\n"
	for _, tc := range []struct {
		file    string
		reader  TrajectoryReader
		name    string
		mcpTool string
		steps   int // agent steps
	}{
		{"claude-hello.jsonl", ClaudeCode{}, "claude-code", "mcp__harnessfacts__get_token", 4},
		{"codex-hello.jsonl", Codex{}, "codex", "mcp__harnessfacts__get_token", 4},
		{"gemini-hello.jsonl", Gemini{}, "gemini", "mcp_harnessfacts_get_token", 4},
		{"opencode-hello.jsonl", OpenCode{}, "opencode", "harnessfacts_get_token", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			tr := tc.reader.Trajectory(log, TrajectoryInput{Prompt: prompt, CLIVersion: "1.2.3", Model: "m", SessionID: "uid"})
			if tr == nil {
				t.Fatal("no trajectory")
			}
			if err := tr.Validate(); err != nil {
				t.Fatalf("not valid ATIF: %v", err)
			}
			if tr.Agent.Name != tc.name || tr.Agent.Version != "1.2.3" || tr.SessionID == "" || tr.SessionID == "uid" {
				t.Errorf("agent %+v session %q", tr.Agent, tr.SessionID)
			}
			if tr.Steps[0].Source != trajectory.SourceUser || !strings.HasPrefix(tr.Steps[0].Message, "Edit greeting.txt") {
				t.Errorf("first step %+v, want the prompt", tr.Steps[0])
			}
			agent, calls := 0, 0
			var token, last string
			for _, s := range tr.Steps {
				if s.Source != trajectory.SourceAgent {
					continue
				}
				agent++
				if s.Message != "" {
					last = s.Message
				}
				for _, c := range s.ToolCalls {
					calls++
					if c.FunctionName != tc.mcpTool {
						continue
					}
					for _, r := range s.Observation.Results {
						if r.SourceCallID == c.ToolCallID {
							token = r.Content
						}
					}
				}
			}
			if agent < tc.steps || calls < 3 {
				t.Errorf("%d agent steps with %d calls, want at least %d and 3", agent, calls, tc.steps)
			}
			if !strings.HasPrefix(token, "hft_") {
				t.Errorf("the result of %s is %q, want the token", tc.mcpTool, token)
			}
			if !strings.Contains(last, "token.txt holds the token") {
				t.Errorf("last agent message %q", last)
			}
			if tr.FinalMetrics == nil || tr.FinalMetrics.TotalPromptTokens == 0 || tr.FinalMetrics.TotalCompletionTokens == 0 {
				t.Errorf("final metrics %+v", tr.FinalMetrics)
			}
			// Sealed with a redactor that hides the token, it still
			// validates and the token is nowhere.
			hide := func(b []byte) []byte {
				return []byte(strings.ReplaceAll(string(b), strings.TrimSpace(token), "[REDACTED]"))
			}
			data, steps, err := trajectory.Seal(tr, hide, 0)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(data), strings.TrimSpace(token)) || !strings.Contains(string(data), "[REDACTED]") || steps != len(tr.Steps) {
				t.Errorf("sealed trajectory (%d steps) still holds the token or lost steps:\n%s", steps, data)
			}
			var back map[string]any
			if err := json.Unmarshal(data, &back); err != nil || back["schema_version"] != "ATIF-v1.4" {
				t.Errorf("sealed JSON %v: %v", back["schema_version"], err)
			}
		})
	}
}

// TestTrajectoryOfNothing: output that holds no event of the CLI (a
// failure before it started) is no trajectory.
func TestTrajectoryOfNothing(t *testing.T) {
	for _, r := range []TrajectoryReader{ClaudeCode{}, Codex{}, Gemini{}, OpenCode{}} {
		if tr := r.Trajectory([]byte("error: something\n{\"not\":\"an event\"}\n"), TrajectoryInput{Prompt: "p"}); tr != nil {
			t.Errorf("%T: %+v", r, tr)
		}
	}
}
