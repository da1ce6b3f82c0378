package trajectory

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func sample(n int, text string) *Trajectory {
	t := &Trajectory{SchemaVersion: SchemaVersion, SessionID: "s", Agent: Agent{Name: "a", Version: "1"},
		Steps: []Step{{Source: SourceUser, Message: "do it"}}}
	for i := 0; i < n; i++ {
		s := Step{Source: SourceAgent, Message: text, ToolCalls: []ToolCall{{ToolCallID: "c", FunctionName: "f", Arguments: json.RawMessage(`{"x":"` + text + `"}`)}}}
		s.AddResult("c", text)
		t.Steps = append(t.Steps, s)
	}
	for i := range t.Steps {
		t.Steps[i].StepID = i + 1
	}
	return t
}

func TestValidateNamesEachBrokenRule(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*Trajectory)
		want   string
	}{
		"version":      {func(t *Trajectory) { t.SchemaVersion = "ATIF-v9" }, "schema_version"},
		"step ids":     {func(t *Trajectory) { t.Steps[1].StepID = 7 }, "sequential"},
		"source":       {func(t *Trajectory) { t.Steps[0].Source = "tool" }, "is not system, user or agent"},
		"agent fields": {func(t *Trajectory) { t.Steps[0].ModelName = "m" }, "agent-only fields"},
		"dangling":     {func(t *Trajectory) { t.Steps[1].Observation.Results[0].SourceCallID = "zz" }, "names no tool call"},
		"arguments":    {func(t *Trajectory) { t.Steps[1].ToolCalls[0].Arguments = json.RawMessage(`"s"`) }, "not a JSON object"},
		"timestamp":    {func(t *Trajectory) { t.Steps[0].Timestamp = "yesterday" }, "ISO 8601"},
	} {
		t.Run(name, func(t *testing.T) {
			tr := sample(1, "x")
			if err := tr.Validate(); err != nil {
				t.Fatalf("sample: %v", err)
			}
			tc.mutate(tr)
			if err := tr.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestSealBoundsAndRedacts: a trajectory far over the bound is cut to it —
// texts first, then middle steps, both said in notes — stays valid ATIF,
// and holds no trace of what the redactor hides.
func TestSealBoundsAndRedacts(t *testing.T) {
	secret := "sk-planted-secret-0b1c"
	tr := sample(400, strings.Repeat("y", 4000)+secret)
	red := func(b []byte) []byte { return []byte(strings.ReplaceAll(string(b), secret, "[REDACTED]")) }
	data, steps, err := Seal(tr, red, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 64<<10 || strings.Contains(string(data), secret) {
		t.Fatalf("%d bytes, secret kept: %v", len(data), strings.Contains(string(data), secret))
	}
	back, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if steps != len(back.Steps) || steps >= 401 || back.FinalMetrics == nil || back.FinalMetrics.TotalSteps != 401 ||
		!strings.Contains(back.Notes, "steps kept") || !strings.Contains(back.Notes, "are cut") {
		t.Errorf("%d steps, final metrics %+v, notes %q", steps, back.FinalMetrics, back.Notes)
	}
	if back.Steps[0].Message != "do it" || back.Steps[len(back.Steps)-1].Extra["original_step_id"] != float64(401) {
		t.Errorf("first %+v, last extra %v", back.Steps[0], back.Steps[len(back.Steps)-1].Extra)
	}
	// A secret JSON-escaped in the arguments is whole once decoded, and
	// redacted then.
	tr = sample(1, "x")
	tr.Steps[1].ToolCalls[0].Arguments = json.RawMessage(`{"k":"sk-planted-\u0073ecret-0b1c"}`)
	data, _, err = Seal(tr, red, 0)
	if err != nil || strings.Contains(string(data), secret) || strings.Contains(string(data), `\u0073ecret`) {
		t.Errorf("escaped secret: %v\n%s", err, data)
	}
}

// One reply of a thousand tool calls with long ids, arguments and results
// (an agent may make them) still leaves the run a trajectory: of that
// step only the first calls and their results are kept, ids cut as texts
// are, and the notes say so. It did not fit, and the run had none.
func TestSealKeepsAStepOfManyCalls(t *testing.T) {
	tr := sample(0, "")
	s := Step{Source: SourceAgent, Message: "many"}
	long := strings.Repeat("i", 1<<10)
	for i := range MaxHeldCalls {
		id := fmt.Sprintf("%s-%04d", long, i)
		s.ToolCalls = append(s.ToolCalls, ToolCall{ToolCallID: id, FunctionName: long, Arguments: json.RawMessage(`{"a":"` + long + `"}`)})
	}
	for i := MaxHeldCalls - 1; i >= 0; i-- { // results in another order than their calls
		s.AddResult(fmt.Sprintf("%s-%04d", long, i), long)
	}
	tr.Steps = append(tr.Steps, s)
	for i := range tr.Steps {
		tr.Steps[i].StepID = i + 1
	}
	data, steps, err := Seal(tr, func(b []byte) []byte { return b }, 0)
	if err != nil {
		t.Fatalf("a step of %d calls left no trajectory: %v", MaxHeldCalls, err)
	}
	back, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	last := back.Steps[len(back.Steps)-1]
	if steps != 2 || len(last.ToolCalls) == 0 || len(last.ToolCalls) >= MaxHeldCalls || !strings.Contains(back.Notes, "tool calls and results only the first") {
		t.Errorf("%d steps, %d calls kept, notes %q", steps, len(last.ToolCalls), back.Notes)
	}
}
