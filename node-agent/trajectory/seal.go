package trajectory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxBytes bounds a stored trajectory: the evidence must fit a ConfigMap
// beside the output log and the artifacts.
const MaxBytes = 256 << 10

// maxText is how much of one text (a message, a tool's arguments or
// result) is kept at first; Seal lowers it until the whole fits.
const (
	maxText = 16 << 10
	minText = 256
)

// Seal redacts every text of t with redact (the run's redactor, the one
// output.log went through), bounds it to maxBytes (MaxBytes when 0) — long
// texts are cut first, then steps in the middle are left out, each said in
// notes — and returns its JSON, validated. The JSON is redacted once more
// as a whole (a secret could be formed across fields); redact must return
// its input when there is nothing to hide. steps is how many steps it
// holds.
func Seal(t *Trajectory, redact func([]byte) []byte, maxBytes int) (out []byte, steps int, err error) {
	if maxBytes <= 0 {
		maxBytes = MaxBytes
	}
	t.SchemaVersion = SchemaVersion
	redactAll(t, func(s string) string { return string(redact([]byte(s))) })
	total, keep := len(t.Steps), len(t.Steps)
	if o := t.held.omitted; o > 0 {
		// Add numbered the steps by their places and left out the middle:
		// the first and last halves kept are taken of what it held.
		total += o
		keep = 2 * min(t.held.gap, len(t.Steps)-t.held.gap)
	} else {
		for i := range t.Steps {
			t.Steps[i].StepID = i + 1
		}
	}
	var notes []string
	if t.Notes != "" {
		notes = append(notes, t.Notes)
	}
	for i := range t.Steps {
		if t.Steps[i].overflow {
			notes = append(notes, fmt.Sprintf("some texts were held only to %d bytes, and some steps' tool calls or results only to %d, while the log was read", MaxHeldText, MaxHeldCalls))
			break
		}
	}
	for limit, calls := maxText, MaxHeldCalls; ; {
		c := cut(t, limit, keep, total, calls)
		n := append([]string(nil), notes...)
		if limit < maxText {
			n = append(n, fmt.Sprintf("texts, ids and names longer than %d bytes are cut (marked where)", limit))
		}
		if calls < MaxHeldCalls {
			n = append(n, fmt.Sprintf("of each step's tool calls and results only the first %d are kept", calls))
		}
		if keep < total {
			n = append(n, fmt.Sprintf("%d of %d steps kept: the first %d and the last %d (step_id renumbered; extra.original_step_id is the step's place in the run)", keep, total, (keep+1)/2, keep/2))
			if c.FinalMetrics == nil {
				c.FinalMetrics = &FinalMetrics{}
			}
			c.FinalMetrics.TotalSteps = total
		}
		c.Notes = strings.Join(n, "; ")
		b, err := c.Marshal()
		if err != nil {
			return nil, 0, err
		}
		if len(b) <= maxBytes {
			out, steps = b, len(c.Steps)
			break
		}
		switch {
		case limit > minText:
			limit /= 2
		case keep > 2:
			keep = keep * 3 / 4
		case calls > 1:
			// A step of many tool calls alone (an agent may make a
			// thousand in one reply) would leave the run with no
			// trajectory at all.
			calls /= 2
		default:
			return nil, 0, fmt.Errorf("the trajectory does not fit %d bytes", maxBytes)
		}
	}
	red := redact(out)
	if !bytes.Equal(red, out) {
		// Something formed across fields was hidden: what is stored is the
		// redacted text, and it must still be a trajectory.
		out = red
	}
	if _, err := Parse(out); err != nil {
		return nil, 0, fmt.Errorf("the sealed trajectory does not validate: %w", err)
	}
	return out, steps, nil
}

