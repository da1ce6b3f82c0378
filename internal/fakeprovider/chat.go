package fakeprovider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// chatDialect serves OpenAI Chat Completions (POST /v1/chat/completions),
// which OpenCode (through @ai-sdk/openai-compatible) and Aider (through
// litellm) speak.
//
// A request that offers tools gets the script's next step as one tool call
// in the tools' own names: OpenCode's write{filePath, content} and
// bash{command, description}, an MCP tool as <server>_<tool>. Tool results
// come back as role "tool" messages; their count picks the step.
//
// A request that offers no tools is one of two things, told apart by its
// system prompt:
//
//   - Aider, which has no tools at all: it edits files from the model's TEXT,
//     in its edit format. For a model it does not know (openai/NAME) that is
//     the "whole" format, whose system prompt asks for a "*file listing*":
//     the file's path alone on a line, then a fenced block with the whole new
//     content. Such a request gets the script's leading write steps rendered
//     as file listings, and the answer; the first step that text cannot do
//     (a shell command, an MCP call) ends the listings, since Aider can do
//     neither.
//   - anything else (OpenCode's title or summary requests): plain text, the
//     script's answer.
var chatDialect = dialect{name: "chat", serve: serveChat}

// chatRequest is the part of a Chat Completions request the dialect reads.
type chatRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []chatMessage `json:"messages"`
	Tools    []struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

// chatToolCall is a tool call in the reply's wire shape.
type chatToolCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// aiderWholeMarker is in the system prompt of Aider's "whole" edit format
// (aider/coders/wholefile_prompts.py): "You MUST use this *file listing*
// format".
const aiderWholeMarker = "*file listing*"

func serveChat(x *exchange) {
	var req chatRequest
	if err := json.Unmarshal(x.body, &req); err != nil {
		x.fail(http.StatusBadRequest, fmt.Errorf("not a Chat Completions request: %w", err))
		return
	}
	x.rec.Model = req.Model
	turn := Turn{}
	for _, t := range req.Tools {
		if t.Function.Name != "" {
			turn.Tools = append(turn.Tools, t.Function.Name)
		}
	}
	for _, m := range req.Messages {
		if m.Role == "tool" {
			turn.Results = append(turn.Results, unwrapToolText(chatText(m.Content)))
		}
	}

	var (
		text  string
		calls []chatToolCall
	)
	if len(turn.Tools) == 0 && chatSystemHas(req.Messages, aiderWholeMarker) {
		text = aiderWhole(x)
	} else {
		a := x.next(turn)
		switch a.Kind {
		case ActAnswer:
			text = a.Text
		default:
			name, args, err := chatCall(turn.Tools, a)
			if err != nil {
				// The script cannot be followed with what is offered: say so
				// in text, so the CLI ends its turn instead of looping.
				x.rec.Error, x.rec.Action, x.rec.Tool = err.Error(), ActAnswer, ""
				text = "The scripted provider cannot do this step: " + err.Error()
				break
			}
			x.rec.Tool = name
			c := chatToolCall{ID: fmt.Sprintf("call_hf_%d_%d", a.Step, len(turn.Results)), Type: "function"}
			c.Function.Name, c.Function.Arguments = name, string(args)
			calls = append(calls, c)
		}
	}
	if req.Stream {
		// As OpenAI's API: a stream carries its usage only when asked
		// (stream_options.include_usage), which Aider, for one, does not.
		asked := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
		if !asked {
			x.usage = Usage{}
		}
		x.writeBody("text/event-stream", chatStream(AnsweredModel(req.Model), text, calls, x.usage, asked))
		return
	}
	x.writeBody("application/json", chatJSON(AnsweredModel(req.Model), text, calls, x.usage))
}

// chatCall turns a tool action into an offered tool and its JSON
// arguments.
func chatCall(offered []string, a Action) (string, []byte, error) {
	var (
		name string
		args any
	)
	switch a.Kind {
	case ActWrite:
		if n, ok := Find(offered, "write"); ok {
			// OpenCode resolves a relative filePath against its working
			// directory (the workspace), so the script's path is passed as
			// it is.
			name, args = n, map[string]string{"filePath": a.Path, "content": a.Content}
			break
		}
		if n, ok := Find(offered, "bash"); ok {
			name, args = n, map[string]string{"command": ShellWrite(a.Path, a.Content), "description": "Write " + a.Path}
			break
		}
		return "", nil, fmt.Errorf("step %d writes %s, but neither write nor bash is offered (offered: %s)", a.Step, a.Path, strings.Join(offered, ", "))
	case ActShell:
		n, ok := Find(offered, "bash")
		if !ok {
			return "", nil, fmt.Errorf("step %d runs a command, but bash is not offered (offered: %s)", a.Step, strings.Join(offered, ", "))
		}
		name, args = n, map[string]string{"command": a.Command, "description": "Run a command"}
	case ActMCP:
		name, args = a.Tool, a.Arguments
	default:
		return "", nil, fmt.Errorf("step %d is not a tool call", a.Step)
	}
	b, err := json.Marshal(args)
	return name, b, err
}

