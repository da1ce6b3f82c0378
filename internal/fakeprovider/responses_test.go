package fakeprovider

import (
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

// responsesTools are the tools Codex CLI 0.171.0 offers gpt-5.5 with an MCP
// server configured: its own functions, apply_patch as a custom tool, a
// namespace of sub-agent functions, and tool_search, behind which the MCP
// tools wait.
var responsesTools = []any{
	map[string]any{"type": "function", "name": "exec_command", "strict": false,
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"cmd": map[string]any{"type": "string"}}}},
	map[string]any{"type": "function", "name": "write_stdin"},
	map[string]any{"type": "function", "name": "list_mcp_resources"},
	map[string]any{"type": "custom", "name": "apply_patch"},
	map[string]any{"type": "namespace", "name": "multi_agent_v1", "tools": []any{
		map[string]any{"type": "function", "name": "spawn_agent"}}},
	map[string]any{"type": "tool_search", "execution": "client"},
	map[string]any{"type": "web_search"},
}

// responsesMCPNamespace is how Codex lists the MCP server's tools, in a
// tool_search_output (or, for models without tool_search, in tools).
var responsesMCPNamespace = map[string]any{"type": "namespace", "name": "mcp__harnessfacts",
	"description": "Tools in the mcp__harnessfacts namespace.", "tools": []any{
		map[string]any{"type": "function", "name": "get_token", "defer_loading": true,
			"parameters": map[string]any{"type": "object", "properties": map[string]any{}}}}}

// responsesPrompt is the start of every Codex conversation: instructions,
// the environment context (a user message, but not the task) and the task.
func responsesPrompt() []any {
	msg := func(role, text string) map[string]any {
		return map[string]any{"type": "message", "role": role, "content": []any{map[string]any{"type": "input_text", "text": text}}}
	}
	return []any{
		msg("developer", "You are Codex, a coding agent based on GPT-5."),
		msg("user", "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"),
		msg("user", "Edit greeting.txt so that its only line is \"hello, harness\". Then call get_token."),
	}
}

// Codex's tool outputs, as 0.171.0 sends them back.
var (
	responsesShellOutput = map[string]any{"type": "function_call_output", "call_id": "call_hf_0",
		"output": "Chunk ID: d0cc49\nWall time: 0.0000 seconds\nProcess exited with code 0\nOriginal token count: 0\nOutput:\n"}
	responsesSearch = []any{
		map[string]any{"type": "tool_search_call", "call_id": "call_hf_search_1", "execution": "client",
			"arguments": map[string]any{"query": "harnessfacts get_token"}},
		map[string]any{"type": "tool_search_output", "call_id": "call_hf_search_1", "execution": "client", "status": "completed",
			"tools": []any{responsesMCPNamespace}},
	}
	responsesMCPOutput = map[string]any{"type": "function_call_output", "call_id": "call_hf_1", "output": []any{
		map[string]any{"type": "input_text", "text": "Wall time: 0.0048 seconds\nOutput:"},
		map[string]any{"type": "input_text", "text": "hft_abc123"}}}
)

func responsesCall(id, name, namespace, args string) map[string]any {
	c := map[string]any{"type": "function_call", "call_id": id, "name": name, "arguments": args}
	if namespace != "" {
		c["namespace"] = namespace
	}
	return c
}

func responsesProvider(t *testing.T) (*Provider, string) {
	t.Helper()
	s, err := LoadScript(filepath.Join("..", "..", "fixtures", "hello", ScriptName))
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Scripts: map[string]*Script{"hello": s}})
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL + "/s/hello/v1/responses"
}

// responsesReply is what one streamed response said.
type responsesReply struct {
	Events []string
	Item   map[string]any
}

func responsesPost(t *testing.T, url string, body any) (*http.Response, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-test-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, out
}

// responsesTurn posts a streaming request and reads its SSE reply.
func responsesTurn(t *testing.T, url string, tools []any, input ...any) responsesReply {
	t.Helper()
	body := map[string]any{"model": "gpt-5.5", "stream": true, "input": input, "tool_choice": "auto", "parallel_tool_calls": true}
	if tools != nil {
		body["tools"] = tools
	}
	resp, out := responsesPost(t, url, body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), out)
	}
	if resp.ContentLength != int64(len(out)) {
		t.Errorf("Content-Length %d, body %d bytes", resp.ContentLength, len(out))
	}
	var r responsesReply
	for _, ev := range strings.Split(strings.TrimSpace(string(out)), "\n\n") {
		name, data := "", ""
		for _, line := range strings.Split(ev, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			} else if v, ok := strings.CutPrefix(line, "data: "); ok {
				data = v
			}
		}
		var d struct {
			Type     string         `json:"type"`
			Item     map[string]any `json:"item"`
			Response map[string]any `json:"response"`
		}
		if err := json.Unmarshal([]byte(data), &d); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		if d.Type != name {
			t.Errorf("event %q has type %q", name, d.Type)
		}
		r.Events = append(r.Events, name)
		if name == "response.output_item.done" {
			r.Item = d.Item
		}
		if name == "response.completed" && (d.Response["id"] == "" || d.Response["status"] != "completed") {
			t.Errorf("response.completed %v", d.Response)
		}
	}
	if want := []string{"response.created", "response.output_item.done", "response.completed"}; !cmp.Equal(r.Events, want) {
		t.Errorf("events %v, want %v", r.Events, want)
	}
	return r
}