// cut is a copy of t whose texts, ids and names are at most limit bytes,
// keeping keep of its steps (the first half and the last half) and of each
// step's tool calls and results the first calls; total is how many steps
// the run had (more than t holds when Add left some out). An id is cut as
// every other is, so a call and its result still name the same.
func cut(t *Trajectory, limit, keep, total, calls int) *Trajectory {
	c := *t
	steps := t.Steps
	if keep < len(steps) {
		head, tail := (keep+1)/2, keep/2
		steps = append(append([]Step(nil), steps[:head]...), steps[len(steps)-tail:]...)
	}
	c.Steps = make([]Step, len(steps))
	for i, s := range steps {
		orig := s.StepID
		s.StepID = i + 1
		if keep < total {
			s.Extra = withKey(s.Extra, "original_step_id", orig)
		}
		s.Message = clip(s.Message, limit)
		s.ReasoningContent = clip(s.ReasoningContent, limit)
		ids := map[string]bool{}
		if len(s.ToolCalls) > 0 {
			kept := make([]ToolCall, min(len(s.ToolCalls), calls))
			for j, tc := range s.ToolCalls[:len(kept)] {
				if len(tc.Arguments) > limit {
					tc.Arguments, _ = json.Marshal(map[string]string{"_cut": clip(string(tc.Arguments), limit)})
				}
				tc.ToolCallID, tc.FunctionName = clip(tc.ToolCallID, limit), clip(tc.FunctionName, limit)
				ids[tc.ToolCallID] = true
				kept[j] = tc
			}
			s.ToolCalls = kept
		}
		if s.Observation != nil {
			o := Observation{Results: make([]Result, 0, min(len(s.Observation.Results), calls))}
			for _, r := range s.Observation.Results {
				if len(o.Results) == calls {
					break
				}
				r.SourceCallID = clip(r.SourceCallID, limit)
				if r.SourceCallID != "" && !ids[r.SourceCallID] {
					continue // the result of a call left out
				}
				r.Content = clip(r.Content, limit)
				o.Results = append(o.Results, r)
			}
			s.Observation = &o
		}
		c.Steps[i] = s
	}
	return &c
}

func withKey(m map[string]any, k string, v any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for a, b := range m {
		out[a] = b
	}
	out[k] = v
	return out
}

// clip keeps the head of s within n bytes (valid UTF-8), marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	marker := fmt.Sprintf(" [... %d bytes cut ...]", len(s)-n)
	h := s[:n]
	for len(h) > 0 && !utf8.ValidString(h) {
		h = h[:len(h)-1]
	}
	return h + marker
}

// redactAll runs r over every text of t: ids, names, messages, arguments,
// results and the values of extra objects.
func redactAll(t *Trajectory, r func(string) string) {
	t.SessionID = r(t.SessionID)
	t.Notes = r(t.Notes)
	t.Agent.Name, t.Agent.Version, t.Agent.ModelName = r(t.Agent.Name), r(t.Agent.Version), r(t.Agent.ModelName)
	t.Agent.Extra = redactMap(t.Agent.Extra, r)
	t.Extra = redactMap(t.Extra, r)
	if t.FinalMetrics != nil {
		t.FinalMetrics.Extra = redactMap(t.FinalMetrics.Extra, r)
	}
	for i := range t.Steps {
		s := &t.Steps[i]
		s.Message, s.ReasoningContent, s.ModelName, s.Timestamp = r(s.Message), r(s.ReasoningContent), r(s.ModelName), r(s.Timestamp)
		s.Extra = redactMap(s.Extra, r)
		for j := range s.ToolCalls {
			tc := &s.ToolCalls[j]
			tc.ToolCallID, tc.FunctionName = r(tc.ToolCallID), r(tc.FunctionName)
			tc.Arguments = redactJSON(tc.Arguments, r)
		}
		if s.Observation != nil {
			for j := range s.Observation.Results {
				res := &s.Observation.Results[j]
				res.SourceCallID, res.Content = r(res.SourceCallID), r(res.Content)
			}
		}
		if s.Metrics != nil {
			s.Metrics.Extra = redactMap(s.Metrics.Extra, r)
		}
	}
}

// redactJSON redacts the strings (keys and values) of a JSON object; what
// is not an object becomes {} with the redacted text under "_text".
func redactJSON(raw json.RawMessage, r func(string) string) json.RawMessage {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		v = map[string]any{"_text": string(raw)}
	}
	if _, ok := v.(map[string]any); !ok {
		v = map[string]any{"_value": v}
	}
	v = redactValue(v, r)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return json.RawMessage(`{}`)
	}
	return json.RawMessage(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

func redactMap(m map[string]any, r func(string) string) map[string]any {
	if m == nil {
		return nil
	}
	v, _ := redactValue(m, r).(map[string]any)
	return v
}

func redactValue(v any, r func(string) string) any {
	switch x := v.(type) {
	case string:
		return r(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[r(k)] = redactValue(e, r)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = redactValue(e, r)
		}
		return out
	default:
		return v
	}
}
