package executor

import (
	"io"
	"sync"

	"github.com/harnessfacts/harnessfacts/node-agent/mcp"
	"github.com/harnessfacts/harnessfacts/node-agent/redact"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// output is the agent's combined stdout and stderr on their way to storage:
// raw → token watcher (the token must be seen before anything could hide
// it) → redactor → bounded capture. Both streams go through one lock, so the
// log reads as a terminal would show it and a secret split between the two
// streams is still one secret to the redactor.
type output struct {
	mu      sync.Mutex
	watcher *mcp.TokenWatcher
	redact  io.WriteCloser
	capture *sandbox.Capture
	closed  bool
	raw     int64
}

func newOutput(red *redact.Redactor, token string, limit int64) *output {
	o := &output{capture: sandbox.NewCapture(int(limit))}
	if token != "" {
		o.watcher = mcp.NewTokenWatcher(token)
	}
	o.redact = red.NewWriter(o.capture)
	return o
}

// writer returns the io.Writer to give the sandbox for stdout or stderr.
func (o *output) writer() io.Writer { return lockedWriter{o} }

type lockedWriter struct{ o *output }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	if w.o.closed {
		return len(p), nil
	}
	w.o.raw += int64(len(p))
	if w.o.watcher != nil {
		_, _ = w.o.watcher.Write(p)
	}
	_, _ = w.o.redact.Write(p)
	// Output is never refused: a failing log must not kill the agent.
	return len(p), nil
}

// close flushes what the redactor holds back.
func (o *output) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		o.closed = true
		_ = o.redact.Close()
	}
}

func (o *output) tokenSeen() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.watcher != nil && o.watcher.Seen()
}

// rawBytes counts what the agent wrote, before redaction and bounding.
func (o *output) rawBytes() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.raw
}

// bytes is the redacted, bounded log.
func (o *output) bytes() []byte { return o.capture.Bytes() }

// tail is the end of the redacted log, at most n bytes.
func (o *output) tail(n int) []byte {
	b := o.capture.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return b
}
