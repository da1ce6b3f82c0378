package redact

import (
	"bytes"
	"sort"
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
	}
	for _, in := range inputs {
		type hit struct{ End, KW int }
		var got, want []hit
		d.walk([]byte(in), func(end int, kw int32) { got = append(got, hit{end, int(kw)}) })
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
