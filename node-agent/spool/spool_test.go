package spool

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/harnessfacts/harnessfacts/sandbox"
)

// The spool keeps exactly what sandbox.Capture keeps in memory.
func TestSpoolKeepsWhatCaptureKeeps(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, limit := range []int{0, 1, 7, 100, 4096} {
		for _, total := range []int{0, 3, 99, 100, 101, 5000, 20000} {
			s, err := New(t.TempDir(), int64(limit))
			if err != nil {
				t.Fatal(err)
			}
			c := sandbox.NewCapture(limit)
			data := make([]byte, total)
			for i := range data {
				data[i] = byte('a' + rng.IntN(26))
			}
			for p := data; len(p) > 0; {
				k := min(len(p), 1+rng.IntN(300))
				_, _ = s.Write(p[:k])
				_, _ = c.Write(p[:k])
				p = p[k:]
			}
			got, err := io.ReadAll(s.Reader())
			if err != nil {
				t.Fatal(err)
			}
			if want := c.Bytes(); !bytes.Equal(got, want) {
				t.Fatalf("limit %d, total %d: spool kept %q, capture %q", limit, total, got, want)
			}
			if s.Total() != int64(total) || s.Truncated() != c.Truncated() || s.Size() != int64(len(got)) {
				t.Errorf("limit %d, total %d: Total %d Truncated %v Size %d", limit, total, s.Total(), s.Truncated(), s.Size())
			}
			sum := sha256.Sum256(got)
			if d, _ := s.Digest(); d != "sha256:"+hex.EncodeToString(sum[:]) {
				t.Errorf("Digest %s", d)
			}
			tail, _ := s.Tail(10)
			head, _ := s.Head(10)
			if !bytes.Equal(tail, got[max(0, len(got)-10):]) || !bytes.Equal(head, got[:min(10, len(got))]) {
				t.Errorf("Head %q Tail %q of %q", head, tail, got)
			}
			_ = s.Close()
		}
	}
}

// A limit of 64 MiB and 96 MiB written cost the heap nothing like that.
func TestSpoolMemoryDoesNotFollowTheLimit(t *testing.T) {
	s, err := New(t.TempDir(), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	for range 96 << 20 / len(chunk) {
		_, _ = s.Write(chunk)
	}
	d, err := s.Digest()
	if err != nil || d == "" {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if grew := int64(after.TotalAlloc - before.TotalAlloc); grew > 8<<20 {
		t.Errorf("the heap allocated %d MiB for a 64 MiB spool", grew>>20)
	}
	if s.Size() < 64<<20 || s.Size() > 64<<20+64 || !s.Truncated() || s.Err() != nil {
		t.Errorf("Size %d Truncated %v Err %v", s.Size(), s.Truncated(), s.Err())
	}
}
