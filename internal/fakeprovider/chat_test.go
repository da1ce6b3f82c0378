package fakeprovider

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// chatOpenCodeTools are the tools OpenCode 1.18 offers, with the run's MCP tool.
var chatOpenCodeTools = []string{"bash", "edit", "glob", "grep", "read", "skill", "task", "todowrite", "webfetch", "write", "harnessfacts_get_token"}

func chatBody(t *testing.T, stream bool, tools []string, msgs ...map[string]any) []byte {
	t.Helper()
	req := map[string]any{"model": "scripted", "stream": stream, "messages": msgs}
	if stream {
		req["stream_options"] = map[string]any{"include_usage": true}
	}
	var ts []map[string]any
	for _, n := range tools {
		ts = append(ts, map[string]any{"type": "function", "function": map[string]any{"name": n, "parameters": map[string]any{"type": "object"}}})
	}
	if len(ts) > 0 {
		req["tools"], req["tool_choice"] = ts, "auto"
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func chatHelloProvider(t *testing.T) *httptest.Server {
	t.Helper()
	s, err := LoadScript(filepath.Join("..", "..", "fixtures", "hello", ScriptName))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Options{Scripts: map[string]*Script{"hello": s}}))
	t.Cleanup(srv.Close)
	return srv
}

func chatPost(t *testing.T, url string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// chatStreamed is what a client rebuilds from chat.completion.chunk events.
type chatStreamed struct {
	Text   string
	Calls  []map[string]string // id, name, arguments
	Finish string
	Done   bool
}

func chatParseStream(t *testing.T, b []byte) chatStreamed {
	t.Helper()
	var out chatStreamed
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			out.Done = true
			continue
		}
		var chunk struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Content   string `json:"content"`
					ToolCalls []struct {
						Index    int    `json:"index"`
						ID       string `json:"id"`
						Type     string `json:"type"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if chunk.Object != "chat.completion.chunk" {
			t.Errorf("object %q", chunk.Object)
		}
		for _, c := range chunk.Choices {
			out.Text += c.Delta.Content
			for _, tc := range c.Delta.ToolCalls {
				if tc.Type != "function" || tc.Index != len(out.Calls) {
					t.Errorf("tool call delta %+v", tc)
				}
				out.Calls = append(out.Calls, map[string]string{"id": tc.ID, "name": tc.Function.Name, "arguments": tc.Function.Arguments})
			}
			if c.FinishReason != nil {
				out.Finish = *c.FinishReason
			}
		}
	}
	return out
}

func TestChatFollowsOpenCodesConversation(t *testing.T) {
	srv := chatHelloProvider(t)
	url := srv.URL + "/s/hello/v1/chat/completions"
	system := map[string]any{"role": "system", "content": "You are opencode, an interactive CLI tool..."}
	user := map[string]any{"role": "user", "content": "Edit greeting.txt"}
	call := func(id, name, args string) map[string]any {
		return map[string]any{"role": "assistant", "content": "", "tool_calls": []map[string]any{
			{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args}}}}
	}
	result := func(id, text string) map[string]any {
		return map[string]any{"role": "tool", "tool_call_id": id, "content": text}
	}
	// OpenCode passes an MCP tool's text on as it is; an MCP result in its
	// JSON form is unwrapped all the same.
	mcpJSON := `{"content":[{"type":"text","text":"hft_abc123"}]}`
	for _, tc := range []struct {
		name   string
		msgs   []map[string]any
		tools  []string
		want   []map[string]string
		text   string
		finish string
	}{
		{name: "first turn writes greeting.txt with write", msgs: []map[string]any{system, user}, tools: chatOpenCodeTools,
			want: []map[string]string{{"id": "call_hf_0_0", "name": "write", "arguments": `{"content":"hello, harness\n","filePath":"greeting.txt"}`}}, finish: "tool_calls"},
		{name: "then calls the MCP tool by its OpenCode name",
			msgs: []map[string]any{system, user, call("a", "write", "{}"), result("a", "Wrote file successfully.")}, tools: chatOpenCodeTools,
			want: []map[string]string{{"id": "call_hf_1_1", "name": "harnessfacts_get_token", "arguments": `{}`}}, finish: "tool_calls"},
		{name: "then writes the bare token",
			msgs: []map[string]any{system, user, call("a", "write", "{}"), result("a", "ok"), call("b", "harnessfacts_get_token", "{}"), result("b", "hft_abc123")}, tools: chatOpenCodeTools,
			want: []map[string]string{{"id": "call_hf_2_2", "name": "write", "arguments": `{"content":"hft_abc123\n","filePath":"token.txt"}`}}, finish: "tool_calls"},
		{name: "an MCP result as JSON is unwrapped",
			msgs: []map[string]any{system, user, call("a", "write", "{}"), result("a", "ok"), call("b", "harnessfacts_get_token", "{}"), result("b", mcpJSON)}, tools: chatOpenCodeTools,
			want: []map[string]string{{"id": "call_hf_2_2", "name": "write", "arguments": `{"content":"hft_abc123\n","filePath":"token.txt"}`}}, finish: "tool_calls"},
		{name: "without write the file is written through bash", msgs: []map[string]any{system, user}, tools: []string{"bash", "harnessfacts_get_token"},
			want: []map[string]string{{"id": "call_hf_0_0", "name": "bash", "arguments": `{"command":"printf '%s' 'hello, harness\n' \u003e 'greeting.txt'","description":"Write greeting.txt"}`}}, finish: "tool_calls"},
		{name: "the last turn answers", msgs: []map[string]any{system, user, result("a", "ok"), result("b", "hft_abc123"), result("c", "ok")}, tools: chatOpenCodeTools,
			text: "greeting.txt now says hello, harness, and token.txt holds the token get_token returned.", finish: "stop"},
		{name: "a request with no tools (a title) gets plain text", msgs: []map[string]any{{"role": "system", "content": "You are a title generator."}, user},
			text: "greeting.txt now says hello, harness, and token.txt holds the token get_token returned.", finish: "stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := chatPost(t, url, chatBody(t, true, tc.tools, tc.msgs...))
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" || resp.ContentLength != int64(len(b)) {
				t.Fatalf("status %d, headers %v: %s", resp.StatusCode, resp.Header, b)
			}
			got := chatParseStream(t, b)
			want := chatStreamed{Text: tc.text, Calls: tc.want, Finish: tc.finish, Done: true}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("reply (-want +got):\n%s\n%s", diff, b)
			}
		})
	}
}

func TestChatWithoutStreamIsOneObject(t *testing.T) {
	srv := chatHelloProvider(t)
	_, b := chatPost(t, srv.URL+"/s/hello/v1/chat/completions",
		chatBody(t, false, chatOpenCodeTools, map[string]any{"role": "user", "content": [](map[string]any){{"type": "text", "text": "go"}}}))
	var got struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Role      string  `json:"role"`
				Content   *string `json:"content"`
				ToolCalls []struct {
					ID       string `json:"id"`
					Type     string `json:"type"`
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if got.Object != "chat.completion" || len(got.Choices) != 1 || got.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("reply %s", b)
	}
	m := got.Choices[0].Message
	if m.Role != "assistant" || m.Content != nil || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "write" || m.ToolCalls[0].Type != "function" {
		t.Errorf("message %+v", m)
	}
}

// chatAiderSystem is the start of Aider 0.86's whole-format system prompt.
const chatAiderSystem = "Act as an expert software developer.\nTake requests for changes to the supplied code.\n" +
	"To suggest changes to a file you MUST return the entire content of the updated file.\n" +
	"You MUST use this *file listing* format:\n\npath/to/filename.js\n```\n// entire file content ...\n```\n"

func TestChatRendersWritesForAider(t *testing.T) {
	for _, tc := range []struct {
		name, script, want, tool string
		action                   ActionKind
	}{
		{
			name:   "an edit",
			script: "steps:\n- write: {path: greeting.txt, content: \"hello, harness\\n\"}\n- answer: Done, greeting.txt says hello.\n",
			want:   "greeting.txt\n```\nhello, harness\n```\n\nDone, greeting.txt says hello.",
			tool:   "aider-whole-file", action: ActWrite,
		},
		{
			// hello: the MCP step cannot be done in text, so the listings
			// stop before it (token.txt is never written) and the record says why.
			name:   "writes up to a step text cannot do",
			script: "steps:\n- write: {path: a.txt, content: \"a\"}\n- write: {path: sub/b.txt, content: \"b\\n\"}\n- mcp: {server: harnessfacts, tool: get_token}\n- write: {path: token.txt, content: \"{{result}}\\n\"}\n",
			want:   "a.txt\n```\na\n```\n\nsub/b.txt\n```\nb\n```\n\nDone.",
			tool:   "aider-whole-file", action: ActWrite,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseScript([]byte(tc.script))
			if err != nil {
				t.Fatal(err)
			}
			p := New(Options{Script: s})
			srv := httptest.NewServer(p)
			defer srv.Close()
			_, b := chatPost(t, srv.URL+"/v1/chat/completions", chatBody(t, true, nil,
				map[string]any{"role": "system", "content": chatAiderSystem},
				map[string]any{"role": "user", "content": "Edit greeting.txt so that its only line is hello, harness"}))
			got := chatParseStream(t, b)
			if diff := cmp.Diff(chatStreamed{Text: tc.want, Finish: "stop", Done: true}, got); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
			recs := p.Requests()
			if len(recs) != 1 || recs[0].Action != tc.action || recs[0].Tool != tc.tool || recs[0].Dialect != "chat" {
				t.Errorf("records %+v", recs)
			}
		})
	}
}

func TestChatRejectsGarbage(t *testing.T) {
	srv := chatHelloProvider(t)
	resp, _ := chatPost(t, srv.URL+"/s/hello/v1/chat/completions", []byte("{not json"))
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("status %d, want 400", resp.StatusCode)
	}
}

func TestUnwrapToolText(t *testing.T) {
	for in, want := range map[string]string{
		"hft_1":                            "hft_1",
		`[{"type":"text","text":"hft_2"}]`: "hft_2",
		`{"content":[{"type":"text","text":"hft_3"}],"isError":false}`: "hft_3",
		`{"other":1}`:                   `{"other":1}`,
		`[{"type":"image","data":"x"}]`: `[{"type":"image","data":"x"}]`,
	} {
		if got := unwrapToolText(in); got != want {
			t.Errorf("unwrapToolText(%q) = %q, want %q", in, got, want)
		}
	}
}
