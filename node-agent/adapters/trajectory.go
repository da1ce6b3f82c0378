package adapters

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/harnessfacts/harnessfacts/node-agent/trajectory"
)

// TrajectoryInput is what a trajectory needs beyond the CLI's output.
type TrajectoryInput struct {
	// Prompt is the task the run gave the agent: the trajectory's first
	// (user) step, since not every CLI echoes it.
	Prompt string
	// CLIVersion is the CLI's version (ATIF's agent.version).
	CLIVersion string
	// Model is the model asked for, when the output does not say.
	Model string
	// SessionID is used when the output names no session.
	SessionID string
}

// TrajectoryReader is implemented by adapters whose CLI writes its
// conversation as structured events (Claude Code, Codex, Gemini CLI,
// OpenCode). Trajectory maps the run's redacted log (stderr mixed in, the
// end perhaps cut off) to ATIF; nil when the log holds no event of it.
// Aider, Antigravity and exec write no such stream: their runs have no
// trajectory, output.log is their record.
type TrajectoryReader interface {
	Trajectory(log []byte, in TrajectoryInput) *trajectory.Trajectory
}

// newTrajectory starts a trajectory of adapter name with the prompt as its
// first step.
func newTrajectory(name string, in TrajectoryInput) *trajectory.Trajectory {
	version := in.CLIVersion
	if version == "" {
		version = "unknown"
	}
	t := &trajectory.Trajectory{SchemaVersion: trajectory.SchemaVersion,
		Agent: trajectory.Agent{Name: name, Version: version, ModelName: in.Model}, Steps: []trajectory.Step{}}
	if in.Prompt != "" {
		t.Add(trajectory.Step{Source: trajectory.SourceUser, Message: in.Prompt})
	}
	return t
}

// done names the session (session when the CLI did not) and says nil
// when nothing of the conversation was found (only the prompt). The steps
// were numbered by Add.
func done(t *trajectory.Trajectory, found bool, session string) *trajectory.Trajectory {
	if !found {
		return nil
	}
	if t.SessionID == "" {
		t.SessionID = session
	}
	if t.SessionID == "" {
		t.SessionID = "unknown"
	}
	return t
}

// args is a tool call's arguments as a JSON object ({} for none).
func args(raw json.RawMessage) json.RawMessage {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return json.RawMessage(`{}`)
	}
	if s[0] != '{' {
		// A string holding JSON (OpenAI's function arguments), or a value.
		var str string
		if json.Unmarshal(raw, &str) == nil && strings.HasPrefix(strings.TrimSpace(str), "{") && json.Valid([]byte(str)) {
			return json.RawMessage(str)
		}
		b, _ := json.Marshal(map[string]json.RawMessage{"_value": raw})
		return b
	}
	return raw
}

// textOf is the text of a tool result: a string, or the text parts of a
// content list ([{"type":"text","text":...}]), else the JSON itself.
func textOf(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
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
			if p.Text != "" {
				if b.Len() > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(p.Text)
			}
		}
		if b.Len() > 0 {
			return b.String()
		}
	}
	var obj struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil && len(obj.Content) > 0 {
		if t := textOf(obj.Content); t != "" {
			return t
		}
	}
	return string(raw)
}

