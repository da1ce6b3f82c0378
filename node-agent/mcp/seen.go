package mcp

import "bytes"

// TokenWatcher is an io.Writer that remembers whether the token went through
// it, also when split across writes. Tee the agent's raw output into it.
// It keeps only len(token)-1 bytes between writes. Not safe for concurrent
// writes.
type TokenWatcher struct {
	token []byte
	tail  []byte
	seen  bool
}

// NewTokenWatcher watches for token.
func NewTokenWatcher(token string) *TokenWatcher { return &TokenWatcher{token: []byte(token)} }

// Write implements io.Writer; it never fails.
func (w *TokenWatcher) Write(p []byte) (int, error) {
	if w.seen || len(w.token) == 0 {
		return len(p), nil
	}
	keep := len(w.token) - 1
	// Look in the joint between the kept tail and p, then in p.
	head := p
	if len(head) > keep {
		head = head[:keep]
	}
	joint := append(append([]byte(nil), w.tail...), head...)
	if bytes.Contains(joint, w.token) || bytes.Contains(p, w.token) {
		w.seen = true
		w.tail = nil
		return len(p), nil
	}
	if len(p) >= keep {
		w.tail = append(w.tail[:0], p[len(p)-keep:]...)
	} else {
		w.tail = append(w.tail, p...)
		if len(w.tail) > keep {
			w.tail = w.tail[len(w.tail)-keep:]
		}
	}
	return len(p), nil
}

// Seen reports whether the token was written.
func (w *TokenWatcher) Seen() bool { return w.seen }
