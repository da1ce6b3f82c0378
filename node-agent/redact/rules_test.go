package redact

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
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

// assignmentFollowsOnLine is generic-api-key's filter as it was when it was
// handed the keyword's line end lineE (found first, for every keyword end):
// the reference the filter that finds its own line end must agree with.
func assignmentFollowsOnLine(buf []byte, ke, lineE int) bool {
	end := min(ke+24, len(buf))
	if lineE > ke {
		end = min(end, lineE+1)
	}
	p := -1
	for i, c := range buf[ke:end] {
		if c == '=' || c == '>' || c == ':' || c == '|' || c == ',' || c == '?' {
			p = ke + i
			break
		}
	}
	if p < 0 {
		return false
	}
	q := p + 1
	for n := 0; q < len(buf) && n < 3 && strings.IndexByte("=>:|?,", buf[q]) >= 0; n++ {
		q++
	}
	for n := 0; q < len(buf) && n < 5 && strings.IndexByte("`'\" \t\r\n\f\v", buf[q]) >= 0; n++ {
		q++
	}
	run := 0
	for ; q < len(buf) && isTok[buf[q]]; q++ {
		if run++; run >= 10 {
			return true
		}
	}
	return false
}

// assignmentText is keyword-dense text near generic-api-key's filter's
// edges: keys, operators, quotes, newlines (also right after a keyword)
// and values shorter and longer than ten token characters.
func assignmentText(rng *rand.Rand, n int) []byte {
	parts := []string{"token", "api_key", "secret", "password", "input_tokens", "\n", "\n", " ", "\t", "=", ":", "=>", "||", "?=", ",", ">", "\"", "'", "`",
		"12345", "abcdefghij", "abcdefghijklmnop", "x.y-z_", "{", "}", "key\n=", "token\n:abcdefghijklm"}
	var b []byte
	for len(b) < n {
		b = append(b, parts[rng.IntN(len(parts))]...)
	}
	return b
}

// The filter lets a newline come between the keyword, the operator and
// the value, as generic-api-key's \s does: it answers as the filter handed
// no line end would, at every position of keyword-dense text, and so
// accepts whatever the filter confined to the keyword's line accepted.
func TestAssignmentFollowsCrossesNewlines(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 300 {
		buf := assignmentText(rng, 1+rng.IntN(400))
		for ke := 0; ke <= len(buf); ke++ {
			lineE := min(len(buf), ke+maxRuleSpan)
			if i := bytes.IndexByte(buf[ke:lineE], '\n'); i >= 0 {
				lineE = ke + i
			}
			got := assignmentFollows(buf, ke)
			if want := assignmentFollowsOnLine(buf, ke, len(buf)); got != want {
				t.Fatalf("assignmentFollows(%q, %d) = %v, with no line end %v", buf, ke, got, want)
			}
			if !got && assignmentFollowsOnLine(buf, ke, lineE) {
				t.Fatalf("assignmentFollows(%q, %d) rejects what it accepted on the keyword's line", buf, ke)
			}
		}
	}
	for _, text := range []string{"api_key:\n  abcdefghijklmnop", "token\n= abcdefghijk", "secret =\n\t'abcdefghijkl'"} {
		ke := strings.IndexAny(text, ":\n=")
		if !assignmentFollows([]byte(text), ke) {
			t.Errorf("assignmentFollows(%q, %d) = false", text, ke)
		}
	}
}

