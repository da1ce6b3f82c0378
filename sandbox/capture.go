package sandbox

import (
	"fmt"
	"sync"
)

// Capture is an io.Writer that keeps the first and the last bytes written to
// it and counts the rest. Its memory is fixed at creation whatever is written
// (a gigabyte without a newline costs nothing more), and Write never fails, so
// a noisy command is never blocked or killed by its output.
//
// The node-agent composes it behind its redacting writer:
//
//	capture := sandbox.NewCapture(maxOutputBytes)
//	spec.Stdout = redact.NewWriter(capture, secrets) // redacts, then bounds
//	spec.Stderr = spec.Stdout
//	res, err := runner.Run(ctx, spec)
//	tail, dropped := capture.Bytes(), capture.Dropped()
//
// Redaction must come first: the kept head and tail are what gets stored, and
// a secret split by the cut would otherwise survive in part. Any io.Writer
// chain works; the Runner only streams raw output into Spec.Stdout/Stderr.
// Capture is safe for concurrent use.
type Capture struct {
	mu      sync.Mutex
	head    []byte // first headCap bytes, grows up to headCap
	headCap int
	tail    []byte // ring of the last len(tail) bytes once head is full
	tailPos int    // next write position in tail
	tailLen int    // valid bytes in tail
	total   int64
}

// NewCapture returns a Capture keeping at most limit bytes: the first
// limit/2 and the last limit-limit/2. limit <= 0 keeps nothing and only
// counts.
func NewCapture(limit int) *Capture {
	limit = max(limit, 0)
	h := limit / 2
	return &Capture{head: make([]byte, 0, h), headCap: h, tail: make([]byte, limit-h)}
}

// Write records p. It always returns len(p), nil.
func (c *Capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	c.total += int64(n)
	if room := c.headCap - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(c.tail) == 0 || len(p) == 0 {
		return n, nil
	}
	if len(p) >= len(c.tail) {
		copy(c.tail, p[len(p)-len(c.tail):])
		c.tailPos, c.tailLen = 0, len(c.tail)
		return n, nil
	}
	k := copy(c.tail[c.tailPos:], p)
	copy(c.tail, p[k:])
	c.tailPos = (c.tailPos + len(p)) % len(c.tail)
	c.tailLen = min(c.tailLen+len(p), len(c.tail))
	return n, nil
}

// Total is the number of bytes written.
func (c *Capture) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Dropped is the number of bytes written but not kept.
func (c *Capture) Dropped() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total - int64(len(c.head)) - int64(c.tailLen)
}

// Truncated reports whether any byte was dropped.
func (c *Capture) Truncated() bool { return c.Dropped() > 0 }

// Head returns a copy of the first bytes kept.
func (c *Capture) Head() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.head...)
}

// Tail returns a copy of the last bytes kept after the head.
func (c *Capture) Tail() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tailLocked()
}

func (c *Capture) tailLocked() []byte {
	out := make([]byte, 0, c.tailLen)
	start := (c.tailPos - c.tailLen + len(c.tail)) % max(len(c.tail), 1)
	if start+c.tailLen <= len(c.tail) {
		return append(out, c.tail[start:start+c.tailLen]...)
	}
	out = append(out, c.tail[start:]...)
	return append(out, c.tail[:c.tailLen-(len(c.tail)-start)]...)
}

// Bytes returns head and tail joined by a marker naming the number of dropped
// bytes, or exactly what was written when nothing was dropped.
func (c *Capture) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := append([]byte(nil), c.head...)
	dropped := c.total - int64(len(c.head)) - int64(c.tailLen)
	if dropped > 0 {
		out = append(out, fmt.Sprintf("\n[… %d bytes dropped …]\n", dropped)...)
	}
	return append(out, c.tailLocked()...)
}
