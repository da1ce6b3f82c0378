package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
)

// The gateway puts the run's key on each request so that the agent never
// holds it; a provider that echoes what it was sent would hand it back.
// Providers do echo parts of it: OpenAI's 401 names the refused key as
// "sk-proj-****…abcd", others "sk-…abcd", and a provider's proxy, a debug
// endpoint the agent chooses the path of, or an error page may echo a
// header whole. So every answer the agent gets through the gateway is
// read for the key, and for its last characters behind a mask, and those
// bytes are masked: '*' for each, so that a Content-Length still holds
// and a stream is not held up (only a tail that may begin a pattern is
// held until the next read). A provider that answers in an encoding the
// gateway did not ask for (it asks for gzip and decodes it) is passed on
// as it came, as its usage is: it cannot be read.

// minScrubbedKey is the shortest key looked for: a shorter "key" (a local
// model server's placeholder) would mask ordinary words.
const minScrubbedKey = 8

// keyTail is how many of the key's last characters a mask may show
// (OpenAI shows four), looked for only behind a mask's character: that
// many characters alone are common words.
const keyTail = 4

// keyPatterns are what is masked in answers for key: the key itself and,
// for a key long enough that its tail is a small part of it, its tail
// behind each mask a provider writes ("****", "...", "…"). A mask is
// looked for as at least two stars or three dots: a single "." or "*"
// before the tail would also match a number ("0.1234" for a key ending in
// 1234, in a stream's JSON outside any string, where stars would break
// it) or Markdown emphasis, and no provider masks with one.
func keyPatterns(key []byte) [][]byte {
	if len(key) < minScrubbedKey {
		return nil
	}
	pats := [][]byte{bytes.Clone(key)}
	if len(key) >= 4*keyTail {
		tail := key[len(key)-keyTail:]
		for _, mask := range []string{"**", "...", "…"} {
			pats = append(pats, append([]byte(mask), tail...))
		}
	}
	return pats
}

// scrubAnswer masks the key in an answer's header values, its body and
// its trailers.
func scrubAnswer(resp *http.Response, pats [][]byte) {
	if len(pats) == 0 {
		return
	}
	maskHeader(resp.Header, pats)
	if resp.Body != nil && resp.Body != http.NoBody {
		resp.Body = newKeyScrub(resp.Body, pats)
		// A trailer's value is known only once the body has been read
		// (the transport sets resp.Trailer then): masked at its end.
		resp.Body.(*keyScrub).trailer = &resp.Trailer
	}
}

// maskHeader masks the patterns in h's values in place, in any case of
// their letters, and drops a header whose name holds one: Go writes a
// header's name in its own case (X-Sk-Ant-…), which a case-sensitive
// match of the key would miss, and no name is the provider's to keep.
func maskHeader(h http.Header, pats [][]byte) {
	lower := make([][]byte, len(pats))
	for i, p := range pats {
		lower[i] = asciiLower(p)
	}
	for name, vs := range h {
		if maskAll(asciiLower([]byte(name)), lower) {
			delete(h, name)
			continue
		}
		for i, v := range vs {
			b, l := []byte(v), asciiLower([]byte(v))
			if !maskAll(l, lower) {
				continue
			}
			// l has the same length as b: the masked bytes of one are
			// the other's (a '*' b had stays one).
			for j, c := range l {
				if c == '*' {
					b[j] = '*'
				}
			}
			h[name][i] = string(b)
		}
	}
}

// asciiLower is b with its ASCII letters in lower case, the same length
// (bytes.ToLower may change a non-ASCII rune's length).
func asciiLower(b []byte) []byte {
	out := bytes.Clone(b)
	for i, c := range out {
		if 'A' <= c && c <= 'Z' {
			out[i] = c + 'a' - 'A'
		}
	}
	return out
}

// maskAll overwrites every occurrence of each pattern in b with '*' and
// says whether it found one. The key's own bytes go first: its tail
// pattern never matches inside it once it is masked.
func maskAll(b []byte, pats [][]byte) bool {
	found := false
	for _, p := range pats {
		for from := 0; ; {
			i := bytes.Index(b[from:], p)
			if i < 0 {
				break
			}
			found = true
			at := from + i
			for j := range p {
				b[at+j] = '*'
			}
			from = at + len(p)
		}
	}
	return found
}

// keyScrub is a body with every pattern masked, each Read handing on what
// cannot be the start of one.
type keyScrub struct {
	src  io.ReadCloser
	pats [][]byte
	// buf holds what was read: its first held bytes are the end of the
	// read before, which may begin a pattern; ready is masked, to be
	// handed on, and ends at buf[end].
	buf       []byte
	held, end int
	ready     []byte
	err       error
	// trailer is the answer's, masked when the body has ended.
	trailer *http.Header
}

func newKeyScrub(src io.ReadCloser, pats [][]byte) *keyScrub {
	longest := 0
	for _, p := range pats {
		longest = max(longest, len(p))
	}
	return &keyScrub{src: src, pats: pats, buf: make([]byte, 32<<10+longest)}
}

func (s *keyScrub) Read(p []byte) (int, error) {
	for len(s.ready) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		// What was held goes to the front, before what comes next.
		copy(s.buf, s.buf[s.end-s.held:s.end])
		n, err := s.src.Read(s.buf[s.held:])
		w := s.buf[:s.held+n]
		maskAll(w, s.pats)
		keep := 0
		if err == nil {
			keep = patternStart(w, s.pats)
		} else {
			// The end: what was held begins no pattern after all.
			s.err = err
			if s.trailer != nil {
				maskHeader(*s.trailer, s.pats)
			}
		}
		s.ready, s.held, s.end = w[:len(w)-keep], keep, len(w)
	}
	n := copy(p, s.ready)
	s.ready = s.ready[n:]
	return n, nil
}

func (s *keyScrub) Close() error { return s.src.Close() }

// patternStart is the length of w's longest end that is the start of a
// pattern (shorter than the pattern: a whole one was masked).
func patternStart(w []byte, pats [][]byte) int {
	longest := 0
	for _, p := range pats {
		for k := min(len(p)-1, len(w)); k > longest; k-- {
			if bytes.Equal(w[len(w)-k:], p[:k]) {
				longest = k
				break
			}
		}
	}
	return longest
}

// maskInformational masks the key in a 1xx answer's headers (103 Early
// Hints) in place: ReverseProxy copies those to the agent as they come,
// before and without ModifyResponse, from the header map its own trace
// hook is given after this one.
func maskInformational(ctx context.Context, pats [][]byte) context.Context {
	if len(pats) == 0 {
		return ctx
	}
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
			maskHeader(http.Header(h), pats)
			return nil
		},
	})
}
