// Package spool keeps the first and last bytes of a stream (an agent's
// redacted output) in a file rather than in memory, so that the
// node-agent's memory does not follow the run's limits.maxOutputBytes (up
// to 1 GiB) whatever the agent prints. The file is unlinked at creation:
// nothing but the open descriptor reaches it, and it goes away with the
// process even if the node-agent dies.
package spool

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// Spool is an io.Writer that keeps the first Limit/2 and the last
// Limit-Limit/2 bytes written to it, in an unlinked file, and counts the
// rest. Write never fails (a failing log must not stop an agent); the
// first file error is kept and returned by Err. Safe for concurrent use.
type Spool struct {
	mu      sync.Mutex
	f       *os.File
	headCap int64
	tailCap int64
	headLen int64
	tailPos int64 // next write position in the tail ring
	tailLen int64 // valid bytes in the tail ring
	total   int64
	err     error
}

// New makes a Spool keeping at most limit bytes in a file created in dir
// (which must not be readable by the agent) and unlinked at once.
func New(dir string, limit int64) (*Spool, error) {
	f, err := os.CreateTemp(dir, ".output-*")
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("spool: %w", err)
	}
	limit = max(limit, 0)
	return &Spool{f: f, headCap: limit / 2, tailCap: limit - limit/2}, nil
}

// Write records p; it always returns len(p), nil.
func (s *Spool) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	s.total += int64(n)
	if room := s.headCap - s.headLen; room > 0 {
		k := min(room, int64(len(p)))
		s.writeAt(p[:k], s.headLen)
		s.headLen += k
		p = p[k:]
	}
	if s.tailCap == 0 || len(p) == 0 {
		return n, nil
	}
	if int64(len(p)) >= s.tailCap {
		s.writeAt(p[int64(len(p))-s.tailCap:], s.headCap)
		s.tailPos, s.tailLen = 0, s.tailCap
		return n, nil
	}
	first := min(int64(len(p)), s.tailCap-s.tailPos)
	s.writeAt(p[:first], s.headCap+s.tailPos)
	s.writeAt(p[first:], s.headCap)
	s.tailPos = (s.tailPos + int64(len(p))) % s.tailCap
	s.tailLen = min(s.tailLen+int64(len(p)), s.tailCap)
	return n, nil
}

func (s *Spool) writeAt(p []byte, off int64) {
	if len(p) == 0 || s.err != nil {
		return
	}
	if _, err := s.f.WriteAt(p, off); err != nil {
		s.err = fmt.Errorf("spool: %w", err)
	}
}

// Total is the number of bytes written.
func (s *Spool) Total() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Size is the length of what Reader yields: the kept bytes and, when bytes
// were dropped, the marker between head and tail.
func (s *Spool) Size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.headLen + int64(len(s.markerLocked())) + s.tailLen
}

// markerLocked is what stands between head and tail when bytes were
// dropped: the same words as sandbox.Capture's.
func (s *Spool) markerLocked() string {
	if dropped := s.total - s.headLen - s.tailLen; dropped > 0 {
		return fmt.Sprintf("\n[… %d bytes dropped …]\n", dropped)
	}
	return ""
}

// Truncated reports whether bytes were dropped.
func (s *Spool) Truncated() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total > s.headLen+s.tailLen
}

// Err is the first error of the file, if any.
func (s *Spool) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Reader returns the kept bytes in order (head, a marker naming the
// dropped bytes if any, then the tail ring from its oldest byte), read from
// the file as they are consumed: what sandbox.Capture.Bytes would return.
func (s *Spool) Reader() io.Reader {
	s.mu.Lock()
	defer s.mu.Unlock()
	parts := []io.Reader{io.NewSectionReader(s.f, 0, s.headLen), strings.NewReader(s.markerLocked())}
	if s.tailLen < s.tailCap {
		parts = append(parts, io.NewSectionReader(s.f, s.headCap, s.tailLen))
	} else {
		parts = append(parts,
			io.NewSectionReader(s.f, s.headCap+s.tailPos, s.tailCap-s.tailPos),
			io.NewSectionReader(s.f, s.headCap, s.tailPos))
	}
	return io.MultiReader(parts...)
}

// Digest is "sha256:<hex>" of the kept bytes, streamed from the file.
func (s *Spool) Digest() (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, s.Reader()); err != nil {
		return "", fmt.Errorf("spool: %w", err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// Head returns the first n kept bytes (fewer when fewer are kept).
func (s *Spool) Head(n int) ([]byte, error) {
	return readN(s.Reader(), int64(n))
}

// Tail returns the last n kept bytes (fewer when fewer are kept).
func (s *Spool) Tail(n int) ([]byte, error) {
	size := s.Size()
	r := s.Reader()
	if skip := size - int64(n); skip > 0 {
		if _, err := io.CopyN(io.Discard, r, skip); err != nil {
			return nil, fmt.Errorf("spool: %w", err)
		}
	}
	return readN(r, int64(n))
}

func readN(r io.Reader, n int64) ([]byte, error) {
	if n <= 0 {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, n))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("spool: %w", err)
	}
	return b, nil
}

// Close closes the file; the kept bytes are gone.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Close()
}
