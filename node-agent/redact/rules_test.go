package redact

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/viper"
	"github.com/zricethezav/gitleaks/v8/config"
)

// The rules' helpers that stand in for a plain search must agree with it on
// every input: a newline anywhere in a word, and the borrow of the word
// trick (a 0x0b just above a newline).
func TestLastNewlineIsLastIndexByte(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte("ab\n\x0b\x0a\x00\xff")
	for n := 0; n < 2000; n++ {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if rng.IntN(3) == 0 {
			b = bytes.ReplaceAll(b, []byte("\n"), []byte("x"))
		}
		if got, want := lastNewline(b), bytes.LastIndexByte(b, '\n'); got != want {
			t.Fatalf("lastNewline(%q) = %d, want %d", b, got, want)
		}
	}
}

func TestHasRunIsALongestRunAtLeast(t *testing.T) {
	longest := func(b []byte) int {
		best, run := 0, 0
		for _, c := range b {
			if isTok[c] {
				run++
				best = max(best, run)
			} else {
				run = 0
			}
		}
		return best
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 20000; i++ {
		b := make([]byte, rng.IntN(120))
		tokRate := rng.IntN(10) // from mostly separators to mostly tokens
		for j := range b {
			if rng.IntN(10) < tokRate {
				b[j] = "aZ9_.-"[rng.IntN(6)]
			} else {
				b[j] = " \n\"{:"[rng.IntN(5)]
			}
		}
		n := 1 + rng.IntN(40)
		if got, want := hasRun(b, n), longest(b) >= n; got != want {
			t.Fatalf("hasRun(%q, %d) = %v, want %v", b, n, got, want)
		}
	}
}

// defaultRules decodes gitleaks' default configuration with go-toml rather
// than through viper, as gitleaks does: the two must give the same
// ViperConfig, or the rules would not be gitleaks' own.
func TestDefaultConfigDecodesAsViperDoes(t *testing.T) {
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(strings.NewReader(config.DefaultConfig)); err != nil {
		t.Fatal(err)
	}
	var want config.ViperConfig
	if err := v.Unmarshal(&want); err != nil {
		t.Fatal(err)
	}
	got, err := defaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Rules) < 100 {
		t.Fatalf("viper read %d rules from gitleaks' configuration: not it", len(want.Rules))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("go-toml and viper decode gitleaks' configuration differently (%d and %d rules)", len(got.Rules), len(want.Rules))
	}
}

// TestTokensOnLongLinesAreRedacted: on a line longer than a rule's reach,
// a token far from the line's first keyword is still seen whole. (The
// line's bounds were once carried over from the first keyword, which cut
// the later one's window short: a GitHub token about 8 KiB after "token"
// was left.)
func TestTokensOnLongLinesAreRedacted(t *testing.T) {
	r := newRedactor(t, Options{})
	const tok = "ghp_R2bX9kQ4mZ7tL1wV8nY3pC6sD0fG5hJ2aE4u"
	for _, at := range []int{500, maxRuleSpan - 10, maxRuleSpan + 90, maxRuleSpan + 100, maxRuleSpan + 104, maxRuleSpan + 110, 2*maxRuleSpan + 50, 3 * maxRuleSpan} {
		line := strings.Repeat("x", 100) + "token " + strings.Repeat("y", at-106) + " " + tok + " " + strings.Repeat("z", 3*maxRuleSpan) + "\n"
		if out := r.String(line); strings.Contains(out, tok) {
			t.Errorf("a token %d bytes into a %d-byte line was left", at, len(line))
		}
	}
}

// TestLineBoundsDependOnlyOnTheKeyword: the line cache answers, keyword
// after keyword, what a search from each keyword alone answers, over lines
// shorter and longer than a rule's reach.
func TestLineBoundsDependOnlyOnTheKeyword(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, lineLen := range []int{40, 3000, maxRuleSpan - 1, maxRuleSpan + 1, 3 * maxRuleSpan} {
		buf := make([]byte, 8*maxRuleSpan)
		for i := range buf {
			buf[i] = 'x'
			if rng.IntN(lineLen) == 0 {
				buf[i] = '\n'
			}
		}
		var c lineCache
		gap := func() int { // mostly near, sometimes beyond a rule's reach
			if rng.IntN(8) == 0 {
				return 1 + rng.IntN(3*maxRuleSpan)
			}
			return 1 + rng.IntN(min(lineLen, 2000))
		}
		for ks := rng.IntN(50); ks+5 <= len(buf); ks += gap() {
			ke := ks + 1 + rng.IntN(4)
			if bytes.IndexByte(buf[ks:ke], '\n') >= 0 {
				continue // a keyword holds no newline
			}
			s, e := c.bounds(buf, ks, ke)
			// What it should be, byte by byte.
			ws := max(0, ks-maxRuleSpan)
			for i := ks - 1; i >= ws; i-- {
				if buf[i] == '\n' {
					ws = i + 1
					break
				}
			}
			we := min(len(buf), ke+maxRuleSpan)
			for i := ke; i < we; i++ {
				if buf[i] == '\n' {
					we = i
					break
				}
			}
			if s != ws || e != we {
				t.Fatalf("lines of about %d bytes: keyword at %d..%d: [%d, %d) from the cache, [%d, %d) alone", lineLen, ks, ke, s, e, ws, we)
			}
		}
	}
}

// TestLineBoundsCostOnePass: on one long line made of keywords, finding
// every keyword's line searches the buffer about once, not a rule's reach
// for each keyword (which an agent printing nothing else could use to
// make the node-agent spend minutes of CPU on a few megabytes).
func TestLineBoundsCostOnePass(t *testing.T) {
	for _, text := range []string{
		strings.Repeat("key ", 1<<16),                         // one line of 256 KiB
		strings.Repeat(strings.Repeat("key ", 3000)+"\n", 20), // lines of 12 KiB
	} {
		buf := []byte(text)
		var c lineCache
		for ks := 0; ks+3 <= len(buf); ks += 4 {
			if buf[ks] == '\n' {
				ks++
			}
			c.bounds(buf, ks, ks+3)
		}
		if c.scanned > 2*len(buf) {
			t.Errorf("%d bytes of keywords: the line searches read %d bytes", len(buf), c.scanned)
		}
	}
}