// Trajectory maps Claude Code's stream-json: each reply (assistant events
// sharing a message id) is an agent step with its text, thinking and
// tool_use blocks; the user events' tool_result blocks are the
// observations of the step that made the call; the result event gives the
// totals.
func (ClaudeCode) Trajectory(log []byte, in TrajectoryInput) *trajectory.Trajectory {
	t := newTrajectory("claude-code", in)
	type usage struct {
		InputTokens              int64 `json:"input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	}
	metrics := func(u *usage) *trajectory.Metrics {
		if u == nil {
			return nil
		}
		m := &trajectory.Metrics{PromptTokens: u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens,
			CompletionTokens: u.OutputTokens, CachedTokens: u.CacheReadInputTokens}
		if u.CacheCreationInputTokens > 0 {
			m.Extra = map[string]any{"cache_creation_input_tokens": u.CacheCreationInputTokens}
		}
		return m
	}
	byMessage := map[string]int{} // message id → step index
	byCall := map[string]int{}    // tool_use id → step index
	found := false
	jsonLines(log, func(line []byte) {
		var ev struct {
			Type      string `json:"type"`
			Subtype   string `json:"subtype"`
			SessionID string `json:"session_id"`
			Model     string `json:"model"`
			Timestamp string `json:"timestamp"`
			Message   *struct {
				ID      string `json:"id"`
				Model   string `json:"model"`
				Content []struct {
					Type      string          `json:"type"`
					Text      string          `json:"text"`
					Thinking  string          `json:"thinking"`
					ID        string          `json:"id"`
					Name      string          `json:"name"`
					Input     json.RawMessage `json:"input"`
					ToolUseID string          `json:"tool_use_id"`
					Content   json.RawMessage `json:"content"`
					IsError   bool            `json:"is_error"`
				} `json:"content"`
				Usage *usage `json:"usage"`
			} `json:"message"`
			Usage        *usage  `json:"usage"`
			NumTurns     int     `json:"num_turns"`
			IsError      bool    `json:"is_error"`
			TotalCostUSD float64 `json:"total_cost_usd"`
		}
		if json.Unmarshal(line, &ev) != nil {
			return
		}
		if t.SessionID == "" && ev.SessionID != "" {
			t.SessionID = ev.SessionID
		}
		switch ev.Type {
		case "system":
			if ev.Subtype == "init" && ev.Model != "" {
				t.Agent.ModelName = ev.Model
			}
		case "assistant":
			m := ev.Message
			if m == nil {
				return
			}
			found = true
			i, ok := byMessage[m.ID]
			if !ok || m.ID == "" {
				i = t.Add(trajectory.Step{Source: trajectory.SourceAgent, ModelName: m.Model, Timestamp: ev.Timestamp})
				byMessage[m.ID] = i
			}
			s := t.At(i)
			if s == nil {
				return // a step in the middle of a long log, left out
			}
			if m.Model == "<synthetic>" {
				// Claude Code's own message (not the model's).
				s.ModelName = ""
				s.Extra = map[string]any{"synthetic": true}
			}
			for _, b := range m.Content {
				switch b.Type {
				case "text":
					s.Join(&s.Message, "\n", b.Text)
				case "thinking":
					s.Join(&s.ReasoningContent, "\n", b.Thinking)
				case "tool_use", "server_tool_use":
					if s.AddCall(trajectory.ToolCall{ToolCallID: b.ID, FunctionName: b.Name, Arguments: args(b.Input)}) {
						byCall[b.ID] = i
					}
				}
			}
			if m.Usage != nil {
				s.Metrics = metrics(m.Usage)
			}
		case "user":
			if ev.Message == nil {
				return
			}
			for _, b := range ev.Message.Content {
				if b.Type != "tool_result" {
					continue
				}
				found = true
				content := textOf(b.Content)
				if b.IsError {
					content = "error: " + content
				}
				if i, ok := byCall[b.ToolUseID]; ok {
					if s := t.At(i); s != nil {
						s.AddResult(b.ToolUseID, content)
					}
				} else {
					// A result of a call this log does not hold (cut off).
					t.Add(trajectory.Step{Source: trajectory.SourceSystem, Message: "tool result " + b.ToolUseID + ": " + content})
				}
			}
		case "result":
			found = true
			fm := &trajectory.FinalMetrics{Extra: map[string]any{"subtype": ev.Subtype, "is_error": ev.IsError, "num_turns": ev.NumTurns}}
			if u := ev.Usage; u != nil {
				fm.TotalPromptTokens = u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
				fm.TotalCompletionTokens = u.OutputTokens
				fm.TotalCachedTokens = u.CacheReadInputTokens
				fm.Extra["total_cache_creation_input_tokens"] = u.CacheCreationInputTokens
			}
			if ev.TotalCostUSD > 0 {
				// The CLI's own figure from its built-in prices, not the
				// operator's price table.
				fm.Extra["cli_reported_cost_usd"] = ev.TotalCostUSD
			}
			t.FinalMetrics = fm
		}
	})
	return done(t, found, in.SessionID)
}

func joinText(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	return a + "\n" + b
}

// Trajectory maps Codex's exec --json events: each completed item is a
// step — agent_message and reasoning as the agent's text, command
// executions, MCP tool calls, file changes and web searches as a tool call
// with its result in the same step — and each turn.completed adds its
// usage to the totals. Codex's events do not say which model answered.
func (Codex) Trajectory(log []byte, in TrajectoryInput) *trajectory.Trajectory {
	t := newTrajectory("codex", in)
	found := false
	var fm trajectory.FinalMetrics
	counted := false
	jsonLines(log, func(line []byte) {
		var ev struct {
			Type     string          `json:"type"`
			ThreadID string          `json:"thread_id"`
			Item     json.RawMessage `json:"item"`
			Usage    *struct {
				InputTokens       int64 `json:"input_tokens"`
				CachedInputTokens int64 `json:"cached_input_tokens"`
				OutputTokens      int64 `json:"output_tokens"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
			Message string `json:"message"`
		}
		if json.Unmarshal(line, &ev) != nil {
			return
		}
		switch ev.Type {
		case "thread.started":
			if ev.ThreadID != "" {
				t.SessionID = ev.ThreadID
			}
		case "item.completed":
			if s, ok := codexStep(ev.Item); ok {
				found = true
				t.Add(s)
			}
		case "turn.completed":
			if u := ev.Usage; u != nil {
				found, counted = true, true
				fm.TotalPromptTokens += u.InputTokens
				fm.TotalCachedTokens += u.CachedInputTokens
				fm.TotalCompletionTokens += u.OutputTokens
			}
		case "turn.failed", "error":
			msg := ev.Message
			if ev.Error != nil {
				msg = ev.Error.Message
			}
			found = true
			t.Add(trajectory.Step{Source: trajectory.SourceSystem, Message: ev.Type + ": " + msg})
		}
	})
	if counted {
		t.FinalMetrics = &fm
	}
	return done(t, found, in.SessionID)
}

