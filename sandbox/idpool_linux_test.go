package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestParseIDRange(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    IDRange
		wantErr bool
	}{
		{in: "60000-60127", want: IDRange{First: 60000, Count: 128}},
		{in: "1000-1000", want: IDRange{First: 1000, Count: 1}},
		{in: "0-10", wantErr: true},        // root
		{in: "65500-65600", wantErr: true}, // nobody
		{in: "10-5", wantErr: true},        // empty
		{in: "60000", wantErr: true},       // not a range
		{in: "a-b", wantErr: true},         // not numbers
		{in: "100000-165535", want: IDRange{First: 100000, Count: 65536}},
	} {
		got, err := ParseIDRange(tc.in)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
			t.Errorf("ParseIDRange(%q) = %v, %v", tc.in, got, err)
		}
	}
}

func TestIDPoolGivesEachRunItsOwnID(t *testing.T) {
	p := &IDPool{r: IDRange{First: 100, Count: 2}, busy: map[int]bool{}}
	a, relA, err := p.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	b, relB, err := p.Acquire()
	if err != nil || a == b {
		t.Fatalf("two runs got %d and %d (%v)", a, b, err)
	}
	if _, _, err := p.Acquire(); !errors.Is(err, ErrNoFreeID) {
		t.Fatalf("a third run while two hold the only two ids: %v", err)
	}
	relA()
	relA() // twice is harmless
	c, relC, err := p.Acquire()
	if err != nil || c != a {
		t.Fatalf("after a release: %d, %v; want %d", c, err, a)
	}
	relB()
	relC()
	// Round robin: the id released last is not handed out first.
	d, relD, _ := p.Acquire()
	defer relD()
	if d != b {
		t.Errorf("after releasing %d then %d, got %d; want %d", b, c, d, b)
	}
}

func TestRangeInMap(t *testing.T) {
	pod := "         0 1489240064      65536\n"
	host := "         0          0 4294967295\n"
	for _, tc := range []struct {
		r    IDRange
		m    string
		want bool
	}{
		{IDRange{60000, 128}, pod, true},
		{IDRange{65500, 100}, pod, false}, // runs past 65535
		{IDRange{100000, 10}, pod, false},
		{IDRange{100000, 10}, host, true},
		{IDRange{60000, 128}, "", false},
	} {
		if got := rangeInMap(tc.r, tc.m); got != tc.want {
			t.Errorf("rangeInMap(%v, %q) = %v", tc.r, tc.m, got)
		}
	}
}

// TestLockedIDsAcrossHolders: two holders of one lock folder (as two
// `harnessfacts run` processes are: each opens the files itself) never get
// the same id, an id given back is free again, and a full range says so.
func TestLockedIDsAcrossHolders(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "locks")
	r := IDRange{First: 61000, Count: 2}
	a, err := NewLockedIDs(r, dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewLockedIDs(r, dir)
	if err != nil {
		t.Fatal(err)
	}
	id1, release1, err := a.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	id2, release2, err := b.Acquire()
	if err != nil || id2 == id1 {
		t.Fatalf("second holder got %d (%v) while the first holds %d", id2, err, id1)
	}
	if _, _, err := a.Acquire(); !errors.Is(err, ErrNoFreeID) {
		t.Fatalf("a third id from a range of two: %v", err)
	}
	release1()
	release1() // twice is once
	id3, release3, err := b.Acquire()
	if err != nil || id3 != id1 {
		t.Fatalf("after %d was given back: %d, %v", id1, id3, err)
	}
	release2()
	release3()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := NewLockedIDs(r, dir); err == nil {
		t.Error("a lock folder others may write was accepted")
	}
}
