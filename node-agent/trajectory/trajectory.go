// Package trajectory is a run's conversation — the messages, the tool calls
// and their results — in Harbor's Agent Trajectory Interchange Format
// (ATIF), version SchemaVersion (Harbor's RFC 0001, "ATIF-v1.4"). The
// adapters build one from their CLI's event stream; the node-agent bounds
// and redacts it before it is hashed into the evidence as trajectory.json.
//
// Only the fields this project fills are declared; extra objects carry
// what ATIF has no field for. Validate checks the rules of Harbor's own
// validator: sequential step ids from 1, a known source, agent-only fields
// only on agent steps, each observation result naming a tool call of its
// step, arguments that are JSON objects, ISO 8601 timestamps.
package trajectory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// SchemaVersion is the ATIF version written.
const SchemaVersion = "ATIF-v1.4"

// Step sources.
const (
	SourceSystem = "system"
	SourceUser   = "user"
	SourceAgent  = "agent"
)

// Trajectory is ATIF's root object.
type Trajectory struct {
	SchemaVersion string         `json:"schema_version"`
	SessionID     string         `json:"session_id"`
	Agent         Agent          `json:"agent"`
	Steps         []Step         `json:"steps"`
	Notes         string         `json:"notes,omitempty"`
	FinalMetrics  *FinalMetrics  `json:"final_metrics,omitempty"`
	Extra         map[string]any `json:"extra,omitempty"`

	held held // what Add left out
}

// Agent is ATIF's AgentSchema.
type Agent struct {
	Name      string         `json:"name"`
	Version   string         `json:"version"`
	ModelName string         `json:"model_name,omitempty"`
	Extra     map[string]any `json:"extra,omitempty"`
}

// Step is ATIF's StepObject.
type Step struct {
	StepID           int            `json:"step_id"`
	Timestamp        string         `json:"timestamp,omitempty"`
	Source           string         `json:"source"`
	ModelName        string         `json:"model_name,omitempty"`
	Message          string         `json:"message"`
	ReasoningContent string         `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall     `json:"tool_calls,omitempty"`
	Observation      *Observation   `json:"observation,omitempty"`
	Metrics          *Metrics       `json:"metrics,omitempty"`
	Extra            map[string]any `json:"extra,omitempty"`

	// overflow: Join, AddCall or AddResult left something out.
	overflow bool
}

// ToolCall is ATIF's ToolCallSchema.
type ToolCall struct {
	ToolCallID   string          `json:"tool_call_id"`
	FunctionName string          `json:"function_name"`
	Arguments    json.RawMessage `json:"arguments"`
}

// Observation is ATIF's ObservationSchema.
type Observation struct {
	Results []Result `json:"results"`
}

// Result is ATIF's ObservationResultSchema.
type Result struct {
	SourceCallID string `json:"source_call_id,omitempty"`
	Content      string `json:"content,omitempty"`
}

// Metrics is ATIF's MetricsSchema: prompt tokens include the cached ones.
type Metrics struct {
	PromptTokens     int64          `json:"prompt_tokens,omitempty"`
	CompletionTokens int64          `json:"completion_tokens,omitempty"`
	CachedTokens     int64          `json:"cached_tokens,omitempty"`
	Extra            map[string]any `json:"extra,omitempty"`
}

// FinalMetrics is ATIF's FinalMetricsSchema.
type FinalMetrics struct {
	TotalPromptTokens     int64          `json:"total_prompt_tokens,omitempty"`
	TotalCompletionTokens int64          `json:"total_completion_tokens,omitempty"`
	TotalCachedTokens     int64          `json:"total_cached_tokens,omitempty"`
	TotalSteps            int            `json:"total_steps,omitempty"`
	Extra                 map[string]any `json:"extra,omitempty"`
}

// Call returns the tool call with id of step s, or nil.
func (s *Step) Call(id string) *ToolCall {
	for i := range s.ToolCalls {
		if s.ToolCalls[i].ToolCallID == id {
			return &s.ToolCalls[i]
		}
	}
	return nil
}

// AddResult records content as the result of call id on step s.
// At most MaxHeldCalls results are held.
func (s *Step) AddResult(id, content string) {
	if s.Observation == nil {
		s.Observation = &Observation{}
	}
	if len(s.Observation.Results) >= MaxHeldCalls {
		s.overflow = true
		return
	}
	s.Observation.Results = append(s.Observation.Results, Result{SourceCallID: id, Content: content})
}

// Marshal is the trajectory's JSON: two-space indented (it is read by
// people too), no HTML escaping, a final newline.
func (t *Trajectory) Marshal() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(t); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Parse reads a trajectory and validates it.
func Parse(b []byte) (*Trajectory, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var t Trajectory
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("not an ATIF trajectory: %w", err)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

// Validate checks t against ATIF's rules.
func (t *Trajectory) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if t.SchemaVersion != SchemaVersion {
		bad("schema_version %q, want %q", t.SchemaVersion, SchemaVersion)
	}
	if t.SessionID == "" {
		bad("session_id is empty")
	}
	if t.Agent.Name == "" || t.Agent.Version == "" {
		bad("agent name and version are required")
	}
	if t.Steps == nil {
		bad("steps is required")
	}
	for i := range t.Steps {
		s := &t.Steps[i]
		at := fmt.Sprintf("steps[%d]", i)
		if s.StepID != i+1 {
			bad("%s: step_id %d, want %d (sequential from 1)", at, s.StepID, i+1)
		}
		switch s.Source {
		case SourceSystem, SourceUser, SourceAgent:
		default:
			bad("%s: source %q is not system, user or agent", at, s.Source)
		}
		if s.Source != SourceAgent && (s.ModelName != "" || s.ReasoningContent != "" || len(s.ToolCalls) > 0 || s.Metrics != nil) {
			bad("%s: a %s step has agent-only fields", at, s.Source)
		}
		if s.Timestamp != "" {
			if _, err := time.Parse(time.RFC3339Nano, s.Timestamp); err != nil {
				bad("%s: timestamp %q is not ISO 8601", at, s.Timestamp)
			}
		}
		ids := map[string]bool{}
		for j, c := range s.ToolCalls {
			if c.ToolCallID == "" || c.FunctionName == "" {
				bad("%s.tool_calls[%d]: tool_call_id and function_name are required", at, j)
			}
			var obj map[string]any
			if json.Unmarshal(c.Arguments, &obj) != nil || obj == nil {
				bad("%s.tool_calls[%d]: arguments are not a JSON object", at, j)
			}
			ids[c.ToolCallID] = true
		}
		if s.Observation != nil {
			if s.Observation.Results == nil {
				bad("%s: observation without results", at)
			}
			for j, r := range s.Observation.Results {
				if r.SourceCallID != "" && !ids[r.SourceCallID] {
					bad("%s.observation.results[%d]: source_call_id %q names no tool call of its step", at, j, r.SourceCallID)
				}
			}
		}
		for _, str := range []string{s.Message, s.ReasoningContent} {
			if !utf8.ValidString(str) {
				bad("%s: text is not valid UTF-8", at)
			}
		}
	}
	return errors.Join(errs...)
}
