package redact

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"regexp/syntax"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/pelletier/go-toml/v2"
	"github.com/zricethezav/gitleaks/v8/config"
	"github.com/zricethezav/gitleaks/v8/regexp"
)

// maxRuleSpan caps how far a rule's match may reach from its keyword when
// its regex is unbounded (a private key block fits).
const maxRuleSpan = 8 << 10

type rule struct {
	id          string
	secretGroup int
	entropy     float64
	// compiled is the rule's regex and allowlists as gitleaks' Translate
	// makes them, made at the rule's first window (translateRule): most
	// rules never get one in a run's output, and compiling all of them
	// and their allowlists up front cost every process that redacts about
	// 25 ms of CPU.
	compiled func() (compiledRule, error)
	// span bounds how far the match reaches from the keyword, each way.
	span int
	// lines says where the rule is tried around a keyword: 0 on the
	// keyword's line only, which keeps the regex work small; -1 as far as
	// its span reaches, whatever the lines; n > 0 (a "keyword, operator,
	// value" rule, see assignmentRule) on the keyword's line and, where
	// that line ends (starts) within assignmentReach bytes of the keyword,
	// on the n lines below (above) it too.
	lines int
	// minRun is a length every match's longest run of token characters
	// (see isTok) reaches: a window without such a run cannot match, and the
	// (slow) regex is not run on it.
	minRun int
	// hitFilter, when set, rejects a keyword hit cheaply before the regex.
	hitFilter func(buf []byte, ke int) bool
}

type ruleSet struct {
	rules   []*rule
	kw      *kwDFA
	kwRules [][]int // keyword pattern index → rules
	maxKw   int
	window  int
	// allowlist is gitleaks' global allowlists that target no rule and can
	// be judged without a path or commit (usable; gitleaks' own one names
	// paths, so none today), made at the first match.
	allowlist func() ([]*config.Allowlist, error)
}

// compiledRule is what Translate makes of a rule.
type compiledRule struct {
	re         *regexp.Regexp
	allowlists []*config.Allowlist
}

// defaultRules loads gitleaks' default configuration once.
//
// gitleaks reads it through viper, which parses the TOML into a generic
// map and decodes that map again into ViperConfig: 17-20 ms of CPU here,
// in every process that redacts. go-toml, the parser viper itself uses,
// decodes it straight into ViperConfig in 2-4 ms, and the result is the
// same struct (TestDefaultConfigDecodesAsViperDoes). What the scan needs
// of each rule (its keywords, how far its match reaches) is read from it
// now; gitleaks' Translate makes each rule's regex and allowlists when
// the rule is first tried, one rule at a time (translateRule), the same
// objects it makes for the whole configuration
// (TestRulesAreTranslatedAsAWhole).
var defaultRules = sync.OnceValues(func() (*ruleSet, error) {
	vc, err := defaultConfig()
	if err != nil {
		return nil, err
	}
	return newRuleSet(&vc), nil
})

// defaultConfig is gitleaks' default configuration, decoded.
func defaultConfig() (config.ViperConfig, error) {
	var vc config.ViperConfig
	err := toml.Unmarshal([]byte(config.DefaultConfig), &vc)
	return vc, err
}

// Preload reads gitleaks' rules now rather than at the first New: a TOML
// parse and the keywords' automaton, once per process (each rule's reach
// is knownFacts', see factsOf).
// `harnessfacts run` preloads them in the background while it validates
// the run and the sandbox preflight waits on bwrap. The rules are the same
// either way.
func Preload() { _, _ = defaultRules() }

