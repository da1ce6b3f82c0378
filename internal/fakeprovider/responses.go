package fakeprovider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// responsesDialect serves OpenAI Responses (Codex): POST /v1/responses with
// "stream": true, answered by one complete SSE body.
//
// Codex offers its own tools as functions (exec_command, ...) and each MCP
// server's tools as a namespace "mcp__SERVER" holding one function per
// tool. The dialect spells a namespaced function "NAMESPACE__FUNCTION"
// (mcp__harnessfacts__get_token) for the script, and calls it back as
// {"name": FUNCTION, "namespace": NAMESPACE}, the only form Codex routes to
// the MCP server.
//
// Codex edits files with apply_patch (offered only to some models) or its
// shell, so a write step is an exec_command running ShellWrite: one call per
// step whatever the file held before (the hello fixture's greeting.txt
// exists already, and an apply_patch update would need its old lines), so
// the step count stays one tool result per step.
//
// Newer models (Codex's default gpt-6.x) run in "code mode" instead: their
// one tool is exec, whose input is JavaScript calling the others (see
// serveResponsesCodeMode).
var responsesDialect = dialect{name: "responses", serve: serveResponses}

// responsesRequest is the part of a Responses request the dialect reads.
type responsesRequest struct {
	Model  string          `json:"model"`
	Input  json.RawMessage `json:"input"`
	Tools  []responsesTool `json:"tools"`
	Stream *bool           `json:"stream"`
}

type responsesTool struct {
	Type  string          `json:"type"`
	Name  string          `json:"name"`
	Tools []responsesTool `json:"tools"`
}

// responsesItem is one input item: a message, a function call the model
// made, a tool's output, or anything else (reasoning), which is skipped.
type responsesItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Output  json.RawMessage `json:"output"`
	// Tools are the tools a tool_search_output found, or those an
	// additional_tools item adds.
	Tools []responsesTool `json:"tools"`
}

// responsesShell is Codex's shell tool (exec_command {"cmd"}) and the
// older ones (shell_command {"command": string}, shell {"command": argv}).
var responsesShell = []string{"exec_command", "shell_command", "shell"}

