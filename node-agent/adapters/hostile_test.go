package adapters

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/harnessfacts/harnessfacts/node-agent/trajectory"
)

// readAll runs every reader of the log an adapter has, as the node-agent
// does at the end of a run, and the sealing of the trajectory.
func readAll(a any, log []byte) *trajectory.Trajectory {
	if r, ok := a.(ActivityReader); ok {
		r.Activity(log)
	}
	if r, ok := a.(UsageReader); ok {
		r.Usage(log)
	}
	r, ok := a.(TrajectoryReader)
	if !ok {
		return nil
	}
	t := r.Trajectory(log, TrajectoryInput{Prompt: "p", SessionID: "s"})
	if t != nil {
		_, _, _ = trajectory.Seal(t, func(b []byte) []byte { return b }, 0)
	}
	return t
}

// allocated is what f allocates, in bytes.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// An agent prints one line of the 8 MiB its output holds by default: an
// event whose arrays hold millions of tiny values. Decoded, each became a
// struct or an interface many times its two bytes, and reading the log
// took the node-agent over a GiB (past its pod's bound). Such a line is
// left out, as a line that is not JSON is, and the reading stays small.
func TestLogLineOfTinyValuesStaysSmall(t *testing.T) {
	zeros := strings.TrimSuffix(strings.Repeat("0,", 4<<20-64), ",")
	for _, c := range []struct {
		name    string
		adapter any
		line    string
	}{
		{"claude content", NewClaudeCode(Config{}), `{"type":"assistant","message":{"id":"m","content":[` + zeros + `]}}`},
		{"claude result", NewClaudeCode(Config{}), `{"type":"result","permission_denials":[` + zeros + `]}`},
		{"claude tool result", NewClaudeCode(Config{}), `{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"x","content":[` + zeros + `]}]}}`},
		{"codex", NewCodex(Config{}), `{"type":"item.completed","item":{"type":"file_change","changes":[` + zeros + `]}}`},
		{"gemini", NewGemini(Config{}), `{"type":"tool_use","tool_id":"t","tool_name":"n","parameters":{"a":[` + zeros + `]}}`},
		{"opencode", NewOpenCode(Config{}), `{"type":"tool_use","part":{"messageID":"m","callID":"c","tool":"t","state":{"input":{"a":[` + zeros + `]}}}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := []byte(c.line + "\n")
			if n := allocated(func() { readAll(c.adapter, log) }); n > 64<<20 {
				t.Errorf("reading a log of %d bytes allocated %d MiB", len(log), n>>20)
			}
		})
	}
}

// A line of the CLI that is long for its text, not for its count of
// values, is still read.
func TestLongTextLineIsRead(t *testing.T) {
	text := strings.Repeat("a,[{", 1<<20)
	log := []byte(`{"type":"assistant","message":{"id":"m","content":[{"type":"text","text":"` + text + `"}]}}` + "\n")
	tr := readAll(NewClaudeCode(Config{}), log)
	if tr == nil || len(tr.Steps) != 2 || !strings.HasPrefix(tr.Steps[1].Message, "a,[{") {
		t.Fatalf("the long text line was not read: %+v", tr)
	}
	if !eventLine(bytes.TrimSpace(log)) {
		t.Fatal("a line of one long text is refused")
	}
}
