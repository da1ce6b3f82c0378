package fakeprovider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"strings"
)

// anthropicDialect serves Anthropic Messages (Claude Code): POST
// /v1/messages (Claude Code adds ?beta=true), streamed as server-sent
// events when the request says "stream": true, one JSON message otherwise.
var anthropicDialect = dialect{name: "anthropic", serve: serveAnthropic}

// anthropicRequest is the part of a Messages request the script needs.
type anthropicRequest struct {
	Model    string                  `json:"model"`
	Stream   bool                    `json:"stream"`
	System   json.RawMessage         `json:"system"`
	Tools    []struct{ Name string } `json:"tools"`
	Messages []anthropicMessage      `json:"messages"`
}

// anthropicMessage is one message; Content is a string or a list of blocks.
type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthropicBlock is a content block: text, tool_use, tool_result, ...
type anthropicBlock struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// tool_use
	ID    string `json:"id,omitempty"`
	Name  string `json:"name,omitempty"`
	Input any    `json:"input,omitempty"`
	// tool_result: Content is a string or a list of blocks.
	Content json.RawMessage `json:"content,omitempty"`
}

// anthropicBlocks reads a content field: a plain string is one text block.
func anthropicBlocks(raw json.RawMessage) []anthropicBlock {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: s}}
	}
	var bs []anthropicBlock
	_ = json.Unmarshal(raw, &bs)
	return bs
}

// anthropicText joins the text blocks of a content field.
func anthropicText(raw json.RawMessage) string {
	var parts []string
	for _, b := range anthropicBlocks(raw) {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// anthropicTurn reduces a request to a Turn.
//
// Claude Code sends back every tool result of one reply in one user
// message, so a step is one such message and its result the text of the
// last tool_result in it (an MCP tool's result is its text content: for
// get_token the bare token). Counting messages, not results, lets a write
// over an existing file be a Read and a Write in one reply (see write).
func anthropicTurn(req *anthropicRequest) Turn {
	var t Turn
	for _, tool := range req.Tools {
		if tool.Name != "" {
			t.Tools = append(t.Tools, tool.Name)
		}
	}
	for _, m := range req.Messages {
		if m.Role != "user" {
			continue
		}
		last, found := "", false
		for _, b := range anthropicBlocks(m.Content) {
			if b.Type == "tool_result" {
				last, found = anthropicText(b.Content), true
			}
		}
		if found {
			t.Results = append(t.Results, last)
		}
	}
	return t
}

// anthropicWorkDirRE finds the agent's working directory in Claude Code's system
// prompt ("Primary working directory: /path"): Write wants absolute paths.
var anthropicWorkDirRE = regexp.MustCompile(`(?m)Primary working directory: (/[^\n\r]*)`)

func (req *anthropicRequest) workDir() string {
	if m := anthropicWorkDirRE.FindStringSubmatch(anthropicText(req.System)); m != nil {
		return strings.TrimSpace(m[1])
	}
	// A system prompt sent as a mid-conversation "system" message.
	for _, m := range req.Messages {
		if mm := anthropicWorkDirRE.FindStringSubmatch(anthropicText(m.Content)); mm != nil {
			return strings.TrimSpace(mm[1])
		}
	}
	return ""
}

func serveAnthropic(x *exchange) {
	var req anthropicRequest
	if err := json.Unmarshal(x.body, &req); err != nil {
		x.fail(http.StatusBadRequest, fmt.Errorf("not an Anthropic Messages request: %w", err))
		return
	}
	x.rec.Model = req.Model
	turn := anthropicTurn(&req)
	a := x.next(turn)
	content, stop := anthropicReply(&req, turn, a, len(req.Messages))
	if content == nil {
		// The script wants a tool the CLI does not offer: answer, so the
		// run ends (and fails its checks) instead of looping.
		x.rec.Error = "no offered tool can " + string(a.Kind) + " (offered: " + strings.Join(turn.Tools, ", ") + ")"
		x.rec.Action = ActAnswer
		content, stop = anthropicReply(&req, turn, Action{Kind: ActAnswer, Text: DefaultAnswer}, len(req.Messages))
	}
	x.rec.Tool = ""
	for _, b := range content {
		if b.Type == "tool_use" {
			x.rec.Tool = b.Name
		}
	}
	id := fmt.Sprintf("msg_hf_%d", len(req.Messages))
	if !req.Stream {
		b, _ := json.Marshal(map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": AnsweredModel(req.Model),
			"content": content, "stop_reason": stop, "stop_sequence": nil,
			"usage": anthropicUsage(x.usage, x.usage.Output),
		})
		x.writeBody("application/json", b)
		return
	}
	var s SSE
	event := func(name string, v map[string]any) {
		v["type"] = name
		b, _ := json.Marshal(v)
		s.Event(name, b)
	}
	event("message_start", map[string]any{"message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": AnsweredModel(req.Model),
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": anthropicUsage(x.usage, 1),
	}})
	for i, b := range content {
		switch b.Type {
		case "text":
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "text_delta", "text": b.Text}})
		case "tool_use":
			input, _ := json.Marshal(b.Input)
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{
				"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}})
			event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
		}
		event("content_block_stop", map[string]any{"index": i})
	}
	event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]int64{"output_tokens": x.usage.Output}})
	event("message_stop", map[string]any{})
	x.writeBody("text/event-stream", s.Bytes())
}

