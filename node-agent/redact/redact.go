// Package redact removes a run's credential values and common token formats
// from everything the node-agent stores or shows: the agent's output,
// artifacts, status messages and events. It runs before anything is hashed.
//
// What is removed:
//   - each credential value given in Options.Secrets and, when a value is a
//     JSON, TOML or INI document (a credential file such as Codex's
//     auth.json), each string value inside it of at least MinFieldLen bytes
//     (see FieldValues), as written raw,
//     JSON-escaped (with and without HTML escaping), URL-quoted (query and
//     path forms), lower- and upper-cased, reversed, hex-encoded (lower and
//     upper case; also with each byte escaped as %XX, \xXX or \u00XX) and base64-encoded (standard and URL alphabets, padded or
//     not, at each of the three byte alignments a value can have inside a
//     longer encoded stream, so a secret base64-encoded as part of a larger
//     blob is found too), replaced by "[REDACTED]";
//   - tokens matched by gitleaks' default rule set (github.com/zricethezav/
//     gitleaks/v8, about 220 rules: cloud keys, GitHub/GitLab/Slack tokens,
//     private keys, JWTs, generic "api_key = ..." assignments with high
//     entropy, ...), replaced by "[REDACTED:<rule id>]". gitleaks' keyword
//     prefilter, secret groups, entropy thresholds and stop-word and regex
//     allowlists apply; path- and commit-based allowlists do not (output has
//     no path), and rules that only make sense for a file path are skipped.
//     Values in Options.Keep (the run's MCP token) are never removed by a
//     rule. A rule is tried around each of its keywords: on the keyword's
//     line, or, where its regex lets a match hold n newlines (gitleaks'
//     "keyword = value" rules allow a few \s between the two, so a YAML
//     "api_key:" with its value on the next line is found), on the n lines
//     above and below it as well. test/gitleaks checks that nothing
//     gitleaks' own detector finds in samples of each of its rules is left.
//
// Streaming. A Writer holds back the last Window() bytes of what it was
// given, because a secret can be split across writes (even one byte per
// write); whatever is before that window and cannot be the start of a
// secret is redacted and passed on in batches. Memory is bounded by a batch
// (256 KiB, growing to 1 MiB for a stream that fills batches) plus twice the
// window, twice over while a long batch is written out behind the stream
// (see Writer.emit), whatever the stream's length. A token rule's match
// longer than the window (an unbounded regex) can only be recognised within
// it.
//
// A Redactor is immutable and safe for concurrent use; a Writer is not: give
// each stream its own Writer, or serialize its writes.
package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
)

// Options say what to remove.
type Options struct {
	// Secrets are the run's credential values. Empty values are ignored; a
	// value that is a credential file is redacted whole and field by field.
	Secrets []string
	// Keep are values a token rule must not remove (the MCP token, whose
	// presence in the output is the point).
	Keep []string
	// NoRules turns off the token-format rules: only Secrets are removed.
	NoRules bool
}

// Redactor removes a run's secrets. Build it once per run with New.
type Redactor struct {
	needles [][]byte // literal forms of the secrets, longest first
	lits    *literals
	repl    []byte
	rules   *ruleSet
	keep    [][]byte
	window  int
	// untagged: rule matches are replaced without their rule id.
	untagged bool
}

// minForm is the shortest derived (encoded) form searched for: a shorter
// fragment of an encoding would match ordinary text. The raw value is
// always searched for, however short.
const minForm = 6

// New builds a Redactor. It fails only when the secrets contain every
// candidate replacement's delimiters (see replacement).
func New(opts Options) (*Redactor, error) {
	r := &Redactor{}
	seen := map[string]bool{}
	var values []string
	for _, s := range opts.Secrets {
		if s == "" {
			continue
		}
		values = append(values, s)
		// A Secret made from a file (kubectl create secret --from-file)
		// usually ends in a newline that the agent need not print: the
		// value without the white space around it is the secret too.
		if t := strings.TrimSpace(s); t != "" && t != s {
			values = append(values, t)
		}
		// A credential file's fields may be printed alone.
		values = append(values, FieldValues([]byte(s))...)
	}
	for _, s := range values {
		for i, f := range Forms(s) {
			if (i > 0 && len(f) < minForm) || seen[f] {
				continue
			}
			seen[f] = true
			r.needles = append(r.needles, []byte(f))
		}
	}
	sort.Slice(r.needles, func(i, j int) bool { return len(r.needles[i]) > len(r.needles[j]) })
	r.lits = newLiterals(r.needles)
	repl, err := replacement(r.needles)
	if err != nil {
		return nil, err
	}
	r.repl = repl
	for _, k := range opts.Keep {
		if k != "" {
			r.keep = append(r.keep, []byte(k))
		}
	}
	if !opts.NoRules {
		rs, err := defaultRules()
		if err != nil {
			return nil, fmt.Errorf("loading gitleaks rules: %w", err)
		}
		r.rules = rs
		// A secret inside a tagged replacement could be rebuilt from it:
		// then rule matches get the plain replacement.
		for _, ru := range rs.rules {
			tagged := r.replacementFor(span{tag: ru.id})
			for _, n := range r.needles {
				if bytes.Contains(tagged, n) {
					r.untagged = true
				}
			}
		}
	}
	for _, n := range r.needles {
		r.window = max(r.window, len(n))
	}
	if r.rules != nil {
		r.window = max(r.window, r.rules.window)
	}
	return r, nil
}

