package adapters

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/harnessfacts/harnessfacts/node-agent/trajectory"
)

// An agent prints its default 8 MiB of the shortest events that each make
// a step (half a million), or of deltas of one text. The node-agent held
// every step and rebuilt the text at each delta: hundreds of MiB and tens
// of seconds of a core for one run. It now holds the first steps and the
// last ones (Seal would keep no others) and a text up to a bound, and
// the sealed trajectory still says how many steps there were and which
// ones it kept.
func TestLogOfManyStepsStaysSmall(t *testing.T) {
	many := func(first, line, last string) []byte {
		var b strings.Builder
		b.WriteString(first + "\n")
		for b.Len() < 8<<20 {
			b.WriteString(line + "\n")
		}
		b.WriteString(last + "\n")
		return []byte(b.String())
	}
	for _, c := range []struct {
		name    string
		adapter TrajectoryReader
		log     []byte
		// first begins the message of the second step, last is the
		// message of the last one.
		first, last string
	}{
		{"gemini errors", NewGemini(Config{}), many(`{"type":"error","message":"first"}`, `{"type":"error"}`, `{"type":"error","message":"last"}`), "error: first", "error: last"},
		{"codex errors", NewCodex(Config{}), many(`{"type":"error","message":"first"}`, `{"type":"error"}`, `{"type":"error","message":"last"}`), "error: first", "error: last"},
		{"opencode errors", NewOpenCode(Config{}), many(`{"type":"error","error":"first"}`, `{"type":"error"}`, `{"type":"error","error":"last"}`), "error: first", "error: last"},
		{"claude replies", NewClaudeCode(Config{}), many(`{"type":"assistant","message":{"content":[{"type":"text","text":"first"}]}}`, `{"type":"assistant","message":{}}`, `{"type":"assistant","message":{"content":[{"type":"text","text":"last"}]}}`), "first", "last"},
		{"gemini deltas", NewGemini(Config{}), many(`{"type":"message","role":"assistant","content":"first"}`, `{"type":"message","role":"assistant","content":"`+strings.Repeat("x", 60)+`"}`, `{"type":"tool_use","tool_id":"t","tool_name":"last"}`), "first", ""},
		{"claude deltas", NewClaudeCode(Config{}), many(`{"type":"assistant","message":{"id":"m","content":[{"type":"text","text":"first"}]}}`, `{"type":"assistant","message":{"id":"m","content":[{"type":"text","text":"`+strings.Repeat("x", 60)+`"}]}}`, `{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"t","name":"last"}]}}`), "first", ""},
		{"claude calls", NewClaudeCode(Config{}), many(`{"type":"assistant","message":{"id":"m","content":[{"type":"text","text":"first"}]}}`, calls(`{"type":"assistant","message":{"id":"m","content":[%s]}}`, `{"type":"tool_use","id":"c%d","name":"n"}`, 4000), `{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"c1","content":"last"}]}}`), "first", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var (
				sealed []byte
				err    error
				held   uint64
			)
			n := allocated(func() {
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				tr := c.adapter.Trajectory(c.log, TrajectoryInput{Prompt: "p", SessionID: "s"})
				if tr == nil {
					t.Fatal("no trajectory")
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				held = after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc)
				sealed, _, err = trajectory.Seal(tr, func(b []byte) []byte { return b }, 0)
			})
			if err != nil {
				t.Fatal(err)
			}
			// Held: what the trajectory keeps of the log; allocated: what
			// reading and sealing it cost (texts rebuilt at each delta
			// allocated tens of GiB).
			if held > 32<<20 || n > 2<<30 {
				t.Errorf("reading a log of %d bytes held %d MiB and allocated %d MiB", len(c.log), held>>20, n>>20)
			}
			got, err := trajectory.Parse(sealed)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Steps) < 2 || !strings.HasPrefix(got.Steps[1].Message, c.first) {
				t.Fatalf("the second step is not the log's first: %d steps, notes %q", len(got.Steps), got.Notes)
			}
			if c.last != "" {
				end := got.Steps[len(got.Steps)-1]
				if end.Message != c.last {
					t.Errorf("the last step is not the log's last: %.100q", end.Message)
				}
				total := got.FinalMetrics.TotalSteps
				if id, _ := end.Extra["original_step_id"].(float64); int(id) != total || !strings.Contains(got.Notes, fmt.Sprintf("of %d steps kept", total)) {
					t.Errorf("the last step is number %v of %d (notes %q)", end.Extra["original_step_id"], total, got.Notes)
				}
			}
			var raw map[string]any
			if json.Unmarshal(sealed, &raw) != nil {
				t.Fatal("not JSON")
			}
		})
	}
}

// calls is format with n items made of item and their number.
func calls(format, item string, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(item, i)
	}
	return fmt.Sprintf(format, strings.Join(parts, ","))
}
