package mcp

import (
	"bytes"
	"strings"
)

// TokenWatcher is an io.Writer that remembers whether the token went through
// it, also when split across writes. Tee the agent's raw output into it.
// It keeps only len(token)-1 bytes between writes. Not safe for concurrent
// writes.
type TokenWatcher struct {
	token []byte
	// rare is the index in token of its byte least likely to be common in
	// an agent's output: where the search looks first (see index).
	rare  int
	tail  []byte
	joint []byte
	seen  bool
}

// NewTokenWatcher watches for token.
func NewTokenWatcher(token string) *TokenWatcher {
	w := &TokenWatcher{token: []byte(token)}
	best := len(byRarity)
	for i := 0; i < len(token); i++ {
		if r := strings.IndexByte(byRarity, token[i]); r >= 0 && r < best {
			best, w.rare = r, i
		}
	}
	return w
}

// byRarity orders the bytes a token is made of (the base64url alphabet and
// "hft_") from the least to the most common in ordinary text and JSON,
// roughly: upper case letters before lower case, each in the reverse order
// of English letter frequency, then digits and punctuation.
const byRarity = "ZQXJKVBPYGFWMUCLDRHSNIOATEzqxjkvbpygfwmucldrhsnioate9876543210-_"

// Write implements io.Writer; it never fails.
func (w *TokenWatcher) Write(p []byte) (int, error) {
	if w.seen || len(w.token) == 0 {
		return len(p), nil
	}
	keep := len(w.token) - 1
	// Look in the joint between the kept tail and p, then in p.
	if len(w.tail) > 0 {
		w.joint = append(append(w.joint[:0], w.tail...), p[:min(len(p), keep)]...)
		if bytes.Contains(w.joint, w.token) {
			w.seen, w.tail = true, nil
			return len(p), nil
		}
	}
	if w.index(p) >= 0 {
		w.seen, w.tail = true, nil
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

// index is bytes.Index(p, w.token). It looks for the token's rarest byte
// with bytes.IndexByte, whose vector loop skips whole blocks where that
// byte is absent, and compares the token where one is found: bytes.Index
// stops at each occurrence of the token's first byte ('h', common in
// text). Where the rare byte turns out common in p, it hands the rest to
// bytes.Index, as bytes.Index itself does with its first byte.
func (w *TokenWatcher) index(p []byte) int {
	n, r := len(w.token), w.rare
	c := w.token[r]
	fails := 0
	for i := r; i+n-r <= len(p); {
		j := bytes.IndexByte(p[i:len(p)-(n-r-1)], c)
		if j < 0 {
			return -1
		}
		s := i + j - r // the token would start here
		if bytes.Equal(p[s:s+n], w.token) {
			return s
		}
		i += j + 1
		if fails++; fails > 4+i>>6 {
			if k := bytes.Index(p[i-r:], w.token); k >= 0 {
				return i - r + k
			}
			return -1
		}
	}
	return -1
}

// Seen reports whether the token was written.
func (w *TokenWatcher) Seen() bool { return w.seen }
