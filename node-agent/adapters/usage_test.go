package adapters

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/harnessfacts/harnessfacts/node-agent/usage"
)

// TestUsageFromAgentOutput reads each CLI's own usage report, in the shape
// the real CLI writes it (Claude Code's from a recorded log), with
// stderr lines and a cut line mixed in.
func TestUsageFromAgentOutput(t *testing.T) {
	denied, err := os.ReadFile("testdata/claude-denied.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		r     UsageReader
		log   string
		want  AgentUsage
		found bool
	}{
		{name: "claude-code result event", r: ClaudeCode{}, log: string(denied), found: true,
			want: AgentUsage{Counts: usage.Counts{Input: 2, Output: 2}, Models: []string{"claude-opus-4-8"}}},
		{name: "claude-code cut before its result", r: ClaudeCode{}, found: true, log: "warning: x\n" +
			`{"type":"assistant","message":{"id":"m1","model":"claude-a","usage":{"input_tokens":1037,"cache_read_input_tokens":311,"cache_creation_input_tokens":27,"output_tokens":53}}}` + "\n" +
			`{"type":"assistant","message":{"id":"m1","model":"claude-a","usage":{"input_tokens":1037,"cache_read_input_tokens":311,"cache_creation_input_tokens":27,"output_tokens":53}}}` + "\n" +
			`{"type":"assistant","message":{"id":"m2","model":"claude-a","usage":{"input_tokens":1074,"cache_read_input_tokens":322,"cache_creation_input_tokens":34,"output_tokens":66}}}` + "\n" +
			`{"type":"result","usage":{"input_to`,
			want: AgentUsage{Counts: usage.Counts{Input: 2111, Output: 119, CacheRead: 633, CacheWrite: 61}, Models: []string{"claude-a"}}},
		{name: "codex turns", r: Codex{}, found: true, log: `{"type":"thread.started"}` + "\n" +
			`{"type":"turn.completed","usage":{"input_tokens":1348,"cached_input_tokens":311,"output_tokens":53}}` + "\n" +
			`{"type":"turn.completed","usage":{"input_tokens":1396,"cached_input_tokens":322,"output_tokens":66}}` + "\n",
			want: AgentUsage{Counts: usage.Counts{Input: 2111, Output: 119, CacheRead: 633}}},
		{name: "gemini result stats", r: Gemini{}, found: true,
			log:  `{"type":"result","status":"success","stats":{"total_tokens":2863,"input_tokens":2744,"output_tokens":119,"cached":633,"input":2111,"duration_ms":5,"tool_calls":1,"models":{"gemini-b":{},"gemini-a":{}}}}` + "\n",
			want: AgentUsage{Counts: usage.Counts{Input: 2111, Output: 119, CacheRead: 633}, Models: []string{"gemini-a", "gemini-b"}}},
		// A thinking model: output_tokens leave the thoughts out, which
		// Gemini bills as output and total_tokens holds (17434 + 112 +
		// 26): the output is 138, as the gateway counts it.
		{name: "gemini result stats with thoughts", r: Gemini{}, found: true,
			log:  `{"type":"result","status":"success","stats":{"total_tokens":17572,"input_tokens":17434,"output_tokens":112,"cached":806,"input":16628,"duration_ms":5,"tool_calls":1,"models":{"gemini-2.5-pro":{}}}}` + "\n",
			want: AgentUsage{Counts: usage.Counts{Input: 16628, Output: 138, CacheRead: 806}, Models: []string{"gemini-2.5-pro"}}},
		{name: "opencode steps", r: OpenCode{}, found: true, log: `{"type":"step_start","part":{}}` + "\n" +
			`{"type":"step_finish","part":{"type":"step-finish","tokens":{"input":1037,"output":50,"reasoning":3,"cache":{"read":311,"write":27}},"cost":0}}` + "\n" +
			`{"type":"step_finish","part":{"type":"step-finish","tokens":{"input":1074,"output":66,"reasoning":0,"cache":{"read":322,"write":34}},"cost":0}}` + "\n",
			want: AgentUsage{Counts: usage.Counts{Input: 2111, Output: 119, CacheRead: 633, CacheWrite: 61}}},
		{name: "nothing reported", r: Codex{}, log: "plain text\n{\"type\":\"turn.started\"}\n"},
	} {
		got, found := c.r.Usage([]byte(c.log))
		if found != c.found {
			t.Errorf("%s: found %v, want %v", c.name, found, c.found)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}