// responsesArgs decodes a function call's arguments.
func responsesArgs(t *testing.T, item map[string]any) map[string]any {
	t.Helper()
	s, _ := item["arguments"].(string)
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("arguments of %v: %v", item, err)
	}
	return m
}

// TestResponsesDrivesCodexThroughTheHelloScript plays Codex's side of the
// hello fixture, request by request, as Codex 0.171.0 sends them.
func TestResponsesDrivesCodexThroughTheHelloScript(t *testing.T) {
	p, url := responsesProvider(t)
	conv := responsesPrompt()

	// 1. Write greeting.txt with exec_command, whatever the file held.
	r := responsesTurn(t, url, responsesTools, conv...)
	if r.Item["type"] != "function_call" || r.Item["name"] != "exec_command" || r.Item["namespace"] != nil {
		t.Fatalf("first reply %v, want an exec_command call", r.Item)
	}
	if got, want := responsesArgs(t, r.Item)["cmd"], ShellWrite("greeting.txt", "hello, harness\n"); got != want {
		t.Errorf("cmd %q, want %q", got, want)
	}
	conv = append(conv, responsesCall("call_hf_0", "exec_command", "", `{"cmd":"..."}`), responsesShellOutput)

	// 2. get_token is not offered yet: search for it.
	r = responsesTurn(t, url, responsesTools, conv...)
	if r.Item["type"] != "tool_search_call" || r.Item["execution"] != "client" || r.Item["call_id"] == "" {
		t.Fatalf("second reply %v, want a client tool_search_call", r.Item)
	}
	if q, _ := r.Item["arguments"].(map[string]any)["query"].(string); !strings.Contains(q, "get_token") {
		t.Errorf("tool_search query %q does not name get_token", q)
	}
	conv = append(conv, responsesSearch...)

	// 3. Found: call it in its namespace.
	r = responsesTurn(t, url, responsesTools, conv...)
	if r.Item["type"] != "function_call" || r.Item["name"] != "get_token" || r.Item["namespace"] != "mcp__harnessfacts" {
		t.Fatalf("third reply %v, want get_token in namespace mcp__harnessfacts", r.Item)
	}
	if len(responsesArgs(t, r.Item)) != 0 {
		t.Errorf("get_token arguments %v, want none", r.Item["arguments"])
	}
	conv = append(conv, responsesCall("call_hf_1", "get_token", "mcp__harnessfacts", "{}"), responsesMCPOutput)

	// 4. token.txt gets the bare token, without Codex's "Wall time" header.
	r = responsesTurn(t, url, responsesTools, conv...)
	if got, want := responsesArgs(t, r.Item)["cmd"], ShellWrite("token.txt", "hft_abc123\n"); got != want {
		t.Errorf("cmd %q, want %q", got, want)
	}
	conv = append(conv, responsesCall("call_hf_2", "exec_command", "", `{"cmd":"..."}`), responsesShellOutput)

	// 5. The answer.
	r = responsesTurn(t, url, responsesTools, conv...)
	if r.Item["type"] != "message" || r.Item["role"] != "assistant" {
		t.Fatalf("last reply %v, want an assistant message", r.Item)
	}
	content, _ := r.Item["content"].([]any)
	if len(content) != 1 || content[0].(map[string]any)["type"] != "output_text" ||
		!strings.Contains(content[0].(map[string]any)["text"].(string), "hello, harness") {
		t.Errorf("answer content %v", content)
	}

	var got []string
	for _, rec := range p.Requests() {
		if rec.Dialect != "responses" || rec.Model != "gpt-5.5" || rec.Error != "" || rec.AuthHeader != "authorization" || rec.KeySHA256 != KeyDigest("sk-test-key") {
			t.Errorf("record %+v", rec)
		}
		got = append(got, string(rec.Action)+":"+rec.Tool)
	}
	want := []string{"write:exec_command", "mcp:tool_search", "mcp:mcp__harnessfacts__get_token", "write:exec_command", "answer:"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("recorded actions (-want +got):\n%s", diff)
	}
}