// newRuleSet reads vc's rules for the scan. vc is kept, unchanged, for the
// rules' translations.
func newRuleSet(vc *config.ViperConfig) *ruleSet {
	rs := &ruleSet{allowlist: sync.OnceValues(func() ([]*config.Allowlist, error) {
		cfg, err := translateGlobal(vc)
		return usable(cfg.Allowlists), err
	})}
	kwIndex := map[string]int{}
	var keywords []string
	for i, r := range vc.Rules {
		// Skip rules without a content regex and rules meant only for
		// certain file paths: output has no path. (Translate's rules
		// have a nil Regex and a non-nil Path exactly then.)
		if r.Regex == "" || r.Path != "" || len(r.Keywords) == 0 {
			continue
		}
		f := factsOf(r.Regex)
		ru := &rule{
			id:          r.ID,
			secretGroup: r.SecretGroup,
			entropy:     r.Entropy,
			span:        f.span,
			lines:       f.lines,
			minRun:      f.minRun,
			compiled: sync.OnceValues(func() (compiledRule, error) {
				cr, err := translateRule(vc, i)
				return compiledRule{re: cr.Regex, allowlists: usable(cr.Allowlists)}, err
			}),
		}
		if ru.id == "generic-api-key" {
			ru.hitFilter = assignmentFollows
		}
		idx := len(rs.rules)
		rs.rules = append(rs.rules, ru)
		for _, k := range r.Keywords {
			k = strings.ToLower(k)
			pi, ok := kwIndex[k]
			if !ok {
				pi = len(keywords)
				kwIndex[k] = pi
				keywords = append(keywords, k)
				rs.kwRules = append(rs.kwRules, nil)
			}
			rs.kwRules[pi] = append(rs.kwRules[pi], idx)
			rs.maxKw = max(rs.maxKw, len(k))
		}
		rs.window = max(rs.window, f.span)
	}
	rs.window += rs.maxKw
	rs.kw = newKwDFA(keywords)
	return rs
}

// ruleFacts is what the scan reads of a rule's regex: how far a match
// reaches from its keyword (span), where around the keyword it is tried
// (lines) and the token run every match holds (minRun); see rule.
type ruleFacts struct {
	span, lines, minRun int
}

// factsOf is a regex's ruleFacts: those of gitleaks' own rules as
// knownFacts holds them (written by TestKnownFactsAreCurrent with
// -update), any other's worked out from the regex. Working them out parses
// and simplifies each regex: 5-6 ms of CPU and 4.5 MB of garbage for
// gitleaks' 200 rules, in every process that redacts (a local run waited
// for it before the agent started), for figures that change only with
// gitleaks' version.
func factsOf(src string) ruleFacts {
	if f, ok := knownFacts[factsKey(src)]; ok {
		return f
	}
	return workOutFacts(src)
}

// factsKey is a regex's key in knownFacts: its FNV-1a hash.
func factsKey(src string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(src); i++ {
		h ^= uint64(src[i])
		h *= 1099511628211
	}
	return h
}

// workOutFacts reads a regex's ruleFacts from the regex itself.
func workOutFacts(src string) ruleFacts {
	re := simplified(src)
	span, bounded := maxLen(re)
	if !bounded || span > maxRuleSpan {
		span = maxRuleSpan
	}
	f := ruleFacts{span: span, minRun: minTokRun(re)}
	switch nl := newlinesOf(re); {
	case assignmentRule(src, nl):
		f.lines = nl
	case nl < 0 || strings.Contains(src, `\s\S`) || strings.Contains(src, "(?s") || strings.Contains(src, `\n`) && !bounded:
		f.lines = -1
	}
	return f
}

// translateRule is gitleaks' Translate of vc's rule i alone, with the
// global allowlists that target it: the rule as Translate of the whole
// configuration makes it. vc is not changed (Translate lowercases a
// rule's keywords in place, so the rule is copied).
func translateRule(vc *config.ViperConfig, i int) (config.Rule, error) {
	r := vc.Rules[i]
	r.Keywords = slices.Clone(r.Keywords)
	one := config.ViperConfig{Title: vc.Title, Description: vc.Description, MinVersion: vc.MinVersion}
	one.Rules = append(one.Rules, r)
	// The deprecated [allowlist] is what gitleaks' own configuration
	// still uses; Translate reads it, so the one-rule configurations do.
	if a := vc.AllowList; a != nil && slices.Contains(a.TargetRules, r.ID) { //nolint:staticcheck // see above
		targeted := *a
		targeted.TargetRules = []string{r.ID}
		one.AllowList = &targeted //nolint:staticcheck // see above
	}
	for _, a := range vc.Allowlists {
		if slices.Contains(a.TargetRules, r.ID) {
			targeted := *a
			targeted.TargetRules = []string{r.ID}
			one.Allowlists = append(one.Allowlists, &targeted)
		}
	}
	cfg, err := one.Translate()
	if err != nil {
		return config.Rule{}, fmt.Errorf("gitleaks rule %s: %w", r.ID, err)
	}
	return cfg.Rules[r.ID], nil
}

