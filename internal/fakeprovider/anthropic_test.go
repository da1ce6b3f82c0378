package fakeprovider

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// anthropicRequestOf builds a Messages request shaped like Claude Code 2.1's:
// the working directory in the system prompt, a user prompt wrapped with a
// system reminder, then the conversation, and a trailing "system" message.
func anthropicRequestOf(tools []string, stream bool, conversation ...map[string]any) map[string]any {
	var ts []map[string]any
	for _, t := range tools {
		ts = append(ts, map[string]any{"name": t, "description": t, "input_schema": map[string]any{"type": "object"}})
	}
	msgs := []any{map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "<system-reminder>\ncontext\n</system-reminder>\n"},
		map[string]any{"type": "text", "text": "Edit greeting.txt ...", "cache_control": map[string]any{"type": "ephemeral"}},
	}}}
	for _, m := range conversation {
		msgs = append(msgs, m)
	}
	msgs = append(msgs, map[string]any{"role": "system", "content": "Available agent types for the Agent tool: ..."})
	return map[string]any{
		"model": "claude-opus-4-8",
		"system": []any{
			map[string]any{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197"},
			map[string]any{"type": "text", "text": "# Environment\n - Primary working directory: /runs/r1/workspace\n - Is a git repository: false\n"},
		},
		"tools":      ts,
		"messages":   msgs,
		"max_tokens": 64000,
		"stream":     stream,
		"metadata":   map[string]any{"user_id": "x"},
	}
}

// anthropicAssistant is Claude Code's copy of an earlier reply.
func anthropicAssistant(uses ...string) map[string]any {
	var content []any
	for i, name := range uses {
		content = append(content, map[string]any{"type": "tool_use", "id": "toolu_" + string(rune('a'+i)), "name": name, "input": map[string]any{}})
	}
	return map[string]any{"role": "assistant", "content": content}
}

// anthropicResults is the user message carrying the results of one reply; each
// result is a string or a list of blocks.
func anthropicResults(rs ...any) map[string]any {
	var content []any
	for i, r := range rs {
		b := map[string]any{"type": "tool_result", "tool_use_id": "toolu_" + string(rune('a'+i)), "content": r}
		if s, ok := r.(string); ok && strings.HasPrefix(s, "File does not exist") {
			b["is_error"] = true
		}
		content = append(content, b)
	}
	return map[string]any{"role": "user", "content": content}
}

// anthropicReplyRead is a Messages reply reduced to what the CLI acts on.
type anthropicReplyRead struct {
	Content    []anthropicBlock
	StopReason string
	Events     []string
}

// readAnthropicSSE rebuilds the message a Messages event stream carries, the way
// the SDK does: blocks from content_block_start, text and tool input from
// the deltas.
func readAnthropicSSE(t *testing.T, body []byte) anthropicReplyRead {
	t.Helper()
	var r anthropicReplyRead
	inputs := map[int]*strings.Builder{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var event string
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type         string         `json:"type"`
			Index        int            `json:"index"`
			ContentBlock anthropicBlock `json:"content_block"`
			Delta        struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %s: %v: %s", event, err, data)
		}
		if ev.Type != event {
			t.Errorf("event %q carries type %q", event, ev.Type)
		}
		r.Events = append(r.Events, event)
		switch event {
		case "content_block_start":
			if ev.Index != len(r.Content) {
				t.Errorf("block index %d, want %d", ev.Index, len(r.Content))
			}
			r.Content = append(r.Content, ev.ContentBlock)
			inputs[ev.Index] = &strings.Builder{}
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				r.Content[ev.Index].Text += ev.Delta.Text
			case "input_json_delta":
				inputs[ev.Index].WriteString(ev.Delta.PartialJSON)
			default:
				t.Errorf("delta type %q", ev.Delta.Type)
			}
		case "message_delta":
			r.StopReason = ev.Delta.StopReason
		}
	}
	for i, b := range r.Content {
		if b.Type == "tool_use" {
			var in any
			if err := json.Unmarshal([]byte(inputs[i].String()), &in); err != nil {
				t.Fatalf("tool input %q: %v", inputs[i].String(), err)
			}
			r.Content[i].Input = in
		}
		r.Content[i].ID = ""
	}
	return r
}