// aiderWhole renders the script's leading write steps in Aider's whole-file
// format, then the answer, and records what it did.
func aiderWhole(x *exchange) string {
	var b strings.Builder
	writes := 0
	for _, st := range x.script.Steps {
		if st.Write == nil {
			break
		}
		content := strings.ReplaceAll(st.Write.Content, ResultPlaceholder, "")
		if content != "" && !strings.HasSuffix(content, "\n") {
			content += "\n"
		}
		fmt.Fprintf(&b, "%s\n```\n%s```\n\n", st.Write.Path, content)
		writes++
	}
	answer := DefaultAnswer
	if n := len(x.script.Steps); x.script.Steps[n-1].Answer != "" {
		answer = strings.ReplaceAll(x.script.Steps[n-1].Answer, ResultPlaceholder, "")
	}
	x.rec.Action = ActAnswer
	if writes > 0 {
		x.rec.Action, x.rec.Tool = ActWrite, "aider-whole-file"
	}
	if writes < len(x.script.Steps) && x.script.Steps[writes].Answer == "" {
		x.rec.Error = fmt.Sprintf("step %d cannot be done in Aider's whole-file text format; the listings stop there", writes)
	}
	return b.String() + answer
}

// chatSystemHas reports whether a system (or developer) message contains s.
func chatSystemHas(msgs []chatMessage, s string) bool {
	for _, m := range msgs {
		if (m.Role == "system" || m.Role == "developer") && strings.Contains(chatText(m.Content), s) {
			return true
		}
	}
	return false
}

// chatText is a message's content as text: a string, or the text parts of
// an array of parts.
func chatText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return string(raw)
}

// unwrapToolText is a tool result's bare text: an MCP result passed on as
// JSON ({"content":[{"type":"text","text":…}]} or its parts array) becomes
// its text, anything else stays as it is.
func unwrapToolText(s string) string {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "{") && !strings.HasPrefix(t, "[") {
		return s
	}
	type part struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	join := func(ps []part) (string, bool) {
		var b strings.Builder
		for _, p := range ps {
			if p.Type != "text" {
				return "", false
			}
			b.WriteString(p.Text)
		}
		return b.String(), len(ps) > 0
	}
	var ps []part
	if json.Unmarshal([]byte(t), &ps) == nil {
		if v, ok := join(ps); ok {
			return v
		}
	}
	var obj struct {
		Content []part `json:"content"`
	}
	if json.Unmarshal([]byte(t), &obj) == nil {
		if v, ok := join(obj.Content); ok {
			return v
		}
	}
	return s
}

// chatID names replies; it need not be unique for these CLIs.
const chatID = "chatcmpl-harnessfacts"

func chatFinish(calls []chatToolCall) string {
	if len(calls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

// chatUsage is u as Chat Completions says it: the prompt includes the
// cached tokens.
func chatUsage(u Usage) map[string]any {
	return map[string]any{"prompt_tokens": u.Input + u.CacheRead, "completion_tokens": u.Output,
		"total_tokens": u.Input + u.CacheRead + u.Output, "prompt_tokens_details": map[string]int64{"cached_tokens": u.CacheRead}}
}

// chatStream is the reply as chat.completion.chunk events: the role, the
// text or the tool calls, the finish reason, the usage when asked, then
// [DONE].
func chatStream(model, text string, calls []chatToolCall, u Usage, withUsage bool) []byte {
	var sse SSE
	chunk := func(delta map[string]any, finish any, usage any) {
		choices := []map[string]any{}
		if delta != nil {
			choices = append(choices, map[string]any{"index": 0, "delta": delta, "finish_reason": finish})
		}
		m := map[string]any{"id": chatID, "object": "chat.completion.chunk", "created": 0, "model": model, "choices": choices}
		if usage != nil {
			m["usage"] = usage
		}
		b, _ := json.Marshal(m)
		sse.Event("", b)
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil)
	if text != "" {
		chunk(map[string]any{"content": text}, nil, nil)
	}
	if len(calls) > 0 {
		chunk(map[string]any{"tool_calls": calls}, nil, nil)
	}
	chunk(map[string]any{}, chatFinish(calls), nil)
	if withUsage {
		chunk(nil, nil, chatUsage(u))
	}
	sse.Event("", []byte("[DONE]"))
	return sse.Bytes()
}

// chatJSON is the reply as one chat.completion object.
func chatJSON(model, text string, calls []chatToolCall, u Usage) []byte {
	msg := map[string]any{"role": "assistant", "content": text}
	if len(calls) > 0 {
		msg["content"] = nil
		// A complete message's tool calls carry no index.
		var cs []map[string]any
		for _, c := range calls {
			cs = append(cs, map[string]any{"id": c.ID, "type": c.Type,
				"function": map[string]string{"name": c.Function.Name, "arguments": c.Function.Arguments}})
		}
		msg["tool_calls"] = cs
	}
	b, _ := json.Marshal(map[string]any{
		"id": chatID, "object": "chat.completion", "created": 0, "model": model,
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": chatFinish(calls)}},
		"usage":   chatUsage(u),
	})
	return b
}