// translateGlobal is gitleaks' Translate of vc's global allowlists that
// target no rule, without the rules.
func translateGlobal(vc *config.ViperConfig) (config.Config, error) {
	g := config.ViperConfig{Title: vc.Title, Description: vc.Description, MinVersion: vc.MinVersion}
	if a := vc.AllowList; a != nil && len(a.TargetRules) == 0 { //nolint:staticcheck // gitleaks' own configuration's [allowlist]
		g.AllowList = a //nolint:staticcheck // as above
	}
	for _, a := range vc.Allowlists {
		if len(a.TargetRules) == 0 {
			g.Allowlists = append(g.Allowlists, a)
		}
	}
	cfg, err := g.Translate()
	if err != nil {
		return config.Config{}, fmt.Errorf("gitleaks' global allowlists: %w", err)
	}
	return cfg, nil
}

// usable keeps the allowlists that can be judged without a path or commit.
func usable(als []*config.Allowlist) []*config.Allowlist {
	var out []*config.Allowlist
	for _, a := range als {
		if a != nil && len(a.Paths) == 0 && len(a.Commits) == 0 {
			out = append(out, a)
		}
	}
	return out
}

// simplified parses a rule's regex, simplified, once for maxLen and
// minTokRun (each parsed it for itself: gitleaks' 200 rules, some of them
// long alternations, cost a local run that twice); nil when it does not
// parse, which both read as "unknown".
func simplified(expr string) *syntax.Regexp {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil
	}
	return re.Simplify()
}

// maxLen is the longest match of a simplified regex in bytes, and whether it
// is bounded.
func maxLen(re *syntax.Regexp) (int, bool) {
	if re == nil {
		return 0, false
	}
	n := maxLenOf(re)
	return n, n >= 0
}

// maxLenOf returns -1 for unbounded.
func maxLenOf(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpLiteral:
		n := 0
		for _, r := range re.Rune {
			n += runeLen(r)
		}
		return n
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		if re.Op == syntax.OpCharClass && len(re.Rune) > 0 && re.Rune[len(re.Rune)-1] < 0x80 {
			return 1
		}
		return 4
	case syntax.OpStar, syntax.OpPlus:
		return -1
	case syntax.OpQuest, syntax.OpCapture:
		return maxLenOf(re.Sub[0])
	case syntax.OpRepeat:
		if re.Max < 0 {
			return -1
		}
		n := maxLenOf(re.Sub[0])
		if n < 0 {
			return -1
		}
		return n * re.Max
	case syntax.OpConcat:
		sum := 0
		for _, s := range re.Sub {
			n := maxLenOf(s)
			if n < 0 {
				return -1
			}
			sum += n
		}
		return sum
	case syntax.OpAlternate:
		m := 0
		for _, s := range re.Sub {
			n := maxLenOf(s)
			if n < 0 {
				return -1
			}
			m = max(m, n)
		}
		return m
	default: // empty-width assertions, empty match
		return 0
	}
}

// assignmentRule tells gitleaks' "keyword, operator, value" rules (made by
// its GenerateSemiGenericRegex, generic-api-key among them) from a rule's
// source and the newlines a match may hold: only the 3 bytes of [\s'"]
// before the operator, the 5 of [`'"\s=] after it and the one after the
// value may hold one. Whether the keyword is the name before the operator
// or the start of the value (lob's "live_"), a match crosses a line only
// where the keyword's line ends or starts within assignmentReach bytes of
// the keyword (20 of [ \t\w.-], 3 of [\s'"], an operator of up to 3 and 5
// of [`'"\s=]); nowhere else does it need the lines around. gitleaks found
// "api_key:\n  <value>" (YAML) where the redactor, trying these rules on
// the keyword's line, did not.
func assignmentRule(src string, newlines int) bool {
	return newlines == 9 &&
		strings.HasPrefix(strings.TrimPrefix(src, "(?i)"), `[\w.-]{0,50}?`) &&
		strings.Contains(src, `(?:[ \t\w.-]{0,20})[\s'"]{0,3}`) &&
		strings.Contains(src, `(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)[\x60'"\s=]{0,5}`) &&
		strings.HasSuffix(src, `(?:[\x60'"\s;]|\\[nr]|$)`)
}

// assignmentReach is how far after its keyword's end a newline in a match
// of an assignmentRule can be, and how far before its keyword's start.
const assignmentReach = 20 + 3 + 3 + 5

