package gateway

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/harnessfacts/harnessfacts/node-agent/usage"
)

// An answer's stream read to its end after the agent's request ended: with
// its closing figures it was served whole (an agent that closes each
// answer as its last event comes must not keep the gateway from ever
// seeing one whole); without them it is the agent's cut.
func TestAnEndAfterTheAgentLeftIsWholeOnlyWithTheClosingFigures(t *testing.T) {
	const start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-m\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n"
	const end = "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n"
	for _, c := range []struct {
		name       string
		stream     string
		whole, cut bool
	}{
		{"with the closing figures", start + end, true, false},
		{"without them", start, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // the agent went away before the end was read
			var got struct {
				r          usage.Reply
				whole, cut bool
				calls      int
			}
			b := &countingBody{rc: io.NopCloser(strings.NewReader(c.stream)), p: usage.NewParser(usage.Anthropic, "text/event-stream", usage.NewBudget(1<<20)), ctx: ctx,
				done: func(r usage.Reply, whole, cut, _ bool) {
					got.r, got.whole, got.cut, got.calls = r, whole, cut, got.calls+1
				}}
			if _, err := io.ReadAll(b); err != nil {
				t.Fatal(err)
			}
			_ = b.Close()
			if got.calls != 1 || got.whole != c.whole || got.cut != c.cut {
				t.Errorf("reported %d times, whole %v cut %v; want once, whole %v cut %v", got.calls, got.whole, got.cut, c.whole, c.cut)
			}
		})
	}
}