// Window is how many bytes a Writer holds back: the longest secret form or
// rule match it must see whole.
func (r *Redactor) Window() int { return r.window }

// partialStart is the index of the longest tail of p that is a proper
// prefix of a secret's form (len(p) when none is): where a secret may have
// begun without having ended yet.
func (r *Redactor) partialStart(p []byte) int {
	start := len(p)
	for _, n := range r.needles {
		for i := max(0, len(p)-len(n)+1); i < start; i++ {
			if bytes.HasPrefix(n, p[i:]) {
				start = i
				break
			}
		}
	}
	return start
}

// CutShort returns s, a text cut short, redacted and without its longest
// tail that is a proper prefix of a secret's form: the cut may have gone
// through a secret, and what it left of it is no match for the redactor.
func (r *Redactor) CutShort(s string) string {
	s = r.String(s)
	return strings.ToValidUTF8(s[:r.partialStart([]byte(s))], "")
}

// Forms returns the ways a value may appear in output: raw first, then
// JSON-escaped, URL-quoted, hex and base64 forms (deduplicated).
func Forms(s string) []string {
	forms := []string{s}
	add := func(f string) {
		for _, g := range forms {
			if g == f {
				return
			}
		}
		if f != "" {
			forms = append(forms, f)
		}
	}
	if j, err := json.Marshal(s); err == nil {
		add(string(j[1 : len(j)-1]))
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(s) == nil {
		j := bytes.TrimSpace(b.Bytes())
		add(string(j[1 : len(j)-1]))
	}
	// JSON with "/" escaped as "\/" (PHP's json_encode, some Java and
	// JavaScript serializers): a key with a slash (an AWS secret key's)
	// printed by such a tool.
	if j, err := json.Marshal(s); err == nil {
		add(strings.ReplaceAll(string(j[1:len(j)-1]), "/", `\/`))
	}
	add(url.QueryEscape(s))
	add(url.PathEscape(s))
	// Percent-escapes with lower-case hex digits, as RFC 3986 allows and
	// some encoders write them (%2f, %2b).
	add(lowerPercentHex(url.QueryEscape(s)))
	add(lowerPercentHex(url.PathEscape(s)))
	// Lower- and upper-cased: a host name is compared and reported in
	// lower case (the egress proxy reported a mixed-case key the agent put
	// in a URL's host lower-cased, in status.network.deniedHosts, the
	// receipt, the EgressDenied Event and the refusal the agent printed),
	// and so do URL libraries, DNS tools and case-insensitive headers.
	add(strings.ToLower(s))
	add(strings.ToUpper(s))
	// Hex, in either case, as a debugging dump prints it on one line. (A
	// form cut by a line break or spaced out is not recognised: xxd -p
	// wraps at 60 characters, base64 at 76, od spaces bytes; docs/sandbox.md.)
	h := hex.EncodeToString([]byte(s))
	add(h)
	add(strings.ToUpper(h))
	// Every byte escaped, as a string literal or a URL can carry it
	// (printf '\x73\x6b', Python's and JavaScript's "\u0073", a URL
	// encoder that escapes all): one step from the value for an agent
	// that means to get it past the redactor, none for the reader.
	for _, pre := range []string{"%", `\x`, `\u00`} {
		add(escapeBytes(s, pre, false))
		add(escapeBytes(s, pre, true))
	}
	// And reversed (rev, [::-1]).
	r := []byte(s)
	slices.Reverse(r)
	add(string(r))
	// base64 at each alignment: the secret preceded by k bytes of something
	// else. Only the characters whose six bits all come from the secret are
	// the same whatever surrounds it.
	n := len(s)
	for k := 0; k < 3; k++ {
		from := (8*k + 5) / 6
		to := (8 * (k + n)) / 6
		if to <= from {
			continue
		}
		in := append(make([]byte, k), s...)
		for _, e := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			add(e.EncodeToString(in)[from:to])
		}
	}
	return forms
}