// newlinesOf is how many newlines a match of a simplified regex may hold
// at most, -1 for any number (or a regex that did not parse). The rules
// used to be tried on the keyword's line unless their source named \n,
// \s\S or (?s); but \s matches a newline too, and gitleaks' rules found
// "api_key:\n  <value>" (YAML) where the redactor did not.
func newlinesOf(re *syntax.Regexp) int {
	if re == nil {
		return -1
	}
	switch re.Op {
	case syntax.OpLiteral:
		n := 0
		for _, r := range re.Rune {
			if r == '\n' {
				n++
			}
		}
		return n
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			if re.Rune[i] <= '\n' && '\n' <= re.Rune[i+1] {
				return 1
			}
		}
		return 0
	case syntax.OpAnyChar:
		return 1
	case syntax.OpStar, syntax.OpPlus:
		if newlinesOf(re.Sub[0]) != 0 {
			return -1
		}
		return 0
	case syntax.OpQuest, syntax.OpCapture:
		return newlinesOf(re.Sub[0])
	case syntax.OpRepeat:
		n := newlinesOf(re.Sub[0])
		switch {
		case n == 0:
			return 0
		case n < 0 || re.Max < 0:
			return -1
		}
		return n * re.Max
	case syntax.OpConcat, syntax.OpAlternate:
		total := 0
		for _, sub := range re.Sub {
			n := newlinesOf(sub)
			if n < 0 {
				return -1
			}
			if re.Op == syntax.OpConcat {
				total += n
			} else {
				total = max(total, n)
			}
		}
		return total
	default: // empty-width assertions, the empty match, AnyCharNotNL
		return 0
	}
}

func runeLen(r rune) int {
	switch {
	case r < 0x80:
		return 1
	case r < 0x800:
		return 2
	case r < 0x10000:
		return 3
	}
	return 4
}