// codexStep is one completed Codex item as a step.
func codexStep(raw json.RawMessage) (trajectory.Step, bool) {
	var it struct {
		ID               string          `json:"id"`
		Type             string          `json:"type"`
		Text             string          `json:"text"`
		Command          string          `json:"command"`
		AggregatedOutput string          `json:"aggregated_output"`
		ExitCode         *int            `json:"exit_code"`
		Status           string          `json:"status"`
		Server           string          `json:"server"`
		Tool             string          `json:"tool"`
		Arguments        json.RawMessage `json:"arguments"`
		Result           json.RawMessage `json:"result"`
		Error            json.RawMessage `json:"error"`
		Changes          json.RawMessage `json:"changes"`
		Query            string          `json:"query"`
	}
	if json.Unmarshal(raw, &it) != nil {
		return trajectory.Step{}, false
	}
	s := trajectory.Step{Source: trajectory.SourceAgent}
	call := func(name string, a json.RawMessage, result string) {
		id := it.ID
		if id == "" {
			id = name
		}
		s.ToolCalls = []trajectory.ToolCall{{ToolCallID: id, FunctionName: name, Arguments: args(a)}}
		s.AddResult(id, result)
	}
	switch it.Type {
	case "agent_message":
		s.Message = it.Text
	case "reasoning":
		s.ReasoningContent = it.Text
	case "command_execution":
		a, _ := json.Marshal(map[string]string{"command": it.Command})
		result := it.AggregatedOutput
		if it.ExitCode != nil {
			result = joinText(result, "exit code "+itoa(*it.ExitCode))
		} else if it.Status != "" {
			result = joinText(result, it.Status)
		}
		call("command_execution", a, result)
	case "mcp_tool_call":
		result := textOf(it.Result)
		if e := strings.TrimSpace(string(it.Error)); e != "" && e != "null" {
			result = joinText(result, "error: "+textOf(it.Error))
		}
		call("mcp__"+it.Server+"__"+it.Tool, it.Arguments, result)
	case "file_change":
		a, _ := json.Marshal(map[string]json.RawMessage{"changes": orNull(it.Changes)})
		call("file_change", a, it.Status)
	case "web_search":
		a, _ := json.Marshal(map[string]string{"query": it.Query})
		call("web_search", a, it.Status)
	default:
		return trajectory.Step{}, false
	}
	s.Extra = map[string]any{"item_type": it.Type}
	return s, true
}

