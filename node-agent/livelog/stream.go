// Package livelog carries a running agent's redacted output to whoever
// follows it (`harnessfacts logs -f` through the node-agent's log server,
// `harnessfacts run --follow`) while the agent runs. The executor writes
// each attempt's redacted output into a Stream of a Hub; followers read it.
//
// Everything is bounded and nothing blocks the agent: a Stream keeps the
// last HistoryBytes for a follower who joins late, each follower may fall
// MaxPending bytes behind (then bytes are dropped and a marker says how
// many), and a run has at most MaxFollowers at once. A Write never fails
// and never waits for a follower.
package livelog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Bounds of a Stream.
const (
	// HistoryBytes is how much of the recent output a follower who joins
	// late gets first.
	HistoryBytes = 64 << 10
	// MaxPending is how far one follower may fall behind before bytes
	// are dropped for it.
	MaxPending = 1 << 20
	// MaxFollowers is how many followers one run may have at once.
	MaxFollowers = 8
)

// ErrTooManyFollowers is returned by Follow when a run has MaxFollowers.
var ErrTooManyFollowers = errors.New("livelog: too many followers of this run")

// Hub holds the streams of the attempts running on this node.
type Hub struct {
	mu      sync.Mutex
	streams map[types.NamespacedName]*Stream
}

// NewHub returns an empty Hub.
func NewHub() *Hub { return &Hub{streams: map[types.NamespacedName]*Stream{}} }

// Open is OpenStream as the executor wants it (executor.LiveOutput).
func (h *Hub) Open(run *harnessv1.HarnessRun) io.WriteCloser { return h.OpenStream(run) }

// OpenStream starts the stream of run's current attempt; Close ends it. A
// stream still open for the same run (an attempt that has not closed it)
// is ended.
func (h *Hub) OpenStream(run *harnessv1.HarnessRun) *Stream {
	key := types.NamespacedName{Namespace: run.Namespace, Name: run.Name}
	s := &Stream{hub: h, key: key, UID: run.UID, Attempt: run.Status.Attempt, followers: map[*Follower]struct{}{}}
	h.mu.Lock()
	old := h.streams[key]
	h.streams[key] = s
	h.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	return s
}

// Lookup returns the open stream of the run namespace/name, if any.
func (h *Hub) Lookup(namespace, name string) (*Stream, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.streams[types.NamespacedName{Namespace: namespace, Name: name}]
	return s, ok
}

// Stream is one attempt's redacted output on its way to its followers.
type Stream struct {
	hub *Hub
	key types.NamespacedName
	// UID and Attempt identify the run's attempt.
	UID     types.UID
	Attempt int32

	mu        sync.Mutex
	history   []byte
	total     int64
	followers map[*Follower]struct{}
	closed    bool
}

// Write passes p on to the followers and keeps it as history. It never
// fails and never blocks on a follower.
func (s *Stream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return len(p), nil
	}
	s.total += int64(len(p))
	if len(p) >= HistoryBytes {
		// A batch of a fast stream: only its end is history.
		s.history = append(s.history[:0], p[len(p)-HistoryBytes:]...)
	} else {
		s.history = append(s.history, p...)
		if over := len(s.history) - HistoryBytes; over > 0 {
			s.history = s.history[:copy(s.history, s.history[over:])]
		}
	}
	for f := range s.followers {
		f.push(p)
	}
	return len(p), nil
}

// Close ends the stream: followers get what they have not read, then the
// end. The hub forgets it.
func (s *Stream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for f := range s.followers {
		f.end()
	}
	s.followers = nil
	s.mu.Unlock()
	s.hub.mu.Lock()
	if s.hub.streams[s.key] == s {
		delete(s.hub.streams, s.key)
	}
	s.hub.mu.Unlock()
	return nil
}

// Snapshot is the kept history, after a line saying how many earlier bytes
// it lacks (if any).
func (s *Stream) Snapshot() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked()
}

func (s *Stream) snapshotLocked() []byte {
	var out []byte
	if earlier := s.total - int64(len(s.history)); earlier > 0 {
		out = fmt.Appendf(out, "[… %d earlier bytes not shown here: the stored output has them when the run has ended …]\n", earlier)
	}
	return append(out, s.history...)
}

// Follow returns a follower that reads the history, then every later
// write, until the stream ends. The follower must be closed.
func (s *Stream) Follow() (*Follower, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &Follower{s: s, wake: make(chan struct{}, 1)}
	if s.closed {
		f.buf = s.snapshotLocked()
		f.ended = true
		return f, nil
	}
	if len(s.followers) >= MaxFollowers {
		return nil, ErrTooManyFollowers
	}
	f.buf = s.snapshotLocked()
	s.followers[f] = struct{}{}
	return f, nil
}

// Follower reads one Stream.
type Follower struct {
	s    *Stream
	wake chan struct{}

	mu      sync.Mutex
	buf     []byte
	dropped int64
	ended   bool
}

func (f *Follower) push(p []byte) {
	f.mu.Lock()
	if len(f.buf)+len(p) > MaxPending {
		f.dropped += int64(len(p))
	} else {
		if f.dropped > 0 {
			f.buf = fmt.Appendf(f.buf, "\n[… %d bytes not shown: this reader fell behind …]\n", f.dropped)
			f.dropped = 0
		}
		f.buf = append(f.buf, p...)
	}
	f.mu.Unlock()
	f.signal()
}

func (f *Follower) end() {
	f.mu.Lock()
	f.ended = true
	f.mu.Unlock()
	f.signal()
}

func (f *Follower) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Next returns the bytes written since the last call, waiting for some.
// At the end of the stream, once everything was read, it returns nil and
// done true; when ctx ends first, ctx's error.
func (f *Follower) Next(ctx context.Context) (b []byte, done bool, err error) {
	for {
		f.mu.Lock()
		if len(f.buf) > 0 || f.dropped > 0 {
			b, f.buf = f.buf, nil
			if f.dropped > 0 {
				b = fmt.Appendf(b, "\n[… %d bytes not shown: this reader fell behind …]\n", f.dropped)
				f.dropped = 0
			}
			f.mu.Unlock()
			return b, false, nil
		}
		ended := f.ended
		f.mu.Unlock()
		if ended {
			return nil, true, nil
		}
		select {
		case <-f.wake:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// Close stops following.
func (f *Follower) Close() {
	f.s.mu.Lock()
	delete(f.s.followers, f)
	f.s.mu.Unlock()
}