// assignmentFollows is a necessary condition of gitleaks' generic-api-key
// rule, whose regex is by far the slowest to run: after its keyword come at
// most 20 of [ \t\w.-] and 3 of [\s'"], then an operator (= > : || => ?=
// ,), at most 5 of [`'"\s=], then a value of at least 10 token characters.
// Where no operator follows the keyword end ke within 24 bytes, or no such
// value follows the operator, the rule cannot match and its regex is not
// run. A newline may come between them (\s): the filter does not stop at
// one. (It assumes the gap is ASCII: (?i) lets \w match the Kelvin sign and
// the long s, of two and three bytes, which no real output puts there.)
func assignmentFollows(buf []byte, ke int) bool {
	end := min(ke+24, len(buf))
	p := -1
	for i, c := range buf[ke:end] {
		if isOperator[c] {
			p = ke + i
			break
		}
	}
	if p < 0 {
		return false
	}
	q := p + 1
	for n := 0; q < len(buf) && n < 3 && isOperator[buf[q]]; n++ {
		q++
	}
	for n := 0; q < len(buf) && n < 5 && isQuoteOrSpace[buf[q]]; n++ {
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

// byteSet is a set of bytes as a table, for the filter's classes.
func byteSet(chars string) (t [256]bool) {
	for i := 0; i < len(chars); i++ {
		t[chars[i]] = true
	}
	return t
}

var (
	// isOperator holds the bytes that begin one of generic-api-key's
	// operators, and those that may follow them.
	isOperator = byteSet("=>:|,?")
	// isQuoteOrSpace is what may stand between the operator and the value.
	isQuoteOrSpace = byteSet("`'\" \t\r\n\f\v")
)

// isTok is the class of characters tokens are made of, and every byte of a
// character beyond ASCII: (?i) lets gitleaks' [a-z] and \w match the Kelvin
// sign and the long s, and gitleaks finds a "token" spelled with them, so
// the token-run filters must not rule out a window that holds them.
var isTok = func() (t [256]bool) {
	for c := 0; c < 256; c++ {
		t[c] = c >= 0x80 || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("+/=_.-~", byte(c)) >= 0
	}
	return t
}()

// minTokRun is a lower bound of the longest run of token characters in any
// match of re (0 when nothing is known).
func minTokRun(re *syntax.Regexp) int {
	if re == nil {
		return 0
	}
	best, _, _, _ := tokRun(re)
	return best
}

// tokRun returns, for the matches of re, lower bounds of: the longest token
// run inside, the run it starts with, the run it ends with, and whether the
// whole match is made of token characters (then all three equal its
// minimum length).
func tokRun(re *syntax.Regexp) (best, prefix, suffix int, all bool) {
	switch re.Op {
	case syntax.OpLiteral:
		run, first, allTok := 0, -1, true
		for i, r := range re.Rune {
			if r < 256 && isTok[r] {
				run++
				best = max(best, run)
			} else {
				if first < 0 {
					first = i
				}
				allTok = false
				run = 0
			}
		}
		if allTok {
			return len(re.Rune), len(re.Rune), len(re.Rune), true
		}
		return best, first, run, false
	case syntax.OpCharClass:
		// Only ASCII members count: (?i) adds the Kelvin sign and long s to
		// [a-z], which no real token uses.
		ascii := false
		for i := 0; i+1 < len(re.Rune); i += 2 {
			for r := re.Rune[i]; r <= re.Rune[i+1] && r < 0x80; r++ {
				if !isTok[r] {
					return 0, 0, 0, false
				}
				ascii = true
			}
		}
		if !ascii {
			return 0, 0, 0, false
		}
		return 1, 1, 1, true
	case syntax.OpCapture:
		return tokRun(re.Sub[0])
	case syntax.OpRepeat, syntax.OpPlus:
		minN := re.Min
		if re.Op == syntax.OpPlus {
			minN = 1
		}
		if minN == 0 {
			return 0, 0, 0, false
		}
		b, p, s, a := tokRun(re.Sub[0])
		if a {
			return b * minN, b * minN, b * minN, true
		}
		return max(b, s+p), p, s, false
	case syntax.OpConcat:
		allSoFar := true
		cur := 0
		for _, sub := range re.Sub {
			b, p, s, a := tokRun(sub)
			if a {
				cur += b
				best = max(best, cur)
				if allSoFar {
					prefix = cur
				}
				continue
			}
			best = max(best, b, cur+p)
			if allSoFar {
				prefix = cur + p
			}
			allSoFar = false
			cur = s
			best = max(best, cur)
		}
		if allSoFar {
			return cur, cur, cur, true
		}
		return best, prefix, cur, false
	case syntax.OpAlternate:
		first := true
		all = true
		for _, sub := range re.Sub {
			b, p, s, a := tokRun(sub)
			if first {
				best, prefix, suffix, all, first = b, p, s, a, false
				continue
			}
			best, prefix, suffix, all = min(best, b), min(prefix, p), min(suffix, s), all && a
		}
		if all {
			// Different lengths: only the shortest is certain.
			return best, best, best, false
		}
		return best, prefix, suffix, false
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		// Zero width: transparent for runs.
		return 0, 0, 0, true
	}
	// Star, Quest, AnyChar ...: nothing certain.
	return 0, 0, 0, false
}

// hasRun reports whether b holds a run of at least n token characters.
// Any n consecutive bytes include one of the bytes at n-1, 2n-1, 3n-1, ...
// of b, so a run that long goes through one of them: only the runs
// through those bytes are measured, not every byte of b. Windows are
// checked against rules' minRun (22 for JWTs, 26 for Vault tokens, the
// keywords most often hit in ordinary text), so most bytes are skipped.
func hasRun(b []byte, n int) bool {
	for p := n - 1; p < len(b); p += n {
		if !isTok[b[p]] {
			continue
		}
		s := p // the run through p: back to its start, at most n bytes
		for s > 0 && p-s+1 < n && isTok[b[s-1]] {
			s--
		}
		e := p + 1 // and on until it is n long or ends
		for e < len(b) && e-s < n && isTok[b[e]] {
			e++
		}
		if e-s >= n {
			return true
		}
	}
	return false
}

// lastNewline is bytes.LastIndexByte(b, '\n'), eight bytes at a time
// (the standard library's is a byte loop): finding the line of each
// keyword hit was an eighth of a scan of ordinary text.
func lastNewline(b []byte) int {
	const ones, highs, nl = 0x0101010101010101, 0x8080808080808080, 0x0a0a0a0a0a0a0a0a
	i := len(b)
	for ; i >= 8; i -= 8 {
		x := binary.LittleEndian.Uint64(b[i-8:i]) ^ nl
		// Non-zero when one of the eight bytes is a newline (a zero in x);
		// which one is found bytewise, below.
		if (x-ones)&^x&highs != 0 {
			break
		}
	}
	for i--; i >= 0; i-- {
		if b[i] == '\n' {
			return i
		}
	}
	return -1
}

// scratch is per-Writer memory reused between scans.
type scratch struct {
	spans []span
	hits  []kwHit // the keyword ends in the buffer, from Redactor.search
	// The second half's, while the halves are searched at once.
	spans2 []span
	hits2  []kwHit
	lanes  [2]kwLanes
	// The windows the rules are to look at (ruleSet.candidates), and the
	// second half's while the halves are searched at once.
	cands, cands2 []window
	open          []window // per rule: the window being gathered
	wins          []window
}

type window struct{ rule, s, e int }

// lineCache finds the line around a keyword, as far as maxRuleSpan on
// either side: [S, E) with S after the last newline before the keyword, or
// maxRuleSpan before it, and E at the first newline after it, or
// maxRuleSpan after it (never past the buffer).
//
// The answer depends only on where the keyword is. It keeps a stretch of
// the buffer known to hold no newline, [a, b), and whether a newline (or
// the buffer's edge) is known to bound it, and answers from it where that
// decides the answer. An answer carried over from an earlier keyword
// instead once cut a later keyword's window short on a line longer than
// maxRuleSpan, and a token placed there was not redacted.
//
// Where the stretch does not decide, it is extended by searching only
// what lies beyond it, so that the keywords of a long line cost one pass
// over it, not a search of maxRuleSpan bytes each (output made of nothing
// but keywords, on one line, must not cost the node-agent more than its
// length).
type lineCache struct {
	a, b         int
	edgeA, edgeB bool // a newline or the buffer's edge is at a-1, b
	searched     bool
	scanned      int // bytes searched so far (tests hold it to the buffer's length)
}

func (c *lineCache) bounds(buf []byte, ks, ke int) (s, e int) {
	if s, e, ok := c.known(ks, ke); ok {
		return s, e
	}
	n := len(buf)
	if !c.searched || ks < c.a || ks > c.b {
		// Another line, or a part of this one not next to the stretch:
		// start a new stretch at the keyword (it holds no newline).
		c.a, c.b, c.edgeA, c.edgeB, c.searched = ks, ke, ks == 0, ke == n, true
	}
	// The keyword lies in [a, b] with [a, b) free of newlines: extend it.
	if from := max(0, ks-maxRuleSpan); from < c.a && !c.edgeA {
		c.scanned += c.a - from
		if p := lastNewline(buf[from:c.a]); p >= 0 {
			c.a, c.edgeA = from+p+1, true
		} else {
			c.a, c.edgeA = from, from == 0
		}
	}
	if to := min(n, ke+maxRuleSpan); to > c.b && !c.edgeB {
		c.scanned += to - c.b
		if q := bytes.IndexByte(buf[c.b:to], '\n'); q >= 0 {
			c.b, c.edgeB = c.b+q, true
		} else {
			c.b, c.edgeB = to, to == n
		}
	}
	s, e, _ = c.known(ks, ke)
	return s, e
}

// known answers from the stretch when it decides the answer.
func (c *lineCache) known(ks, ke int) (s, e int, ok bool) {
	if !c.searched || ks < c.a || ke > c.b {
		return 0, 0, false
	}
	switch {
	case ks-maxRuleSpan >= c.a:
		s = ks - maxRuleSpan // no newline within reach before
	case c.edgeA:
		s = c.a
	default:
		return 0, 0, false
	}
	switch {
	case ke+maxRuleSpan <= c.b:
		e = ke + maxRuleSpan // no newline within reach after
	case c.edgeB:
		e = c.b
	default:
		return 0, 0, false
	}
	return s, e, true
}

// candidates appends, in the order of hits, the window of each rule a
// keyword end in hits calls for: the keyword's line, the lines around it
// that a match of the rule may reach (rule.lines), or the rule's whole
// reach around it, in buf, for rules whose match could
// reach past the context already written (buf[:ctx]) and whose hit filter
// passes. It depends only on buf, ctx and the hits (lineCache answers
// from the keyword's position alone), so each half of a long buffer
// computes its own (Redactor.search), on its own goroutine.
func (rs *ruleSet) candidates(buf []byte, ctx int, hits []kwHit, out []window) []window {
	n := len(buf)
	var line lineCache
	var lines lineIndex
	for _, h := range hits {
		ke := int(h.end)
		for _, pattern := range rs.kw.patterns(h) {
			ks := ke - rs.kw.patLen[pattern]
			// The line is found for the first rule that wants a window:
			// most keyword ends in an agent's output (its "input_tokens")
			// fail generic-api-key's filter and need none.
			lineS, lineE := -1, -1
			for _, ri := range rs.kwRules[pattern] {
				ru := rs.rules[ri]
				if ke+ru.span <= ctx {
					continue // wholly in what was already written
				}
				if ru.hitFilter != nil && !ru.hitFilter(buf, ke) {
					continue
				}
				s, e := max(0, ks-ru.span), min(n, ke+ru.span)
				switch {
				case ru.lines == 0:
					if lineS < 0 {
						lineS, lineE = line.bounds(buf, ks, ke)
					}
					s, e = max(s, lineS), min(e, lineE)
				case ru.lines > 0:
					if lineS < 0 {
						lineS, lineE = line.bounds(buf, ks, ke)
					}
					s, e = max(s, lineS), min(e, lineE)
					down, up := lineE < n && lineE-ke <= assignmentReach, lineS > 0 && ks-lineS <= assignmentReach
					if down || up {
						as, ae := lines.around(buf, ks, ke, ru.span, ru.lines)
						if down {
							e = ae
						}
						if up {
							s = as
						}
					}
				}
				out = append(out, window{rule: ri, s: s, e: e})
			}
		}
	}
	return out
}

// lineIndex finds, for rules whose matches may hold a few newlines, the
// lines around a keyword: from the start of the line n lines above the
// keyword's to the end of the line n lines below, within the rule's span.
// It depends only on the keyword's position, like lineCache. It records
// the newlines of buf once, from a rule's reach before the first keyword
// it is asked about, and only as far on as it is asked, so that the
// keywords of a buffer cost one pass over it however many there are.
type lineIndex struct {
	started  bool
	from, to int   // the newlines of buf[from:to] are in nl
	nl       []int // in order
	searched int   // keywords answered by aroundBySearch (tests hold it to 0)
}

// lineIndexSlack is how far before the longest reach of the first keyword
// it is asked about the index starts, so that a later keyword end with a
// longer keyword (whose reach begins a little earlier) still finds its
// newlines in it. A rule's reach is at most maxRuleSpan, so every later
// keyword's lines are in the index, and the search (aroundBySearch, which
// could cost the lines around each keyword) is only a safeguard.
const lineIndexSlack = 256

func (x *lineIndex) around(buf []byte, ks, ke, span, lines int) (s, e int) {
	lo, hi := max(0, ks-span), min(len(buf), ke+span)
	if !x.started {
		x.started, x.from = true, max(0, ks-maxRuleSpan-lineIndexSlack)
		x.to = x.from
	}
	if lo < x.from {
		x.searched++
		return aroundBySearch(buf, ks, ke, span, lines)
	}
	// Record the newlines up to ke, then until lines+1 of them lie at or
	// after it, or up to hi.
	x.record(buf, ke)
	q := sort.SearchInts(x.nl, ke)
	for x.to < hi && len(x.nl)-q <= lines {
		x.recordOne(buf, hi)
	}
	s, e = lo, hi
	if p := sort.SearchInts(x.nl, ks) - lines - 1; p >= 0 && x.nl[p] >= lo {
		s = x.nl[p] + 1
	}
	if q += lines; q < len(x.nl) && x.nl[q] < hi {
		e = x.nl[q]
	}
	return s, e
}

// record records the newlines of buf up to end.
func (x *lineIndex) record(buf []byte, end int) {
	for x.to < end {
		x.recordOne(buf, end)
	}
}

// recordOne records the next newline before end, or moves to end.
func (x *lineIndex) recordOne(buf []byte, end int) {
	i := bytes.IndexByte(buf[x.to:end], '\n')
	if i < 0 {
		x.to = end
		return
	}
	x.nl = append(x.nl, x.to+i)
	x.to += i + 1
}

// aroundBySearch is lineIndex.around by searching buf: what the index
// answers, for a keyword before where it starts.
func aroundBySearch(buf []byte, ks, ke, span, lines int) (s, e int) {
	lo, hi := max(0, ks-span), min(len(buf), ke+span)
	s, e = lo, hi
	for i, left := ks-1, lines+1; i >= lo; i-- {
		if buf[i] == '\n' {
			if left--; left == 0 {
				s = i + 1
				break
			}
		}
	}
	for i, left := ke, lines+1; i < hi; i++ {
		if buf[i] == '\n' {
			if left--; left == 0 {
				e = i
				break
			}
		}
	}
	return s, e
}

// find appends the spans of rule matches in buf within the windows in
// sc.cands (candidates, for the keyword ends in buf; Redactor.search): a
// rule's overlapping windows are merged, in order, and the rule runs once
// on each merged window.
func (rs *ruleSet) find(buf []byte, keep [][]byte, sc *scratch, spans []span) []span {
	if cap(sc.open) < len(rs.rules) {
		sc.open = make([]window, len(rs.rules))
	}
	open := sc.open[:len(rs.rules)]
	for i := range open {
		open[i] = window{rule: i, s: -1}
	}
	wins := sc.wins[:0]
	for _, c := range sc.cands {
		o := &open[c.rule]
		if o.s >= 0 && c.s <= o.e {
			// A later keyword's window may begin before an earlier one's:
			// the lines above it (rule.lines), a longer keyword ending
			// just after, or the second half's first window.
			o.s, o.e = min(o.s, c.s), max(o.e, c.e)
			continue
		}
		if o.s >= 0 {
			wins = append(wins, *o)
		}
		*o = c
	}
	for _, o := range open {
		if o.s >= 0 {
			wins = append(wins, o)
		}
	}
	sc.wins = wins
	// Windows of one line repeat across rules: the answer for the last one
	// is kept with the length it was asked for (a run at least that long
	// answers shorter ones; none answers longer ones).
	lastS, lastE, lastN, lastHas := -1, -1, 0, false
	for _, w := range wins {
		ru := rs.rules[w.rule]
		if n := ru.minRun; n > 0 {
			known := w.s == lastS && w.e == lastE && (lastHas && n <= lastN || !lastHas && n >= lastN)
			if !known {
				lastS, lastE, lastN, lastHas = w.s, w.e, n, hasRun(buf[w.s:w.e], n)
			}
			if !lastHas {
				continue
			}
		}
		spans = ru.match(buf, w.s, w.e, rs.allowlist, keep, spans)
	}
	return spans
}

// match runs the rule on buf[s:e] and appends the secrets it accepts. A
// rule or an allowlist that gitleaks' Translate refused (never gitleaks'
// own configuration: TestRulesAreTranslatedAsAWhole) fails closed: the
// whole window is a secret, and no allowlist spares a match.
func (ru *rule) match(buf []byte, s, e int, global func() ([]*config.Allowlist, error), keep [][]byte, spans []span) []span {
	cr, err := ru.compiled()
	if err != nil {
		return append(spans, span{s: s, e: e, tag: ru.id})
	}
	gl, _ := global()

	for _, m := range cr.re.FindAllSubmatchIndex(buf[s:e], -1) {
		g := ru.secretGroup
		if g == 0 {
			for i := 1; i < len(m)/2; i++ {
				if m[2*i] >= 0 && m[2*i+1] > m[2*i] {
					g = i
					break
				}
			}
		}
		if 2*g+1 >= len(m) || m[2*g] < 0 || m[2*g+1] <= m[2*g] {
			continue
		}
		secret := buf[s+m[2*g] : s+m[2*g+1]]
		if ru.entropy > 0 && shannon(secret) < ru.entropy {
			continue
		}
		if kept(secret, keep) || allowed(secret, buf[s+m[0]:s+m[1]], cr.allowlists) || allowed(secret, buf[s+m[0]:s+m[1]], gl) {
			continue
		}
		spans = append(spans, span{s: s + m[2*g], e: s + m[2*g+1], tag: ru.id})
	}
	return spans
}

func kept(secret []byte, keep [][]byte) bool {
	for _, k := range keep {
		if bytes.Contains(secret, k) {
			return true
		}
	}
	return false
}

// allowed applies gitleaks' regex and stop-word allowlists. Conditions are
// taken as OR, and a "line" target is judged on the match: redacting a
// little more than gitleaks would report is the safe side.
func allowed(secret, match []byte, als []*config.Allowlist) bool {
	for _, a := range als {
		target := secret
		if a.RegexTarget == "match" || a.RegexTarget == "line" {
			target = match
		}
		if a.RegexAllowed(string(target)) {
			return true
		}
		if ok, _ := a.ContainsStopWord(string(secret)); ok {
			return true
		}
	}
	return false
}

func shannon(b []byte) float64 {
	if len(b) == 0 {
		return 0
	}
	var counts [256]int
	for _, c := range b {
		counts[c]++
	}
	h := 0.0
	n := float64(len(b))
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h
}
