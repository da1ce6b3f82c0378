package livelog

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

func testRun() *harnessv1.HarnessRun {
	return &harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "u1"}}
}

// readAll follows f to the end of its stream.
func readAll(t *testing.T, f *Follower) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	for {
		b, done, err := f.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			return out.String()
		}
		out.Write(b)
	}
}

func TestFollowerGetsHistoryThenLiveThenEnd(t *testing.T) {
	h := NewHub()
	s := h.OpenStream(testRun())
	_, _ = s.Write([]byte("before\n"))
	f, err := s.Follow()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, _ = s.Write([]byte("after\n"))
	_ = s.Close()
	if got := readAll(t, f); got != "before\nafter\n" {
		t.Fatalf("follower read %q", got)
	}
	if _, ok := h.Lookup("ns", "r"); ok {
		t.Fatal("a closed stream is still in the hub")
	}
}

func TestHistoryIsBounded(t *testing.T) {
	s := NewHub().OpenStream(testRun())
	_, _ = s.Write(bytes.Repeat([]byte("x"), HistoryBytes+100))
	_, _ = s.Write([]byte("END"))
	snap := string(s.Snapshot())
	if !strings.HasPrefix(snap, "[… 103 earlier bytes not shown here") || !strings.HasSuffix(snap, "xEND") {
		t.Fatalf("snapshot starts %q, ends %q", snap[:60], snap[len(snap)-10:])
	}
	if n := len(snap) - strings.Index(snap, "\n") - 1; n != HistoryBytes {
		t.Fatalf("history holds %d bytes, want %d", n, HistoryBytes)
	}
}

// A follower that does not read never holds up the writer, and learns how
// much it missed.
func TestSlowFollowerDropsWithAMarker(t *testing.T) {
	s := NewHub().OpenStream(testRun())
	f, err := s.Follow()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte("y"), 64<<10)
	for range MaxPending/len(chunk) + 3 {
		_, _ = s.Write(chunk)
	}
	_, _ = s.Write([]byte("tail"))
	_ = s.Close()
	got := readAll(t, f)
	if !strings.Contains(got, "bytes not shown: this reader fell behind") || len(got) > MaxPending+200 {
		t.Fatalf("read %d bytes, marker present: %t", len(got), strings.Contains(got, "fell behind"))
	}
}

func TestFollowersAreBounded(t *testing.T) {
	s := NewHub().OpenStream(testRun())
	for range MaxFollowers {
		if _, err := s.Follow(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Follow(); !errors.Is(err, ErrTooManyFollowers) {
		t.Fatalf("follower %d: %v, want ErrTooManyFollowers", MaxFollowers+1, err)
	}
}

// A new attempt of the same run replaces (and ends) the old stream.
func TestReopenEndsTheOldStream(t *testing.T) {
	h := NewHub()
	old := h.OpenStream(testRun())
	f, _ := old.Follow()
	run := testRun()
	run.Status.Attempt = 2
	cur := h.OpenStream(run)
	if got := readAll(t, f); got != "" {
		t.Fatalf("old stream: %q", got)
	}
	if s, _ := h.Lookup("ns", "r"); s != cur {
		t.Fatal("the hub does not hold the new attempt's stream")
	}
}
