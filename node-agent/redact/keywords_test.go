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
		whole := d.hitsSplit([]byte(in), nil, new(kwScratch), false)
		if split := d.hitsSplit([]byte(in), nil, new(kwScratch), true); !slices.Equal(split, whole) {
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
