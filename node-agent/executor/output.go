package executor

import (
	"io"
	"sync"
	"time"

	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
	"github.com/harnessfacts/harnessfacts/node-agent/mcp"
	"github.com/harnessfacts/harnessfacts/node-agent/redact"
	"github.com/harnessfacts/harnessfacts/node-agent/spool"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// maxActivityLog bounds what an adapter's Activity reads of a spooled log:
// all of it up to this, else its head and tail halves.
const maxActivityLog = 16 << 20

// output is the agent's combined stdout and stderr on their way to storage:
// raw → token watcher (the token must be seen before anything could hide
// it) → redactor → bounded capture. Both streams go through one lock, so the
// log reads as a terminal would show it and a secret split between the two
// streams is still one secret to the redactor. The agent's log is kept in
// a spool (a file), a check's few KiB in memory: the node-agent's memory
// does not follow limits.maxOutputBytes.
type output struct {
	mu      sync.Mutex
	watcher *mcp.TokenWatcher
	redact  *redact.Writer
	capture *sandbox.Capture // a check's
	spool   *spool.Spool     // the agent's
	closed  bool
	raw     int64
	// pace holds the run's redaction to a share of a core (shared by the
	// agent's and its checks' outputs; nil: unbounded).
	pace *pace

	// live says the redactor also feeds a live view (startLive).
	live     bool
	liveHeld bool // the redactor holds bytes the live view has not had
	liveNL   bool // the last write ended a line
	liveStop chan struct{}
	liveDone chan struct{}
}

// livePeriod is how often the live view passes on finished lines the
// redactor holds.
const livePeriod = 250 * time.Millisecond

// newOutput keeps up to limit bytes in memory: for a check's output.
func newOutput(red *redact.Redactor, token string, limit int64) *output {
	o := &output{capture: sandbox.NewCapture(int(limit))}
	if token != "" {
		o.watcher = mcp.NewTokenWatcher(token)
	}
	o.redact = red.NewWriter(o.capture)
	return o
}

// newSpooledOutput keeps up to limit bytes in an unlinked file in dir (the
// run root: on the node's disk, outside the run dir's size-limited file
// system, and never seen by the agent): for the agent's output.
func newSpooledOutput(red *redact.Redactor, token string, limit int64, dir string) (*output, error) {
	sp, err := spool.New(dir, limit)
	if err != nil {
		return nil, err
	}
	o := &output{spool: sp}
	if token != "" {
		o.watcher = mcp.NewTokenWatcher(token)
	}
	o.redact = red.NewWriter(sp)
	return o, nil
}

// startLive also sends the redacted output to live, from the same
// redacting writer (redact.Writer.Tee: the output is searched once). A
// redacting writer holds back its last Window() bytes (8 KiB with the
// token rules) until more comes or the stream ends, so that a secret split
// across writes is still seen whole: that is what output.log gets. The
// live view would then show a quiet agent's last lines only at its end;
// so, when the agent's last write ended a line, the held bytes are passed
// to the live view alone (every livePeriod) with FlushLive, which still
// holds a tail that could be the start of one of the run's secrets: a
// multi-line one (a PEM key) printed line by line shows only when whole,
// and redacted. output.log never flushes early. Call it before the first
// write.
func (o *output) startLive(live io.Writer) {
	o.redact.Tee(live)
	o.live = true
	o.liveStop, o.liveDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(o.liveDone)
		t := time.NewTicker(livePeriod)
		defer t.Stop()
		for {
			select {
			case <-o.liveStop:
				return
			case <-t.C:
				o.mu.Lock()
				if o.liveHeld && o.liveNL && !o.closed {
					_ = o.redact.FlushLive()
					o.liveHeld = false
				}
				o.mu.Unlock()
			}
		}
	}()
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
	start := time.Now()
	_, _ = w.o.redact.Write(p)
	if w.o.live && len(p) > 0 {
		w.o.liveHeld, w.o.liveNL = true, p[len(p)-1] == '\n'
	}
	if w.o.pace != nil {
		// Held under the lock: both streams wait, the agent blocks on
		// its pipes.
		if wait := w.o.pace.spend(time.Since(start)); wait > 0 {
			time.Sleep(wait)
		}
	}
	// Output is never refused: a failing log must not kill the agent.
	return len(p), nil
}

// close flushes what the redactors hold back.
func (o *output) close() {
	if o.liveStop != nil {
		close(o.liveStop)
		<-o.liveDone
		o.liveStop = nil
	}
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

// truncated reports whether output beyond the limit was dropped.
func (o *output) truncated() bool {
	if o.spool != nil {
		return o.spool.Truncated()
	}
	return o.capture.Truncated()
}

// log is the redacted, bounded log for the evidence.
func (o *output) log() evidence.Log {
	if o.spool != nil {
		return o.spool
	}
	return evidence.BytesLog(o.capture.Bytes())
}

// activityLog is what an adapter's Activity reads: the whole log up to
// maxActivityLog, else its head and tail.
func (o *output) activityLog() []byte {
	if o.spool == nil {
		return o.capture.Bytes()
	}
	if o.spool.Size() <= maxActivityLog {
		b, _ := o.spool.Head(maxActivityLog)
		return b
	}
	head, _ := o.spool.Head(maxActivityLog / 2)
	tail, _ := o.spool.Tail(maxActivityLog / 2)
	return append(append(append([]byte(nil), head...), '\n'), tail...)
}

// tail is the end of the redacted log, at most n bytes.
func (o *output) tail(n int) []byte {
	if o.spool != nil {
		b, _ := o.spool.Tail(n)
		return b
	}
	b := o.capture.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return b
}

// release closes the agent's spool.
func (o *output) release() {
	if o.spool != nil {
		_ = o.spool.Close()
	}
}