// lowerPercentHex is s with the hex digits of each percent-escape in lower
// case.
func lowerPercentHex(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = lower(b[i+1]), lower(b[i+2])
			i += 2
		}
	}
	return string(b)
}

// escapeBytes writes each byte of s as pre and two hex digits, upper case
// when upper.
func escapeBytes(s, pre string, upper bool) string {
	digits := "0123456789abcdef"
	if upper {
		digits = "0123456789ABCDEF"
	}
	var b strings.Builder
	b.Grow(len(s) * (len(pre) + 2))
	for i := 0; i < len(s); i++ {
		b.WriteString(pre)
		b.WriteByte(digits[s[i]>>4])
		b.WriteByte(digits[s[i]&15])
	}
	return b.String()
}

// replacement picks "[REDACTED]" or, when a secret form contains its
// delimiters or lies within it, another delimiter pair, so that a secret
// can never be rebuilt from a replacement and the text around it.
func replacement(needles [][]byte) ([]byte, error) {
	pairs := []string{"[]", "{}", "<>", "()", "##", "**", "||", "~~", "^^", "@@"}
next:
	for _, p := range pairs {
		cand := []byte(string(p[0]) + "REDACTED" + string(p[1]))
		for _, n := range needles {
			if bytes.IndexByte(n, p[0]) >= 0 || bytes.IndexByte(n, p[1]) >= 0 || bytes.Contains(cand, n) {
				continue next
			}
		}
		return cand, nil
	}
	return nil, errors.New("redact: every replacement delimiter occurs in a secret; cannot redact safely")
}

// Bytes returns b redacted.
func (r *Redactor) Bytes(b []byte) []byte {
	var out bytes.Buffer
	out.Grow(len(b))
	w := r.NewWriter(&out)
	_, _ = w.Write(b)
	_ = w.Close()
	return out.Bytes()
}

// String returns s redacted, for status messages, conditions and events.
func (r *Redactor) String(s string) string {
	if s == "" {
		return s
	}
	return string(r.Bytes([]byte(s)))
}

// span is a part of the buffer to replace; tag is the rule id ("" for a
// secret).
type span struct {
	s, e int
	tag  string
}

// splitMin is the shortest buffer whose search is split between two
// goroutines.
const splitMin = 64 << 10

// search returns the spans of every secret form in buf (in sc.spans's
// memory) and, when the token rules are on, puts the keywords' ends in
// sc.hits, in order, and the windows the rules are to look at for them in
// sc.cands (ruleSet.candidates; ctx is where the bytes not yet written out
// begin).
//
// With split, a long buffer is searched in two halves at once, on two
// goroutines: the search is most of a redactor's work, and the output of
// an agent that writes fast is one stream, so without this it could use
// one core only. Each half does all three (secrets, keywords, windows),
// so that the two goroutines have the same work. On a node whose cores are
// busy the second goroutine waits for a free one and the halves run one
// after the other.
func (r *Redactor) search(buf []byte, ctx int, sc *scratch, split bool) []span {
	n := len(buf)
	rs := r.rules
	if n < splitMin || n >= 1<<31 || !split {
		if rs != nil {
			sc.hits = rs.kw.hitsIn(buf, 0, n, sc.hits[:0], &sc.lanes[0])
			sc.cands = rs.candidates(buf, ctx, sc.hits, sc.cands[:0])
		}
		return r.lits.find(buf, sc.spans[:0])
	}
	mid := n / 2
	done := make(chan struct{})
	go func() {
		defer close(done)
		if rs != nil {
			sc.hits2 = rs.kw.hitsIn(buf, mid, n, sc.hits2[:0], &sc.lanes[1])
			sc.cands2 = rs.candidates(buf, ctx, sc.hits2, sc.cands2[:0])
		}
		sc.spans2 = r.lits.findIn(buf, mid, n, sc.spans2[:0])
	}()
	if rs != nil {
		sc.hits = rs.kw.hitsIn(buf, 0, mid, sc.hits[:0], &sc.lanes[0])
		sc.cands = rs.candidates(buf, ctx, sc.hits, sc.cands[:0])
	}
	spans := r.lits.findIn(buf, 0, mid, sc.spans[:0])
	<-done
	sc.hits = append(sc.hits, sc.hits2...)
	sc.cands = append(sc.cands, sc.cands2...)
	return append(spans, sc.spans2...)
}

// replacementFor is the text that stands for a span.
func (r *Redactor) replacementFor(sp span) []byte {
	if sp.tag == "" || r.untagged {
		return r.repl
	}
	return []byte(strings.TrimSuffix(string(r.repl), string(r.repl[len(r.repl)-1])) + ":" + sp.tag + string(r.repl[len(r.repl)-1]))
}
