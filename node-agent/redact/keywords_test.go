package redact

import (
	"bytes"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestKeywordDFAFindsWhatANaiveSearchFinds(t *testing.T) {
	keywords := []string{"ey", "key", "sk-", "ghp_", "AKIA", "token", "k", "-----begin"}
	d := newKwDFA(keywords)
	inputs := []string{
		"the KEY they gave: sk-abc ghp_x akia AKIA Token tokentoken",
		"-----BEGIN RSA PRIVATE KEY----- kkk eyey",
		"",
		"no match here",
		strings.Repeat("ab", 5000) + "-----begin" + strings.Repeat("k", 7),
	}
	// Long enough to be scanned in interleaved lanes; the shifts put
	// keywords across every cut between lanes.
	for shift := 0; shift < 40; shift++ {
		inputs = append(inputs, strings.Repeat("x", shift)+strings.Repeat("x-----BEGIN sk-ghp_AKIA token key they ", 200))
	}
	// Long enough to be scanned in two halves at once: keywords across
	// the cut between the halves too.
	for shift := 0; shift < 40; shift += 3 {
		inputs = append(inputs, strings.Repeat("x", shift)+strings.Repeat("x-----BEGIN sk-ghp_AKIA token key they ", 2000))
	}
	for _, in := range inputs {
		type hit struct{ End, KW int }
		var got, want []hit
		whole := d.hitsIn([]byte(in), 0, len(in), nil, new(kwLanes))
		mid := len(in) / 2
		split := append(d.hitsIn([]byte(in), 0, mid, nil, new(kwLanes)), d.hitsIn([]byte(in), mid, len(in), nil, new(kwLanes))...)
		if !slices.Equal(split, whole) {
			t.Errorf("%d bytes: the scan in two halves found %d hits, in one %d (or in another order)", len(in), len(split), len(whole))
		}
		for _, h := range whole {
			for _, kw := range d.patterns(h) {
				got = append(got, hit{int(h.end), int(kw)})
			}
		}
		low := bytes.ToLower([]byte(in))
		for ki, k := range keywords {
			kl := bytes.ToLower([]byte(k))
			for off := 0; ; {
				i := bytes.Index(low[off:], kl)
				if i < 0 {
					break
				}
				want = append(want, hit{off + i + len(kl), ki})
				off += i + 1
			}
		}
		less := func(h []hit) func(i, j int) bool {
			return func(i, j int) bool { return h[i].End < h[j].End || h[i].End == h[j].End && h[i].KW < h[j].KW }
		}
		sort.Slice(got, less(got))
		sort.Slice(want, less(want))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%q (-naive +dfa):\n%s", in, diff)
		}
	}
}

// TestKeywordLanesCoverEveryPart scans parts (from, to] of a buffer, with
// from before, at and after the lanes' look-back, and compares with a naive
// search of the same part: the lanes' geometry (their starts, the stride,
// the last lane's longer tail) must neither lose an end nor report one
// twice or outside the part.
func TestKeywordLanesCoverEveryPart(t *testing.T) {
	keywords := []string{"ey", "key", "sk-", "ghp_", "akia", "token", "k", "-----begin private key-----"}
	d := newKwDFA(keywords)
	buf := []byte(strings.Repeat("-----BEGIN PRIVATE KEY----- sk-ghp_AKIA token key they ", 400))
	naive := func(from, to int) []int {
		low := bytes.ToLower(buf[:to])
		var ends []int
		for _, k := range keywords {
			for off := 0; ; {
				i := bytes.Index(low[off:], []byte(k))
				if i < 0 {
					break
				}
				if e := off + i + len(k); e > from {
					ends = append(ends, e)
				}
				off += i + 1
			}
		}
		sort.Ints(ends)
		return ends
	}
	var lane kwLanes
	for _, from := range []int{0, 1, 5, d.maxLen - 2, d.maxLen - 1, d.maxLen, 100, 4097} {
		for _, to := range []int{from + 1<<12, from + 1<<12 + 7, from + 6*(1<<12) + 5, len(buf)} {
			if to > len(buf) {
				continue
			}
			var got []int
			for _, h := range d.hitsIn(buf, from, to, nil, &lane) {
				for range d.patterns(h) {
					got = append(got, int(h.end))
				}
			}
			if diff := cmp.Diff(naive(from, to), got); diff != "" {
				t.Errorf("ends in (%d, %d] (-naive +lanes):\n%s", from, to, diff)
			}
		}
	}
}