// newlinesOf bounds the newlines a match may hold.
func TestNewlinesOf(t *testing.T) {
	for expr, want := range map[string]int{
		`abc`:                              0,
		`a\nb`:                             1,
		`a\s{0,3}b`:                        3,
		`a[\x60'"\s=]{0,5}b\s?`:            6,
		`(?:a|\n\n)c`:                      2,
		`[^\n]*x`:                          0,
		`.*x`:                              0,
		`(?s).{0,5}`:                       5,
		`\s*`:                              -1,
		`a\s+b`:                            -1,
		`[\s\S-]{64,}?KEY`:                 -1,
		`(?i)\b(p8e-[a-z0-9]{32})(?:\s|$)`: 1,
	} {
		if got := newlinesOf(simplified(expr)); got != want {
			t.Errorf("newlinesOf(%s) = %d, want %d", expr, got, want)
		}
	}
	if got := newlinesOf(nil); got != -1 {
		t.Errorf("newlinesOf(nil) = %d, want -1 (a regex that did not parse is tried as far as its span)", got)
	}
	rs, err := defaultRules()
	if err != nil {
		t.Fatal(err)
	}
	for _, ru := range rs.rules {
		if ru.id == "generic-api-key" && ru.lines != 9 {
			t.Errorf("generic-api-key may hold %d newlines, want 9 (3 before its operator, 5 after, 1 after its value)", ru.lines)
		}
	}
}

// lineIndex answers as a search from each keyword would, and records each
// byte of the buffer at most once.
func TestLineIndexIsASearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, lineLen := range []int{3, 40, 3000, maxRuleSpan + 1} {
		buf := make([]byte, 6*maxRuleSpan)
		for i := range buf {
			buf[i] = 'x'
			if rng.IntN(lineLen) == 0 {
				buf[i] = '\n'
			}
		}
		var x lineIndex
		for ke := 1 + rng.IntN(50); ke <= len(buf); ke += 1 + rng.IntN(3*lineLen) {
			ks := max(0, ke-1-rng.IntN(6))
			span, lines := 1+rng.IntN(maxRuleSpan), rng.IntN(12)
			s, e := x.around(buf, ks, ke, span, lines)
			ws, we := aroundBySearch(buf, ks, ke, span, lines)
			if s != ws || e != we {
				t.Fatalf("lines of about %d bytes: keyword %d..%d, span %d, %d lines: [%d, %d) from the index, [%d, %d) by search", lineLen, ks, ke, span, lines, s, e, ws, we)
			}
		}
		if x.to-x.from > len(buf) {
			t.Errorf("the index recorded %d bytes of %d", x.to-x.from, len(buf))
		}
		// A first keyword of a short reach far into the buffer, then one of
		// the longest reach just after it.
		var y lineIndex
		ks := 3 * maxRuleSpan
		for i, span := range []int{10, maxRuleSpan, 100, maxRuleSpan} {
			s, e := y.around(buf, ks+i, ks+i+3, span, 9)
			if ws, we := aroundBySearch(buf, ks+i, ks+i+3, span, 9); s != ws || e != we {
				t.Fatalf("reach %d: [%d, %d) from the index, [%d, %d) by search", span, s, e, ws, we)
			}
		}
		if x.searched+y.searched > 0 {
			t.Errorf("%d keywords were answered by searching, not from the index", x.searched+y.searched)
		}
	}
}