func anthropicPost(t *testing.T, url string, req map[string]any, key string) (*http.Response, []byte) {
	t.Helper()
	b, _ := json.Marshal(req)
	hr, _ := http.NewRequest(http.MethodPost, url+"/v1/messages?beta=true", bytes.NewReader(b))
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("anthropic-version", "2023-06-01")
	if key != "" {
		hr.Header.Set("X-Api-Key", key)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	return resp, body.Bytes()
}

func anthropicHelloProvider(t *testing.T) (*Provider, string) {
	t.Helper()
	s, err := LoadScript(filepath.Join("..", "..", "fixtures", "hello", ScriptName))
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Script: s})
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

func TestAnthropicDrivesClaudeCodeThroughTheHelloScript(t *testing.T) {
	p, url := anthropicHelloProvider(t)
	tools := []string{"Agent", "Bash", "Edit", "Read", "Write", "mcp__harnessfacts__get_token"}
	greeting := "/runs/r1/workspace/greeting.txt"
	token := "/runs/r1/workspace/token.txt"
	answer := "greeting.txt now says hello, harness, and token.txt holds the token get_token returned."
	written := "The file " + greeting + " has been updated successfully."
	streamed := []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	cases := []struct {
		name   string
		req    map[string]any
		want   []anthropicBlock
		stop   string
		events []string
		rec    Record
	}{{
		// The file exists in the fixture's workspace, and Claude Code's
		// Write refuses to overwrite a file it has not read: Read, then
		// Write, in one reply.
		name: "first turn reads and writes greeting.txt",
		req:  anthropicRequestOf(tools, true),
		want: []anthropicBlock{
			{Type: "tool_use", Name: "Read", Input: map[string]any{"file_path": greeting}},
			{Type: "tool_use", Name: "Write", Input: map[string]any{"file_path": greeting, "content": "hello, harness\n"}},
		},
		stop: "tool_use", events: streamed,
		rec: Record{Results: 0, Action: ActWrite, Tool: "Write"},
	}, {
		name: "both results in one message are one step: get_token next",
		req:  anthropicRequestOf(tools, true, anthropicAssistant("Read", "Write"), anthropicResults("1\thello\n", written)),
		want: []anthropicBlock{{Type: "tool_use", Name: "mcp__harnessfacts__get_token", Input: map[string]any{}}},
		stop: "tool_use",
		rec:  Record{Results: 1, Action: ActMCP, Tool: "mcp__harnessfacts__get_token"},
	}, {
		name: "the MCP result's text is the token",
		req: anthropicRequestOf(tools, true, anthropicAssistant("Read", "Write"), anthropicResults("1\thello\n", written),
			anthropicAssistant("mcp__harnessfacts__get_token"), anthropicResults([]any{map[string]any{"type": "text", "text": " hft_abc123\n"}})),
		want: []anthropicBlock{
			{Type: "tool_use", Name: "Read", Input: map[string]any{"file_path": token}},
			{Type: "tool_use", Name: "Write", Input: map[string]any{"file_path": token, "content": "hft_abc123\n"}},
		},
		stop: "tool_use",
		rec:  Record{Results: 2, Action: ActWrite, Tool: "Write"},
	}, {
		name: "a missing file's failed Read does not count twice",
		req: anthropicRequestOf(tools, true, anthropicAssistant("Read", "Write"), anthropicResults("1\thello\n", written),
			anthropicAssistant("mcp__harnessfacts__get_token"), anthropicResults([]any{map[string]any{"type": "text", "text": "hft_abc123"}}),
			anthropicAssistant("Read", "Write"), anthropicResults("File does not exist.", "File created successfully at: "+token)),
		want: []anthropicBlock{{Type: "text", Text: answer}},
		stop: "end_turn",
		events: []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop",
			"message_delta", "message_stop"},
		rec: Record{Results: 3, Action: ActAnswer},
	}, {
		name: "a request with no tools gets text",
		req:  anthropicRequestOf(nil, true, anthropicAssistant("Read", "Write"), anthropicResults("ok", "ok")),
		want: []anthropicBlock{{Type: "text", Text: answer}},
		stop: "end_turn",
		rec:  Record{Results: 1, Action: ActAnswer},
	}, {
		name: "without Write the file is written with Bash",
		req:  anthropicRequestOf([]string{"Bash", "mcp__harnessfacts__get_token"}, true),
		want: []anthropicBlock{{Type: "tool_use", Name: "Bash", Input: map[string]any{
			"command": ShellWrite("greeting.txt", "hello, harness\n"), "description": "Write greeting.txt"}}},
		stop: "tool_use",
		rec:  Record{Results: 0, Action: ActWrite, Tool: "Bash"},
	}, {
		name: "an MCP step whose tool is not offered ends with the answer",
		req:  anthropicRequestOf([]string{"Bash", "Write"}, true, anthropicAssistant("Write"), anthropicResults("ok")),
		want: []anthropicBlock{{Type: "text", Text: answer}},
		stop: "end_turn",
		rec:  Record{Results: 1, Action: ActAnswer},
	}}
	for _, tc := range cases {
		before := len(p.Requests())
		resp, body := anthropicPost(t, url, tc.req, "sk-ant-test")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("%s: status %d, content type %q: %s", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		got := readAnthropicSSE(t, body)
		if diff := cmp.Diff(tc.want, got.Content); diff != "" {
			t.Errorf("%s: content (-want +got):\n%s", tc.name, diff)
		}
		if got.StopReason != tc.stop {
			t.Errorf("%s: stop_reason %q, want %q", tc.name, got.StopReason, tc.stop)
		}
		if tc.events != nil {
			if diff := cmp.Diff(tc.events, got.Events); diff != "" {
				t.Errorf("%s: events (-want +got):\n%s", tc.name, diff)
			}
		}
		recs := p.Requests()[before:]
		if len(recs) != 1 {
			t.Fatalf("%s: %d records", tc.name, len(recs))
		}
		r := recs[0]
		if r.Dialect != "anthropic" || r.Path != "/v1/messages" || r.Model != "claude-opus-4-8" || r.Usage.Model != "claude-opus-4-8-20261201" || r.Status != http.StatusOK ||
			r.AuthHeader != "x-api-key" || r.KeySHA256 != KeyDigest("sk-ant-test") {
			t.Errorf("%s: record %+v", tc.name, r)
		}
		if r.Results != tc.rec.Results || r.Action != tc.rec.Action || r.Tool != tc.rec.Tool {
			t.Errorf("%s: record results=%d action=%s tool=%s, want results=%d action=%s tool=%s",
				tc.name, r.Results, r.Action, r.Tool, tc.rec.Results, tc.rec.Action, tc.rec.Tool)
		}
	}
}