// responsesCodeModeTools is what Codex 0.171.0 gives gpt-6.2-sol (its
// default model): no tools, and an additional_tools item whose "functions"
// namespace holds exec, a custom tool taking JavaScript.
var responsesCodeModeTools = map[string]any{"type": "additional_tools", "role": "developer", "tools": []any{
	map[string]any{"type": "namespace", "name": "functions", "tools": []any{
		map[string]any{"type": "custom", "name": "exec", "format": map[string]any{"type": "grammar", "syntax": "lark"}},
		map[string]any{"type": "function", "name": "wait"}}},
	map[string]any{"type": "namespace", "name": "collaboration", "tools": []any{
		map[string]any{"type": "function", "name": "spawn_agent"}}},
}}

// TestResponsesCodeMode plays the hello script with a code-mode model: each
// step is one exec call whose script calls the tool, and exec's output
// comes back as a custom_tool_call_output with a header.
func TestResponsesCodeMode(t *testing.T) {
	p, url := responsesProvider(t)
	conv := append([]any{responsesCodeModeTools}, responsesPrompt()...)
	exec := func(r responsesReply) string {
		t.Helper()
		if r.Item["type"] != "custom_tool_call" || r.Item["name"] != "exec" || r.Item["call_id"] == "" {
			t.Fatalf("reply %v, want a custom exec call", r.Item)
		}
		return r.Item["input"].(string)
	}
	output := func(id string, parts ...string) map[string]any {
		var out []any
		for _, p := range parts {
			out = append(out, map[string]any{"type": "input_text", "text": p})
		}
		return map[string]any{"type": "custom_tool_call_output", "call_id": id, "output": out}
	}
	cmd, _ := json.Marshal(map[string]any{"cmd": ShellWrite("greeting.txt", "hello, harness\n")})
	if js := exec(responsesTurn(t, url, nil, conv...)); js != "const r = await tools.exec_command("+string(cmd)+");\ntext(r.output);\n" {
		t.Errorf("write: %q", js)
	}
	conv = append(conv, output("call_hf_0", "Script completed\nWall time 0.1 seconds\nOutput:\n"))
	if js := exec(responsesTurn(t, url, nil, conv...)); !strings.HasPrefix(js, "const r = await tools.mcp__harnessfacts__get_token({});") {
		t.Errorf("get_token: %q", js)
	}
	conv = append(conv, output("call_hf_1", "Script completed\nWall time 0.1 seconds\nOutput:\n", "hft_abc123"))
	cmd, _ = json.Marshal(map[string]any{"cmd": ShellWrite("token.txt", "hft_abc123\n")})
	if js := exec(responsesTurn(t, url, nil, conv...)); !strings.Contains(js, string(cmd)) {
		t.Errorf("token write: %q, want the bare token written", js)
	}
	conv = append(conv, output("call_hf_2", "Script completed\nWall time 0.1 seconds\nOutput:\n"))
	if r := responsesTurn(t, url, nil, conv...); r.Item["type"] != "message" {
		t.Errorf("last reply %v, want the answer", r.Item)
	}
	var got []string
	for _, rec := range p.Requests() {
		got = append(got, string(rec.Action)+":"+rec.Tool)
	}
	want := []string{"write:exec:exec_command", "mcp:exec:mcp__harnessfacts__get_token", "write:exec:exec_command", "answer:"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("recorded actions (-want +got):\n%s", diff)
	}
}

// TestResponsesCallsAnOfferedNamespaceDirectly: a model without
// tool_search gets the MCP namespace among its tools.
func TestResponsesCallsAnOfferedNamespaceDirectly(t *testing.T) {
	_, url := responsesProvider(t)
	tools := []any{responsesTools[0], responsesMCPNamespace}
	conv := append(responsesPrompt(), responsesCall("call_hf_0", "exec_command", "", "{}"), responsesShellOutput)
	r := responsesTurn(t, url, tools, conv...)
	if r.Item["name"] != "get_token" || r.Item["namespace"] != "mcp__harnessfacts" {
		t.Errorf("reply %v, want get_token in namespace mcp__harnessfacts", r.Item)
	}
}