func orNull(r json.RawMessage) json.RawMessage {
	if len(r) == 0 {
		return json.RawMessage("null")
	}
	return r
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

var (
	_ TrajectoryReader = ClaudeCode{}
	_ TrajectoryReader = Codex{}
)

// Trajectory maps Gemini CLI's stream-json: the user message (the prompt),
// the assistant's text (deltas joined) and its tool_use events are agent
// steps — the calls of one model turn in one step — each tool_result the
// observation of its call; the result event gives the totals.
func (Gemini) Trajectory(log []byte, in TrajectoryInput) *trajectory.Trajectory {
	t := newTrajectory("gemini", in)
	found := false
	byCall := map[string]int{}
	// last is the agent step being written (-1: none): text and calls
	// join it until a result arrives.
	last := -1
	open := func(ts string) *trajectory.Step {
		if s := t.At(last); s != nil && s.Observation == nil {
			return s
		}
		last = t.Add(trajectory.Step{Source: trajectory.SourceAgent, Timestamp: ts, ModelName: t.Agent.ModelName})
		return t.At(last)
	}
	jsonLines(log, func(line []byte) {
		var ev struct {
			Type       string          `json:"type"`
			Timestamp  string          `json:"timestamp"`
			SessionID  string          `json:"session_id"`
			Model      string          `json:"model"`
			Role       string          `json:"role"`
			Content    string          `json:"content"`
			Delta      bool            `json:"delta"`
			ToolName   string          `json:"tool_name"`
			ToolID     string          `json:"tool_id"`
			Parameters json.RawMessage `json:"parameters"`
			Status     string          `json:"status"`
			Output     string          `json:"output"`
			Error      *struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
			Message string `json:"message"`
			Stats   *struct {
				InputTokens  int64 `json:"input_tokens"`
				OutputTokens int64 `json:"output_tokens"`
				TotalTokens  int64 `json:"total_tokens"`
				Cached       int64 `json:"cached"`
				ToolCalls    int64 `json:"tool_calls"`
				DurationMS   int64 `json:"duration_ms"`
			} `json:"stats"`
		}
		if json.Unmarshal(line, &ev) != nil {
			return
		}
		switch ev.Type {
		case "init":
			if ev.SessionID != "" {
				t.SessionID = ev.SessionID
			}
			if ev.Model != "" {
				t.Agent.ModelName = ev.Model
			}
		case "message":
			switch ev.Role {
			case "user":
				if ev.Content == in.Prompt && len(t.Steps) > 0 && t.Steps[0].Source == trajectory.SourceUser {
					t.Steps[0].Timestamp = ev.Timestamp
					return // the prompt, already the first step
				}
				found = true
				t.Add(trajectory.Step{Source: trajectory.SourceUser, Timestamp: ev.Timestamp, Message: ev.Content})
				last = -1
			case "assistant":
				found = true
				// Text joins the turn's step, before or after its calls.
				s := open(ev.Timestamp)
				s.Join(&s.Message, "", ev.Content)
			}
		case "tool_use":
			found = true
			s := open(ev.Timestamp)
			if s.AddCall(trajectory.ToolCall{ToolCallID: ev.ToolID, FunctionName: ev.ToolName, Arguments: args(ev.Parameters)}) {
				byCall[ev.ToolID] = last
			}
		case "tool_result":
			found = true
			content := ev.Output
			if ev.Error != nil {
				content = joinText(content, "error: "+ev.Error.Message)
			}
			if content == "" {
				content = ev.Status
			}
			if i, ok := byCall[ev.ToolID]; ok {
				if s := t.At(i); s != nil {
					s.AddResult(ev.ToolID, content)
				}
			} else {
				t.Add(trajectory.Step{Source: trajectory.SourceSystem, Timestamp: ev.Timestamp, Message: "tool result " + ev.ToolID + ": " + content})
				last = -1
			}
		case "error":
			found = true
			msg := ev.Message
			if ev.Error != nil {
				msg = ev.Error.Message
			}
			t.Add(trajectory.Step{Source: trajectory.SourceSystem, Timestamp: ev.Timestamp, Message: "error: " + msg})
			last = -1
		case "result":
			found = true
			fm := &trajectory.FinalMetrics{Extra: map[string]any{"status": ev.Status}}
			if st := ev.Stats; st != nil {
				fm.TotalPromptTokens, fm.TotalCompletionTokens, fm.TotalCachedTokens = st.InputTokens, geminiOutput(st.OutputTokens, st.InputTokens, st.TotalTokens), st.Cached
				fm.Extra["tool_calls"] = st.ToolCalls
			}
			t.FinalMetrics = fm
		}
	})
	return done(t, found, in.SessionID)
}

var _ TrajectoryReader = Gemini{}

// Trajectory maps OpenCode's --format json events: each step (step_start
// to step_finish, one message id) is an agent step holding its text,
// reasoning and tool parts — each tool part a call with its output or
// error in the same step — and step_finish gives the step's tokens.
func (OpenCode) Trajectory(log []byte, in TrajectoryInput) *trajectory.Trajectory {
	t := newTrajectory("opencode", in)
	found := false
	byMessage := map[string]int{}
	var fm trajectory.FinalMetrics
	counted := false
	// step is the step of message msgID; a scratch step (dropped) when
	// Add left it out of a long log.
	step := func(msgID string, ts int64) *trajectory.Step {
		i, ok := byMessage[msgID]
		if !ok || msgID == "" {
			i = t.Add(trajectory.Step{Source: trajectory.SourceAgent, Timestamp: msTime(ts), ModelName: in.Model})
			byMessage[msgID] = i
		}
		if s := t.At(i); s != nil {
			return s
		}
		return &trajectory.Step{}
	}
	jsonLines(log, func(line []byte) {
		var ev struct {
			Type      string `json:"type"`
			Timestamp int64  `json:"timestamp"`
			SessionID string `json:"sessionID"`
			Part      struct {
				MessageID string `json:"messageID"`
				Type      string `json:"type"`
				Text      string `json:"text"`
				Tool      string `json:"tool"`
				CallID    string `json:"callID"`
				State     struct {
					Status string          `json:"status"`
					Input  json.RawMessage `json:"input"`
					Output string          `json:"output"`
					Error  string          `json:"error"`
				} `json:"state"`
				Reason string          `json:"reason"`
				Tokens *openCodeTokens `json:"tokens"`
			} `json:"part"`
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(line, &ev) != nil {
			return
		}
		if ev.SessionID != "" && t.SessionID == "" {
			t.SessionID = ev.SessionID
		}
		p := ev.Part
		switch ev.Type {
		case "step_start":
			found = true
			step(p.MessageID, ev.Timestamp)
		case "text":
			found = true
			s := step(p.MessageID, ev.Timestamp)
			s.Join(&s.Message, "\n", p.Text)
		case "reasoning":
			found = true
			s := step(p.MessageID, ev.Timestamp)
			s.Join(&s.ReasoningContent, "\n", p.Text)
		case "tool_use":
			found = true
			s := step(p.MessageID, ev.Timestamp)
			id := p.CallID
			if id == "" {
				id = p.Tool
			}
			if s.AddCall(trajectory.ToolCall{ToolCallID: id, FunctionName: p.Tool, Arguments: args(p.State.Input)}) {
				content := p.State.Output
				if p.State.Error != "" {
					content = joinText(content, "error: "+p.State.Error)
				}
				if content == "" {
					content = p.State.Status
				}
				s.AddResult(id, content)
			}
		case "step_finish":
			found = true
			s := step(p.MessageID, ev.Timestamp)
			if tk := p.Tokens; tk != nil {
				m := &trajectory.Metrics{PromptTokens: tk.Input + tk.Cache.Read + tk.Cache.Write,
					CompletionTokens: tk.Output + tk.Reasoning, CachedTokens: tk.Cache.Read}
				if tk.Cache.Write > 0 {
					m.Extra = map[string]any{"cache_write_tokens": tk.Cache.Write}
				}
				s.Metrics = m
				counted = true
				fm.TotalPromptTokens += m.PromptTokens
				fm.TotalCompletionTokens += m.CompletionTokens
				fm.TotalCachedTokens += m.CachedTokens
			}
			if p.Reason != "" {
				s.Extra = map[string]any{"finish_reason": p.Reason}
			}
		case "error":
			found = true
			t.Add(trajectory.Step{Source: trajectory.SourceSystem, Timestamp: msTime(ev.Timestamp), Message: "error: " + textOf(ev.Error)})
		}
	})
	if counted {
		t.FinalMetrics = &fm
	}
	return done(t, found, in.SessionID)
}

// msTime is a Unix time in milliseconds as RFC 3339 ("" for none).
func msTime(ms int64) string {
	if ms <= 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
}

var _ TrajectoryReader = OpenCode{}