// anthropicReply is the content of the reply that does a, with its stop
// reason; nil when no offered tool can do it. n numbers the tool_use ids,
// which must be unique within the conversation.
func anthropicReply(req *anthropicRequest, t Turn, a Action, n int) ([]anthropicBlock, string) {
	use := func(k int, name string, input any) anthropicBlock {
		return anthropicBlock{Type: "tool_use", ID: fmt.Sprintf("toolu_hf_%d_%d_%d", a.Step, n, k), Name: name, Input: input}
	}
	switch a.Kind {
	case ActWrite:
		if name, ok := Find(t.Tools, "Write"); ok {
			file := a.Path
			if dir := req.workDir(); dir != "" {
				file = path.Join(dir, a.Path)
			}
			// Claude Code's Write refuses to overwrite a file this session has
			// not read ("File has not been read yet"), and the provider cannot
			// know whether the fixture's workspace holds the file. So the
			// reply reads it first, in the same message: Claude Code runs the
			// (read-only, concurrent) Read before the Write, a missing file
			// only makes the Read fail, and both results come back in one
			// user message, which stays one step (see anthropicTurn).
			var out []anthropicBlock
			if read, ok := Find(t.Tools, "Read"); ok {
				out = append(out, use(0, read, map[string]any{"file_path": file}))
			}
			return append(out, use(1, name, map[string]any{"file_path": file, "content": a.Content})), "tool_use"
		}
		if name, ok := Find(t.Tools, "Bash"); ok {
			return []anthropicBlock{use(0, name, map[string]any{"command": ShellWrite(a.Path, a.Content), "description": "Write " + a.Path})}, "tool_use"
		}
		return nil, ""
	case ActShell:
		if name, ok := Find(t.Tools, "Bash"); ok {
			return []anthropicBlock{use(0, name, map[string]any{"command": a.Command, "description": "Run the scripted command"})}, "tool_use"
		}
		return nil, ""
	case ActMCP:
		return []anthropicBlock{use(0, a.Tool, a.Arguments)}, "tool_use"
	default:
		return []anthropicBlock{{Type: "text", Text: a.Text}}, "end_turn"
	}
}

// anthropicUsage is a Message's usage with output tokens so far (a
// stream's message_start says 1; its message_delta gives the total).
func anthropicUsage(u Usage, output int64) map[string]int64 {
	return map[string]int64{"input_tokens": u.Input, "output_tokens": output,
		"cache_read_input_tokens": u.CacheRead, "cache_creation_input_tokens": u.CacheWrite}
}