func TestAnthropicToolUseIDsAreUniqueInAConversation(t *testing.T) {
	_, url := anthropicHelloProvider(t)
	tools := []string{"Read", "Write", "mcp__harnessfacts__get_token"}
	seen := map[string]bool{}
	conv := []map[string]any{}
	for range 3 {
		_, body := anthropicPost(t, url, anthropicRequestOf(tools, false, conv...), "")
		var msg struct{ Content []anthropicBlock }
		if err := json.Unmarshal(body, &msg); err != nil {
			t.Fatal(err)
		}
		var ids []string
		var rs []any
		for _, b := range msg.Content {
			if seen[b.ID] {
				t.Errorf("tool_use id %s used twice", b.ID)
			}
			seen[b.ID] = true
			ids = append(ids, b.Name)
			rs = append(rs, "ok")
		}
		conv = append(conv, anthropicAssistant(ids...), anthropicResults(rs...))
	}
}

func TestAnthropicAnswersWithoutStreamAsOneMessage(t *testing.T) {
	_, url := anthropicHelloProvider(t)
	resp, body := anthropicPost(t, url, anthropicRequestOf([]string{"Write", "Read"}, false), "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var msg struct {
		Type, Role, Model string
		StopReason        string `json:"stop_reason"`
		Content           []anthropicBlock
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		t.Fatal(err)
	}
	if msg.Type != "message" || msg.Role != "assistant" || msg.Model != "claude-opus-4-8-20261201" || msg.StopReason != "tool_use" {
		t.Errorf("message %+v", msg)
	}
	if len(msg.Content) != 2 || msg.Content[1].Name != "Write" || msg.Content[1].ID == "" || msg.Content[0].ID == msg.Content[1].ID {
		t.Errorf("content %+v", msg.Content)
	}
}

func TestAnthropicRejectsWhatIsNotAMessagesRequest(t *testing.T) {
	p, url := anthropicHelloProvider(t)
	resp, err := http.Post(url+"/v1/messages", "application/json", strings.NewReader("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("status %d, want 400", resp.StatusCode)
	}
	if recs := p.Requests(); len(recs) != 1 || recs[0].Status != http.StatusBadRequest || recs[0].Error == "" {
		t.Errorf("records %+v", recs)
	}
}