// candidates finds a keyword's line only for the rules whose filter passes,
// and the lines around it from its index: the windows must be those found
// by searching from each keyword end.
func TestCandidatesAreThoseOfEveryLine(t *testing.T) {
	rs, err := defaultRules()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for range 200 {
		buf := assignmentText(rng, 1+rng.IntN(3000))
		if rng.IntN(4) == 0 { // a line longer than a rule's reach
			buf = append(bytes.Repeat([]byte("x token=abcdefghijklm "), maxRuleSpan/10), buf...)
		}
		ctx := rng.IntN(len(buf) + 1)
		hits := rs.kw.scan(buf, 0, 0, len(buf), nil)
		got := rs.candidates(buf, ctx, hits, nil)
		var want []window
		var line lineCache
		for _, h := range hits {
			ke := int(h.end)
			for _, pattern := range rs.kw.patterns(h) {
				ks := ke - rs.kw.patLen[pattern]
				lineS, lineE := line.bounds(buf, ks, ke)
				for _, ri := range rs.kwRules[pattern] {
					ru := rs.rules[ri]
					if ke+ru.span <= ctx {
						continue
					}
					s, e := max(0, ks-ru.span), min(len(buf), ke+ru.span)
					switch {
					case ru.lines == 0:
						s, e = max(s, lineS), min(e, lineE)
					case ru.lines > 0:
						s, e = max(s, lineS), min(e, lineE)
						as, ae := aroundBySearch(buf, ks, ke, ru.span, ru.lines)
						if lineE < len(buf) && lineE-ke <= assignmentReach {
							e = ae
						}
						if lineS > 0 && ks-lineS <= assignmentReach {
							s = as
						}
					}
					if ru.hitFilter != nil && !assignmentFollowsOnLine(buf, ke, len(buf)) {
						continue
					}
					want = append(want, window{rule: ri, s: s, e: e})
				}
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%d bytes, context %d: %d windows, want %d", len(buf), ctx, len(got), len(want))
		}
		if len(hits) == 0 {
			t.Fatal("the text has no keyword")
		}
	}
}

// (?i) lets a rule's [a-z] match the Kelvin sign and the long s, and
// gitleaks finds tokens that hold them: the token-run filters must let
// such a window through to the rule.
func TestFoldedLettersDoNotHideAToken(t *testing.T) {
	r := newRedactor(t, Options{})
	for _, tok := range []string{
		"p8e-\u017fiKRzqW1JEGTMOSHrL575qoKg6DqTMfj",         // adobe-client-secret, a long s
		"p8e-eiKRzqW1JEGTMOSHrL575qoKg6DqTMf\u212a",         // and a Kelvin sign
		"api_key = \"Zx7\u017fQm2Lp9Rt4Vw8Yz3Bn6Cd1Hk5Jq\"", // generic-api-key
	} {
		if out := r.String("log line\n" + tok + "\nmore\n"); !strings.Contains(out, "[REDACTED:") {
			t.Errorf("%q was left: %q", tok, out)
		}
	}
}

// gitleaks' "keyword = value" rules allow a newline between the keyword,
// the operator and the value (\s): a value on the next line is found.
func TestValuesOnTheNextLineAreRedacted(t *testing.T) {
	r := newRedactor(t, Options{})
	for _, text := range []string{
		"config:\n  api_key:\n    Zx7pQm2Lp9Rt4Vw8Yz3Bn6Cd1Hk5Jq\n",
		"SECRET=\n  'Zx7pQm2Lp9Rt4Vw8Yz3Bn6Cd1Hk5Jq'\n",
		"adafruit_key =\n \"Zx7pQm2Lp9Rt4Vw8Yz3Bn6Cd1Hk5Jq\"\n",
	} {
		out := r.String(text)
		if strings.Contains(out, "Zx7pQm2Lp9Rt4Vw8Yz3Bn6Cd1Hk5Jq") {
			t.Errorf("%q: the value was left: %q", text, out)
		}
	}
}

// A rule's windows are merged in the order of their keywords, and a later
// keyword's window may begin before an earlier one's (an assignment rule
// tried on the lines above its keyword): the merged window must hold both.
func TestMergedWindowsHoldEarlierStarts(t *testing.T) {
	rs, err := defaultRules()
	if err != nil {
		t.Fatal(err)
	}
	ri := slices.IndexFunc(rs.rules, func(ru *rule) bool { return ru.id == "generic-api-key" })
	if ri < 0 {
		t.Fatal("no generic-api-key rule")
	}
	buf := []byte("api_key = \"Zx7pQm2Lp9Rt4Vw8Yz3Bn6Cd1Hk5Jq\"\n" + strings.Repeat("and on\n", 10))
	sc := &scratch{cands: []window{{rule: ri, s: 44, e: len(buf)}, {rule: ri, s: 0, e: 50}}}
	spans := rs.find(buf, nil, sc, nil)
	if len(spans) != 1 || string(buf[spans[0].s:spans[0].e]) != "Zx7pQm2Lp9Rt4Vw8Yz3Bn6Cd1Hk5Jq" {
		t.Fatalf("spans %v: want the value of the first line", spans)
	}
}

// TestRulesAreTranslatedAsAWhole: the rule set translates each rule (and
// the global allowlists) at its first use, one at a time; what it gets must
// be what gitleaks' Translate makes of the whole configuration, rule for
// rule: the same regex, secret group, entropy and allowlists (their
// regexes, stop words and trie), and the same rules skipped.
func TestRulesAreTranslatedAsAWhole(t *testing.T) {
	vc, err := defaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	rs := newRuleSet(&vc)
	forWhole, err := defaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	whole, err := forWhole.Translate()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, id := range whole.OrderedRules {
		if r := whole.Rules[id]; r.Regex != nil && r.Path == nil && len(r.Keywords) > 0 {
			want = append(want, id)
		}
	}
	var got []string
	for _, ru := range rs.rules {
		got = append(got, ru.id)
	}
	if !slices.Equal(got, want) || len(got) < 100 {
		t.Fatalf("the rule set has %d rules, Translate %d usable ones:\n%v\n%v", len(got), len(want), got, want)
	}
	targeted := 0
	for _, ru := range rs.rules {
		w := whole.Rules[ru.id]
		cr, err := ru.compiled()
		if err != nil {
			t.Fatalf("%s: %v", ru.id, err)
		}
		if cr.re.String() != w.Regex.String() || ru.secretGroup != w.SecretGroup || ru.entropy != w.Entropy {
			t.Errorf("%s: regex %q group %d entropy %v, Translate's %q %d %v", ru.id, cr.re, ru.secretGroup, ru.entropy, w.Regex, w.SecretGroup, w.Entropy)
		}
		if !slices.Equal(allowlistsSaid(cr.allowlists), allowlistsSaid(usable(w.Allowlists))) {
			t.Errorf("%s: its allowlists are not Translate's (%d, Translate %d)", ru.id, len(cr.allowlists), len(usable(w.Allowlists)))
		}
		if len(w.Allowlists) > 0 {
			targeted++
		}
	}
	if targeted < 5 {
		t.Fatalf("only %d rules have allowlists: the comparison above saw too few", targeted)
	}
	gl, err := rs.allowlist()
	if err != nil {
		t.Fatal(err)
	}
	// (gitleaks' own global allowlist names paths, which output has not:
	// none is usable today, and none was before rules were translated one
	// at a time.)
	if !slices.Equal(allowlistsSaid(gl), allowlistsSaid(usable(whole.Allowlists))) {
		t.Fatalf("the global allowlists (%d) are not Translate's (%d)", len(gl), len(usable(whole.Allowlists)))
	}
	// The configuration the rules were translated from is left as it was
	// (Translate lowercases keywords in place).
	again, err := defaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(vc, again) {
		t.Fatal("translating the rules one at a time changed the configuration they are read from")
	}
}

// TestARuleTheTranslationRefusesFailsClosed: were a rule not to translate,
// its window is redacted whole rather than left.
func TestARuleTheTranslationRefusesFailsClosed(t *testing.T) {
	ru := &rule{id: "broken", compiled: func() (compiledRule, error) { return compiledRule{}, errors.New("no") }}
	got := ru.match([]byte("0123456789"), 2, 8, func() ([]*config.Allowlist, error) { return nil, nil }, nil, nil)
	if len(got) != 1 || got[0].s != 2 || got[0].e != 8 {
		t.Fatalf("spans %v, want the window 2..8", got)
	}
}

// allowlistsSaid says what each allowlist allows. (Translate keeps stop
// words in a map's order, so two translations differ in that order.)
func allowlistsSaid(als []*config.Allowlist) []string {
	var out []string
	for _, a := range als {
		var res []string
		for _, re := range a.Regexes {
			res = append(res, re.String())
		}
		words := slices.Sorted(slices.Values(a.StopWords))
		out = append(out, fmt.Sprintf("%q %v %q %q %q", a.Description, a.MatchCondition, a.RegexTarget, res, words))
		// The stop words are found through the trie.
		for _, w := range words {
			if ok, _ := a.ContainsStopWord("x" + w + "x"); !ok {
				out = append(out, "stop word not found: "+w)
			}
		}
	}
	return out
}
