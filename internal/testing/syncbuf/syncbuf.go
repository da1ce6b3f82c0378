// Package syncbuf is a bytes.Buffer that a process writes while a test
// reads it: a started command's output, watched for a line.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for one writer and readers at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