func serveResponses(x *exchange) {
	var req responsesRequest
	if err := json.Unmarshal(x.body, &req); err != nil {
		x.fail(http.StatusBadRequest, fmt.Errorf("a Responses request: %w", err))
		return
	}
	x.rec.Model = req.Model
	items, err := responsesInput(req.Input)
	if err != nil {
		x.fail(http.StatusBadRequest, err)
		return
	}
	// names maps an offered name to the (namespace, function) to call.
	names := map[string][2]string{}
	var offered []string
	search := false
	custom := map[string]bool{}
	add := func(tools []responsesTool) {
		for _, t := range tools {
			switch t.Type {
			case "function", "custom":
				offered = append(offered, t.Name)
				names[t.Name] = [2]string{"", t.Name}
				custom[t.Name] = t.Type == "custom"
			case "namespace":
				for _, f := range t.Tools {
					n := t.Name + "__" + f.Name
					if t.Name == "functions" {
						// The model's own namespace: plain names.
						n = f.Name
						names[n] = [2]string{"", f.Name}
					} else {
						names[n] = [2]string{t.Name, f.Name}
					}
					offered = append(offered, n)
					custom[n] = f.Type == "custom"
				}
			case "tool_search":
				search = true
			}
		}
	}
	add(req.Tools)
	for _, it := range items {
		if it.Type == "tool_search_output" || it.Type == "additional_tools" {
			add(it.Tools)
		}
	}
	results := responsesResults(items)
	var item map[string]any
	if st, ok := responsesDeferredMCP(x.script, results, offered, search); ok {
		// Codex defers MCP tools behind tool_search: search for the tool
		// first. Its output is no tool result of the script's, so the next
		// request is at the same step, with the tool found.
		x.rec.Tools, x.rec.Results = offered, len(results)
		x.rec.Action, x.rec.Tool = ActMCP, "tool_search"
		item = map[string]any{"type": "tool_search_call", "call_id": fmt.Sprintf("call_hf_search_%d", len(results)),
			"execution": "client", "status": "completed", "arguments": map[string]any{"query": st.Server + " " + st.Tool, "limit": 8}}
		x.writeBody("text/event-stream", responsesStream(fmt.Sprintf("resp_hf_search_%d", len(results)), AnsweredModel(req.Model), item, x.usage))
		return
	}
	if _, ok := Find(offered, responsesShell...); !ok && names["exec"] == [2]string{"", "exec"} && custom["exec"] {
		serveResponsesCodeMode(x, &req, offered, results)
		return
	}
	a := x.next(Turn{Tools: offered, Results: results})
	call := func(tool string, args any) map[string]any {
		x.rec.Tool = tool
		b, _ := json.Marshal(args)
		id := fmt.Sprintf("call_hf_%d", a.Step)
		item := map[string]any{"type": "function_call", "id": "fc_hf_" + fmt.Sprint(a.Step), "call_id": id,
			"name": names[tool][1], "arguments": string(b), "status": "completed"}
		if ns := names[tool][0]; ns != "" {
			item["namespace"] = ns
		}
		return item
	}
	switch a.Kind {
	case ActWrite, ActShell:
		shell, ok := Find(offered, responsesShell...)
		if !ok {
			x.rec.Error = "no shell tool offered (" + strings.Join(offered, ", ") + ")"
			item = responsesText(a.Step, DefaultAnswer)
			x.rec.Action = ActAnswer
			break
		}
		cmd := a.Command
		if a.Kind == ActWrite {
			cmd = ShellWrite(a.Path, a.Content)
		}
		switch shell {
		case "shell":
			// The oldest shell tool takes an argv.
			item = call(shell, map[string]any{"command": []string{"bash", "-lc", cmd}})
		case "shell_command":
			item = call(shell, map[string]any{"command": cmd})
		default:
			item = call(shell, map[string]any{"cmd": cmd})
		}
	case ActMCP:
		item = call(a.Tool, a.Arguments)
	default:
		item = responsesText(a.Step, a.Text)
	}
	id := fmt.Sprintf("resp_hf_%d", a.Step)
	if req.Stream != nil && !*req.Stream {
		// A plain request gets the response object alone.
		b, _ := json.Marshal(responsesObject(id, AnsweredModel(req.Model), item, x.usage))
		x.writeBody("application/json", b)
		return
	}
	x.writeBody("text/event-stream", responsesStream(id, AnsweredModel(req.Model), item, x.usage))
}

// responsesDeferredMCP returns the script's next step when it calls an MCP tool
// the request does not offer but could find with tool_search.
func responsesDeferredMCP(s *Script, results, offered []string, search bool) (*MCPStep, bool) {
	i := len(results)
	if !search || i >= len(s.Steps) || s.Steps[i].MCP == nil {
		return nil, false
	}
	st := s.Steps[i].MCP
	if _, ok := MCPToolName(offered, st.Server, st.Tool); ok {
		return nil, false
	}
	return st, true
}

// responsesObject is a completed response holding item.
func responsesObject(id, model string, item map[string]any, u Usage) map[string]any {
	return map[string]any{"id": id, "object": "response", "status": "completed", "model": model, "output": []any{item},
		"usage": map[string]any{"input_tokens": u.Input + u.CacheRead, "output_tokens": u.Output, "total_tokens": u.Input + u.CacheRead + u.Output,
			"input_tokens_details": map[string]any{"cached_tokens": u.CacheRead}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}}
}

// responsesStream is the minimal stream Codex accepts: response.created,
// one response.output_item.done per output item, response.completed.
func responsesStream(id, model string, item map[string]any, u Usage) []byte {
	var s SSE
	event := func(name string, v map[string]any) {
		v["type"] = name
		b, _ := json.Marshal(v)
		s.Event(name, b)
	}
	event("response.created", map[string]any{"response": map[string]any{"id": id, "object": "response", "status": "in_progress", "model": model}})
	event("response.output_item.done", map[string]any{"output_index": 0, "item": item})
	event("response.completed", map[string]any{"response": responsesObject(id, model, item, u)})
	return s.Bytes()
}