// TestKeywordStepRefusesAPartOutsideItsBuffer: step reads without bounds
// checks, so it must check its arguments itself.
func TestKeywordStepRefusesAPartOutsideItsBuffer(t *testing.T) {
	d := newKwDFA([]string{"key"})
	buf := make([]byte, 100)
	var s [lanes]uint32
	var recs [kwRecs]kwRec
	if got, _ := d.step(buf, 0, 10, 0, 50, &s, &recs); got != 50 {
		t.Fatalf("step over the whole buffer stopped at %d, want 50", got)
	}
	for _, c := range []struct{ base, stride, j, n int }{
		{0, 10, 0, 51}, {1, 10, 0, 50}, {0, 20, 0, 1}, {-1, 1, 0, 1}, {0, 1, 5, 4},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("step(base %d, stride %d, %d..%d) over 100 bytes did not panic", c.base, c.stride, c.j, c.n)
				}
			}()
			d.step(buf, c.base, c.stride, c.j, c.n, &s, &recs)
		}()
	}
}

// TestKeywordTableIsCheckedForStep: a table entry that is not a row start
// would let step read outside the table; newKwDFA checks them all.
func TestKeywordTableIsCheckedForStep(t *testing.T) {
	d := newKwDFA([]string{"key", "token"})
	for _, bad := range []uint32{1, uint32(len(d.delta)), uint32(len(d.delta)) | d.outBit, 255} {
		d2 := &kwDFA{delta: slices.Clone(d.delta)}
		d2.delta[len(d2.delta)-1] = bad
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("a table with entry %#x passed checkRows", bad)
				}
			}()
			d2.checkRows()
		}()
	}
}

// FuzzKeywordLanes: whatever the bytes and the part scanned, the lanes
// (which read without bounds checks) find exactly the keyword ends that one
// automaton stepping through the part finds, with gitleaks' keywords.
func FuzzKeywordLanes(f *testing.F) {
	rs, err := defaultRules()
	if err != nil {
		f.Fatal(err)
	}
	d := rs.kw
	f.Add([]byte("api_key = ghp_token they AKIA -----BEGIN"), uint16(0), uint16(0))
	f.Add([]byte("eyJhbGciOi xoxb- sk_live_ glpat-"), uint16(3), uint16(77))
	f.Add([]byte{0, 0xff, 'k', 'e', 'y'}, uint16(4095), uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, from, less uint16) {
		if len(data) == 0 {
			return
		}
		// Repeated to a length the lanes scan, whatever the input's.
		buf := bytes.Repeat(data, (6<<12)/len(data)+1)
		to := len(buf) - int(less)%len(buf)
		fr := min(int(from), to)
		var lane kwLanes
		got := d.hitsIn(buf, fr, to, nil, &lane)
		want := d.scan(buf, max(0, fr-(d.maxLen-1)), fr, to, nil)
		if !slices.Equal(got, want) {
			t.Fatalf("ends in (%d, %d] of %d bytes: the lanes found %d, one automaton %d (or others)", fr, to, len(buf), len(got), len(want))
		}
	})
}

// TestSearchInHalvesFindsWhatOneSearchFinds: a long buffer is searched in
// two halves at once (secrets and keywords); what the halves find together
// is what one search finds, with secrets and keywords across the cut.
func TestSearchInHalvesFindsWhatOneSearchFinds(t *testing.T) {
	secret := "sk-split-0123456789abcdef"
	r, err := New(Options{Secrets: []string{secret, "short7"}})
	if err != nil {
		t.Fatal(err)
	}
	chunk := "x " + secret + " api_key=" + secret + " short7 ghp_token they "
	for shift := 0; shift < len(chunk); shift += 3 {
		buf := []byte(strings.Repeat("y", shift) + strings.Repeat(chunk, (splitMin/len(chunk))+2))
		var one, two scratch
		ctx := shift * 97 // some of the buffer already written out
		spans1 := slices.Clone(r.search(buf, ctx, &one, false))
		spans2 := slices.Clone(r.search(buf, ctx, &two, true))
		order := func(a, b span) int {
			if a.s != b.s {
				return a.s - b.s
			}
			return a.e - b.e
		}
		slices.SortFunc(spans1, order)
		slices.SortFunc(spans2, order)
		if !slices.Equal(spans1, spans2) {
			t.Errorf("shift %d: the halves found %d secrets, one search %d (or others)", shift, len(spans2), len(spans1))
		}
		if !slices.Equal(one.hits, two.hits) {
			t.Errorf("shift %d: the halves found %d keyword ends, one search %d (or others)", shift, len(two.hits), len(one.hits))
		}
		if !slices.Equal(one.cands, two.cands) {
			t.Errorf("shift %d: the halves asked for %d rule windows, one search %d (or others)", shift, len(two.cands), len(one.cands))
		}
		if len(spans1) == 0 || len(one.hits) == 0 || len(one.cands) == 0 {
			t.Fatalf("shift %d: found %d secrets, %d keyword ends and %d rule windows; the input has all three", shift, len(spans1), len(one.hits), len(one.cands))
		}
	}
}
