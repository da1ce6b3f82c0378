package sandbox

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCaptureKeepsHeadAndTail(t *testing.T) {
	tests := []struct {
		name        string
		max         int
		writes      []string
		wantHead    string
		wantTail    string
		wantDropped int64
	}{
		{name: "fits", max: 10, writes: []string{"abc", "de"}, wantHead: "abcde"},
		{name: "exactly full", max: 4, writes: []string{"ab", "cd"}, wantHead: "ab", wantTail: "cd"},
		{name: "one big write", max: 4, writes: []string{"0123456789"}, wantHead: "01", wantTail: "89", wantDropped: 6},
		{name: "many small writes wrap the ring", max: 6, writes: []string{"abc", "d", "e", "f", "g", "hij"}, wantHead: "abc", wantTail: "hij", wantDropped: 4},
		{name: "odd max gives the extra byte to the tail", max: 5, writes: []string{"0123456789"}, wantHead: "01", wantTail: "789", wantDropped: 5},
		{name: "zero keeps nothing", max: 0, writes: []string{"abc"}, wantDropped: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCapture(tt.max)
			var total int64
			for _, w := range tt.writes {
				n, err := c.Write([]byte(w))
				if err != nil || n != len(w) {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
				total += int64(n)
			}
			got := struct {
				Head, Tail     string
				Dropped, Total int64
			}{string(c.Head()), string(c.Tail()), c.Dropped(), c.Total()}
			want := struct {
				Head, Tail     string
				Dropped, Total int64
			}{tt.wantHead, tt.wantTail, tt.wantDropped, total}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("capture (-want +got):\n%s", d)
			}
			if c.Truncated() != (tt.wantDropped > 0) {
				t.Errorf("Truncated() = %v", c.Truncated())
			}
		})
	}
}

func TestCaptureBytesNamesTheCut(t *testing.T) {
	c := NewCapture(4)
	_, _ = c.Write([]byte("0123456789"))
	if got, want := string(c.Bytes()), "01\n[… 6 bytes dropped …]\n89"; got != want {
		t.Fatalf("Bytes() = %q, want %q", got, want)
	}
	c = NewCapture(100)
	_, _ = c.Write([]byte("short"))
	if got := string(c.Bytes()); got != "short" {
		t.Fatalf("Bytes() = %q, want the input unchanged", got)
	}
}

// The tail must be the last bytes whatever the write sizes: compare with a
// naive model over many chunkings.
func TestCaptureMatchesModel(t *testing.T) {
	input := []byte(strings.Repeat("the quick brown fox jumps over the lazy dog ", 50))
	for limit := 1; limit < 40; limit += 3 {
		for chunk := 1; chunk < 50; chunk += 7 {
			c := NewCapture(limit)
			for i := 0; i < len(input); i += chunk {
				_, _ = c.Write(input[i:min(i+chunk, len(input))])
			}
			h := limit / 2
			wantHead, wantTail := input[:h], input[len(input)-(limit-h):]
			if !bytes.Equal(c.Head(), wantHead) || !bytes.Equal(c.Tail(), wantTail) {
				t.Fatalf("limit %d chunk %d: head %q tail %q, want %q %q", limit, chunk, c.Head(), c.Tail(), wantHead, wantTail)
			}
		}
	}
}

func TestCaptureConcurrentWriters(t *testing.T) {
	c := NewCapture(64)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				_, _ = c.Write([]byte("0123456789"))
			}
		}()
	}
	wg.Wait()
	if c.Total() != 80000 || c.Dropped() != 80000-64 {
		t.Fatalf("total %d dropped %d", c.Total(), c.Dropped())
	}
}