// responsesText is an assistant message holding text.
func responsesText(step int, text string) map[string]any {
	return map[string]any{"type": "message", "role": "assistant", "id": fmt.Sprintf("msg_hf_%d", step), "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}
}

// responsesInput reads input: a list of items, or a bare string (one user
// message).
func responsesInput(raw json.RawMessage) ([]responsesItem, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return []responsesItem{{Type: "message", Role: "user"}}, nil
	}
	var items []responsesItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("a Responses request's input: %w", err)
	}
	return items, nil
}

// responsesResults are the tool outputs after the task's prompt, the last
// user message that is not one of Codex's context blocks
// (<environment_context>, <user_instructions>, ...), each unwrapped.
func responsesResults(items []responsesItem) []string {
	start := 0
	for i, it := range items {
		if (it.Type == "message" || it.Type == "") && it.Role == "user" && !responsesContextBlock(it.Content) {
			start = i + 1
		}
	}
	var out []string
	for _, it := range items[start:] {
		if it.Type == "function_call_output" || it.Type == "custom_tool_call_output" {
			out = append(out, responsesOutputText(it.Output))
		}
	}
	return out
}

// responsesContextBlock reports whether a user message is context Codex
// adds (its text starts with an XML-like tag) rather than the user's words.
func responsesContextBlock(content json.RawMessage) bool {
	text := responsesContentText(content)
	return strings.HasPrefix(strings.TrimSpace(text), "<")
}

// responsesContentText joins the text of a message's content: a string or a list of
// parts with "text".
func responsesContentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// responsesOutputText unwraps a function_call_output's output to what the
// tool returned: the string itself, or the text of its content parts joined.
// Codex puts a header in front of what a tool returned, as text for
// exec_command ("Chunk ID: ...\nWall time: ...\nProcess exited with code
// 0\nOriginal token count: 0\nOutput:\n" + output) and as a part of its own
// for an MCP tool ("Wall time: ... seconds\nOutput:", then the tool's
// parts) and for code mode's exec ("Script completed\nWall time ...
// seconds\nOutput:\n", then what the script passed to text()); only what
// follows "Output:" is the tool's.
func responsesOutputText(raw json.RawMessage) string {
	text := responsesContentText(raw)
	for _, h := range []string{"Chunk ID: ", "Wall time: ", "Script "} {
		if !strings.HasPrefix(text, h) {
			continue
		}
		if _, after, ok := strings.Cut(text, "Output:"); ok {
			return strings.TrimPrefix(after, "\n")
		}
	}
	return text
}

// serveResponsesCodeMode answers a model Codex drives in "code mode"
// (gpt-6.x): its one tool is exec, a custom tool whose input is JavaScript
// that calls the other tools as tools.NAME(args); every MCP tool is there as
// tools.mcp__SERVER__TOOL.
func serveResponsesCodeMode(x *exchange, req *responsesRequest, offered, results []string) {
	tools := append([]string{"exec_command"}, offered...)
	for _, st := range x.script.Steps {
		if st.MCP != nil {
			tools = append(tools, "mcp__"+st.MCP.Server+"__"+st.MCP.Tool)
		}
	}
	a := x.next(Turn{Tools: tools, Results: results})
	var js string
	switch a.Kind {
	case ActWrite, ActShell:
		cmd := a.Command
		if a.Kind == ActWrite {
			cmd = ShellWrite(a.Path, a.Content)
		}
		b, _ := json.Marshal(map[string]any{"cmd": cmd})
		js = "const r = await tools.exec_command(" + string(b) + ");\ntext(r.output);\n"
		x.rec.Tool = "exec:exec_command"
	case ActMCP:
		b, _ := json.Marshal(a.Arguments)
		js = "const r = await tools." + a.Tool + "(" + string(b) + ");\ntext(r.content.map((c) => c.text).join(\"\"));\n"
		x.rec.Tool = "exec:" + a.Tool
	}
	item := responsesText(a.Step, a.Text)
	if js != "" {
		item = map[string]any{"type": "custom_tool_call", "id": fmt.Sprintf("ctc_hf_%d", a.Step), "call_id": fmt.Sprintf("call_hf_%d", a.Step),
			"name": "exec", "input": js, "status": "completed"}
	}
	x.writeBody("text/event-stream", responsesStream(fmt.Sprintf("resp_hf_%d", a.Step), AnsweredModel(req.Model), item, x.usage))
}