// TestResponsesCountsResultsSinceTheTask: context messages Codex adds
// (<environment_context>, ...) are no new task, and a new task starts the
// script again.
func TestResponsesCountsResultsSinceTheTask(t *testing.T) {
	_, url := responsesProvider(t)
	conv := append(responsesPrompt(), responsesCall("call_hf_0", "exec_command", "", "{}"), responsesShellOutput,
		map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "<turn_aborted>x</turn_aborted>"}}},
		map[string]any{"type": "reasoning", "summary": []any{}})
	if r := responsesTurn(t, url, responsesTools, conv...); r.Item["type"] != "tool_search_call" {
		t.Errorf("after one result and a context message: %v, want the MCP step", r.Item)
	}
	conv = append(conv, map[string]any{"type": "message", "role": "user", "content": "Do it again."})
	if r := responsesTurn(t, url, responsesTools, conv...); r.Item["name"] != "exec_command" {
		t.Errorf("after a new task: %v, want the first step again", r.Item)
	}
}

// TestResponsesWithoutToolsAnswers: a request with no tools (a summary, a
// title) gets text, and so does a script whose next step needs a tool the
// request lacks.
func TestResponsesWithoutToolsAnswers(t *testing.T) {
	p, url := responsesProvider(t)
	if r := responsesTurn(t, url, nil, responsesPrompt()...); r.Item["type"] != "message" {
		t.Errorf("no tools: %v, want a message", r.Item)
	}
	if r := responsesTurn(t, url, []any{map[string]any{"type": "function", "name": "view_image"}}, responsesPrompt()...); r.Item["type"] != "message" {
		t.Errorf("no shell tool: %v, want a message", r.Item)
	}
	recs := p.Requests()
	if len(recs) != 2 || recs[1].Action != ActAnswer || !strings.Contains(recs[1].Error, "no shell tool") {
		t.Errorf("records %+v, want the missing shell tool said", recs)
	}
}

// TestResponsesOlderShellTools: models Codex drives with its older shell
// tools get their argument shapes.
func TestResponsesOlderShellTools(t *testing.T) {
	_, url := responsesProvider(t)
	want := ShellWrite("greeting.txt", "hello, harness\n")
	r := responsesTurn(t, url, []any{map[string]any{"type": "function", "name": "shell_command"}}, responsesPrompt()...)
	if r.Item["name"] != "shell_command" || responsesArgs(t, r.Item)["command"] != want {
		t.Errorf("shell_command call %v, want command %q", r.Item, want)
	}
	r = responsesTurn(t, url, []any{map[string]any{"type": "function", "name": "shell"}}, responsesPrompt()...)
	if got := responsesArgs(t, r.Item)["command"]; r.Item["name"] != "shell" || !cmp.Equal(got, []any{"bash", "-lc", want}) {
		t.Errorf("shell call %v, want argv bash -lc %q", r.Item, want)
	}
}

// TestResponsesWithoutStreamAnswersJSON: "stream": false gets the response
// object.
func TestResponsesWithoutStreamAnswersJSON(t *testing.T) {
	_, url := responsesProvider(t)
	resp, out := responsesPost(t, url, map[string]any{"model": "m", "stream": false, "input": "hello", "tools": responsesTools})
	var o struct {
		Object string           `json:"object"`
		Status string           `json:"status"`
		Output []map[string]any `json:"output"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(out, &o) != nil || o.Object != "response" || o.Status != "completed" ||
		len(o.Output) != 1 || o.Output[0]["name"] != "exec_command" {
		t.Errorf("status %d: %s", resp.StatusCode, out)
	}
}

func TestResponsesRejectsWhatIsNotAResponsesRequest(t *testing.T) {
	_, url := responsesProvider(t)
	for name, body := range map[string]any{
		"not json":      "{",
		"input numbers": map[string]any{"model": "m", "input": 7},
	} {
		resp, out := responsesPost(t, url, body)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d: %s", name, resp.StatusCode, out)
		}
	}
	// Codex tries a WebSocket first; a 404 sends it to plain HTTP.
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Connection", "Upgrade")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("WebSocket upgrade: status %d, want 404", resp.StatusCode)
	}
}

func TestResponsesOutputText(t *testing.T) {
	for name, tc := range map[string]struct{ raw, want string }{
		"shell":       {`"Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with code 0\nOriginal token count: 3\nOutput:\nhft_x\n"`, "hft_x\n"},
		"shell empty": {`"Chunk ID: 1\nWall time: 0 seconds\nProcess exited with code 0\nOutput:\n"`, ""},
		"code mode":   {`[{"type":"input_text","text":"Script completed\nWall time 0.1 seconds\nOutput:\n"},{"type":"input_text","text":"hft_z"}]`, "hft_z"},
		"mcp parts":   {`[{"type":"input_text","text":"Wall time: 0.0048 seconds\nOutput:"},{"type":"input_text","text":"hft_y"}]`, "hft_y"},
		"plain":       {`"just text"`, "just text"},
		"parts":       {`[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]`, "ab"},
	} {
		if got := responsesOutputText(json.RawMessage(tc.raw)); got != tc.want {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}
