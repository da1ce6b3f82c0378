package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const secret = `s3cr3t-"Value"/with+odd&chars=` // JSON, URL and base64 all differ

func newRedactor(t testing.TB, opts Options) *Redactor {
	t.Helper()
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// writeInChunks writes data to a fresh Writer in chunks of size n and
// returns what came out after Close.
func writeInChunks(t testing.TB, r *Redactor, data []byte, n int) []byte {
	t.Helper()
	var out bytes.Buffer
	w := r.NewWriter(&out)
	for len(data) > 0 {
		k := min(n, len(data))
		if m, err := w.Write(data[:k]); err != nil || m != k {
			t.Fatalf("Write = %d, %v", m, err)
		}
		data = data[k:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestSecretFormsAreRedactedAcrossWriteBoundaries(t *testing.T) {
	r := newRedactor(t, Options{Secrets: []string{secret}, NoRules: true})
	jsonForm, _ := json.Marshal(secret)
	var blobs []string
	for k := 0; k < 3; k++ {
		// The secret inside a larger base64 blob, at each alignment.
		plain := strings.Repeat("x", k) + secret + "tail"
		blobs = append(blobs, base64.StdEncoding.EncodeToString([]byte(plain)), base64.URLEncoding.EncodeToString([]byte(plain)))
	}
	cases := map[string]string{
		"raw":            "before " + secret + " after",
		"json":           `{"env":` + string(jsonForm) + `}`,
		"query-escaped":  "https://x.test/?token=" + url.QueryEscape(secret),
		"path-escaped":   "https://x.test/" + url.PathEscape(secret) + "/x",
		"base64 aligned": strings.Join(blobs, "\n"),
		"twice adjacent": secret + secret,
		// A debugging dump in hex on one line (xxd -p wraps at 60
		// characters: a longer value, cut, is not recognised).
		"hex":       "key bytes " + hex.EncodeToString([]byte(secret)) + ".",
		"upper hex": "0x" + strings.ToUpper(hex.EncodeToString([]byte(secret))),
		// A host name is compared and reported lower-cased: the egress
		// proxy's refusal of a URL the agent built from a key.
		"lower-cased host": "harnessfacts egress proxy: " + strings.ToLower(secret) + ".example.com:443 is not allowed",
		"upper-cased":      "KEY=" + strings.ToUpper(secret),
		// Every byte escaped, and reversed: one step from the value.
		"percent every byte": "curl -d 'k=" + escapeBytes(secret, "%", true) + "'",
		"\\x every byte":     `printf '` + escapeBytes(secret, `\x`, false) + `'`,
		"\\u00 every byte":   `"` + escapeBytes(secret, `\u00`, true) + `"`,
		"reversed":           "rev: " + reversed(secret),
	}
	for name, in := range cases {
		for _, chunk := range []int{1, 2, 3, 5, 64, 1 << 20} {
			out := string(writeInChunks(t, r, []byte(in), chunk))
			for _, f := range Forms(secret) {
				if len(f) >= minForm && strings.Contains(out, f) {
					t.Errorf("%s, chunks of %d: output %q still has the form %q", name, chunk, out, f)
				}
			}
			if !strings.Contains(out, "[REDACTED]") {
				t.Errorf("%s, chunks of %d: nothing redacted in %q", name, chunk, out)
			}
			if h := hex.EncodeToString([]byte(secret)); strings.Contains(strings.ToLower(out), h) {
				t.Errorf("%s, chunks of %d: output %q still has the secret in hex", name, chunk, out)
			}
		}
	}
	if got := r.String("before " + secret + " after"); got != "before [REDACTED] after" {
		t.Errorf("String = %q", got)
	}
}

// A key with a slash and a plus (an AWS secret key's alphabet) printed as
// tools other than Go's print it: percent-escapes with lower-case hex
// (RFC 3986 allows them; some encoders write them) and JSON with "/"
// escaped (PHP's json_encode, some Java and JavaScript serializers). Both
// passed before (net helper of 7 December).
func TestSlashAndPlusFormsOfOtherEncoders(t *testing.T) {
	const value = "wJalrXUt/nFEMI+K7MDENG/bPxRfiCYEXAMPLEKEY"
	r := newRedactor(t, Options{Secrets: []string{value}, NoRules: true})
	for _, in := range []string{
		"https://x.test/?k=" + lowerPercentHex(url.QueryEscape(value)),
		"https://x.test/" + lowerPercentHex(url.PathEscape(value)) + "/x",
		`{"secret":"` + strings.ReplaceAll(value, "/", `\/`) + `"}`,
	} {
		for _, chunk := range []int{1, 3, 64} {
			out := string(writeInChunks(t, r, []byte(in), chunk))
			if !strings.Contains(out, "[REDACTED]") || strings.Contains(out, "wJalrXUt") || strings.Contains(out, "EXAMPLEKEY") {
				t.Errorf("chunks of %d: %q became %q", chunk, in, out)
			}
		}
	}
}

// A Secret made from a file ends in a newline; the agent can print the
// value without it (printf %s $KEY, tr -d '\n', jq -R), and in any form.
func TestSecretsAreRedactedWithoutTheirSurroundingSpace(t *testing.T) {
	const value = "q8Zt-custom-credential-4VwX"
	r := newRedactor(t, Options{Secrets: []string{"  " + value + "\n"}, NoRules: true})
	for _, in := range []string{
		"key=" + value + ";",
		`{"k":"` + value + `"}`,
		"b64 " + base64.StdEncoding.EncodeToString([]byte(value)),
		"hex " + hex.EncodeToString([]byte(value)),
		"with its newline " + value + "\n",
	} {
		out := string(writeInChunks(t, r, []byte(in), 3))
		if strings.Contains(out, value) || strings.Contains(out, base64.StdEncoding.EncodeToString([]byte(value))[:20]) ||
			strings.Contains(out, hex.EncodeToString([]byte(value))) || !strings.Contains(out, "[REDACTED]") {
			t.Errorf("%q redacted is %q: the trimmed secret is in it", in, out)
		}
	}
}

func TestTextWithoutSecretsPassesUnchanged(t *testing.T) {
	r := newRedactor(t, Options{Secrets: []string{secret}})
	in := []byte(corpus(1 << 20))
	for _, chunk := range []int{7, 4096, 1 << 20} {
		if out := writeInChunks(t, r, in, chunk); !bytes.Equal(out, in) {
			i := 0
			for i < len(out) && i < len(in) && out[i] == in[i] {
				i++
			}
			t.Fatalf("chunks of %d: output differs from input at byte %d: %q vs %q", chunk, i, out[i:min(len(out), i+80)], in[i:min(len(in), i+80)])
		}
	}
}

func TestTokenFormatsAreRedacted(t *testing.T) {
	const mcpToken = "hft_Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFi"
	r := newRedactor(t, Options{Keep: []string{mcpToken}})
	key := "-----BEGIN RSA PRIVATE KEY-----\n" + strings.Repeat("MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi8x5hHkP0aQy8nR+Wx1vT2cPLq\n", 20) + "-----END RSA PRIVATE KEY-----\n"
	tokens := map[string]string{
		"github-pat":       "ghp_R2bX9kQ4mZ7tL1wV8nY3pC6sD0fG5hJ2aE4u",
		"aws-access-token": "AKIAZ7Q4XK2MB3NV5WRT",
		"slack":            "xoxb-2945736109-4821937465102-Qx7Kp2Lm9Rt4Vw8Yz3Bn6Cd1",
		"jwt":              "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
		"private-key":      key,
	}
	for name, tok := range tokens {
		in := "log line\nusing " + tok + " now\n"
		for _, chunk := range []int{1, 13, 1 << 20} {
			out := string(writeInChunks(t, r, []byte(in), chunk))
			if strings.Contains(out, strings.TrimSpace(tok)[:20]) || !strings.Contains(out, "[REDACTED:") {
				t.Errorf("%s, chunks of %d: %q", name, chunk, out)
			}
		}
	}
	if out := r.String("token: " + mcpToken); !strings.Contains(out, mcpToken) {
		t.Errorf("the MCP token was redacted: %q", out)
	}
}

func TestMemoryStaysBounded(t *testing.T) {
	r := newRedactor(t, Options{Secrets: []string{secret}})
	var sink countingWriter
	w := r.NewWriter(&sink)
	chunk := []byte(corpus(64 << 10))
	for i := 0; i < 160; i++ { // 10 MiB
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
		if held := len(w.buf) - w.ctx; held > r.Window()+maxBatch {
			t.Fatalf("after %d writes the Writer holds %d bytes, more than window+batch %d", i+1, held, r.Window()+maxBatch)
		}
		if c := max(cap(w.buf), cap(w.spare)); c > 2*r.Window()+maxBatch {
			t.Fatalf("a batch buffer grew to %d bytes, more than %d", c, 2*r.Window()+maxBatch)
		}
	}
	if w.batch != maxBatch {
		t.Errorf("after 10 MiB without a flush the batch is %d bytes, want it grown to %d", w.batch, maxBatch)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if sink.n != 160*int64(len(chunk)) {
		t.Fatalf("wrote %d bytes of %d", sink.n, 160*len(chunk))
	}

	// A live view flushed after every 64 KiB holds no more than the log
	// alone: its bytes are the log's, and what it is sent early is at
	// most what is held.
	var log, live countingWriter
	teed := r.NewWriter(&log)
	teed.Tee(&live)
	for range 160 {
		if _, err := teed.Write(chunk); err != nil {
			t.Fatal(err)
		}
		if err := teed.FlushLive(); err != nil {
			t.Fatal(err)
		}
		if c := max(cap(teed.buf), cap(teed.spare)); c > 2*r.Window()+maxBatch {
			t.Fatalf("a batch buffer of a teed Writer grew to %d bytes, more than %d", c, 2*r.Window()+maxBatch)
		}
		if c := cap(teed.liveOut); c > 2*(r.Window()+maxBatch) {
			t.Fatalf("the live view's buffer grew to %d bytes, more than %d", c, 2*(r.Window()+maxBatch))
		}
	}
	if err := teed.Close(); err != nil {
		t.Fatal(err)
	}
	if log.n != 160*int64(len(chunk)) || live.n != log.n {
		t.Fatalf("the log got %d bytes and the live view %d, of %d", log.n, live.n, 160*len(chunk))
	}
}

func TestWriteErrorsAreReturned(t *testing.T) {
	r := newRedactor(t, Options{Secrets: []string{secret}, NoRules: true})
	boom := errors.New("disk full")
	w := r.NewWriter(failingWriter{boom})
	_, _ = w.Write([]byte("hello"))
	if err := w.Close(); !errors.Is(err, boom) {
		t.Fatalf("Close = %v, want %v", err, boom)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, boom) {
		t.Fatalf("Write after a failure = %v", err)
	}
}

func TestReplacementNeverRebuildsASecret(t *testing.T) {
	// A secret made to straddle "[REDACTED]" and the text after it.
	s := "ED]tail-of-it"
	r := newRedactor(t, Options{Secrets: []string{"first-secret", s}, NoRules: true})
	out := r.String("first-secret" + "tail-of-it")
	if strings.Contains(out, s) || strings.Contains(out, "first-secret") {
		t.Fatalf("output %q rebuilt a secret", out)
	}
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

func TestTokensAnywhereInALongStreamAreRedacted(t *testing.T) {
	r := newRedactor(t, Options{Secrets: []string{secret}})
	const tok = "ghp_R2bX9kQ4mZ7tL1wV8nY3pC6sD0fG5hJ2aE4u"
	text := corpus(3 << 20)
	var b strings.Builder
	// Every ~61 KiB, so that tokens land on lane cuts, batch ends and
	// window edges somewhere.
	n := 0
	for off := 0; off < len(text); off += 61<<10 + 7 {
		end := min(len(text), off+61<<10+7)
		b.WriteString(text[off:end])
		b.WriteString(" " + tok + " ")
		if n%3 == 0 {
			b.WriteString(secret)
		}
		n++
	}
	in := []byte(b.String())
	for _, chunk := range []int{4093, 1 << 20} {
		out := string(writeInChunks(t, r, in, chunk))
		if c := strings.Count(out, tok[:12]); c != 0 {
			t.Errorf("chunks of %d: %d of %d tokens left", chunk, c, n)
		}
		if strings.Contains(out, secret) {
			t.Errorf("chunks of %d: the secret is left", chunk)
		}
		if got := strings.Count(out, "[REDACTED:github-pat]"); got != n {
			t.Errorf("chunks of %d: %d tokens redacted, want %d", chunk, got, n)
		}
	}
}

// TestFlushLiveHoldsTheStartOfASecret: a live view flushes a quiet stream's
// finished lines, but a multi-line secret printed line by line is never
// shown in part: its first lines stay held until it is whole and redacted.
// Flush, which a live view used before, shows them.
func TestFlushLiveHoldsTheStartOfASecret(t *testing.T) {
	key := "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
	r, err := New(Options{Secrets: []string{key}})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(key, "\n")
	for _, tc := range []struct {
		name  string
		flush func(*Writer) error
		leaks bool
	}{{"FlushLive", (*Writer).FlushLive, false}, {"Flush", (*Writer).Flush, true}} {
		// out is what a follower sees: the live view, or the stream
		// itself when it is flushed.
		var out, log bytes.Buffer
		w := r.NewWriter(&out)
		if tc.name == "FlushLive" {
			w = r.NewWriter(&log)
			w.Tee(&out)
		}
		_, _ = w.Write([]byte("working\n" + lines[0]))
		if err := tc.flush(w); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(out.String(), "working\n") {
			t.Errorf("%s: the finished line before the secret was not shown: %q", tc.name, out.String())
		}
		_, _ = w.Write([]byte(lines[1]))
		if err := tc.flush(w); err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(lines[2] + "\ndone\n"))
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if leaked := strings.Contains(out.String(), "BEGIN PRIVATE KEY"); leaked != tc.leaks {
			t.Errorf("%s: leaked %t, want %t: %q", tc.name, leaked, tc.leaks, out.String())
		}
		if !strings.HasSuffix(out.String(), "done\n") {
			t.Errorf("%s: the stream's end is missing: %q", tc.name, out.String())
		}
		if strings.Contains(log.String(), "BEGIN PRIVATE KEY") {
			t.Errorf("%s: the log leaked the key: %q", tc.name, log.String())
		}
	}
}

// gatedWriter holds its first Write until open is closed, so a test can
// see whether the Writer went on while a batch was being written; it takes
// delay before copying each write, so that a Writer that reused a buffer
// still being written would be caught.
type gatedWriter struct {
	entered, open chan struct{}
	once          sync.Once
	delay         time.Duration
	buf           bytes.Buffer
	err           error
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	g.once.Do(func() {
		close(g.entered)
		<-g.open
	})
	if g.err != nil {
		return 0, g.err
	}
	time.Sleep(g.delay)
	return g.buf.Write(p)
}

// TestWriteBehindKeepsTheStream: a long batch is written out on another
// goroutine while the stream goes on (write-behind), and what reaches the
// destination is byte for byte what a Writer without it (one goroutine)
// writes, redactions included.
func TestWriteBehindKeepsTheStream(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	r := newRedactor(t, Options{Secrets: []string{secret}})
	const tok = "ghp_R2bX9kQ4mZ7tL1wV8nY3pC6sD0fG5hJ2aE4u"
	// Clean batches (passed on from the batch buffer) and, between 4 and
	// 8 MiB, batches with replacements (written from the other buffer).
	text := corpus(12 << 20)
	var b strings.Builder
	for off, n := 0, 0; off < len(text); off, n = off+200<<10+13, n+1 {
		b.WriteString(text[off:min(len(text), off+200<<10+13)])
		switch {
		case off < 4<<20 || off >= 8<<20:
		case n%2 == 0:
			b.WriteString(" " + tok + " ")
		default:
			b.WriteString(secret)
		}
	}
	in := []byte(b.String())

	g := &gatedWriter{entered: make(chan struct{}), open: make(chan struct{}), delay: 5 * time.Millisecond}
	w := r.NewWriter(g)
	// One batch: its write is held at the gate; Write must return anyway.
	first := minBatch + r.Window() + 1000
	wrote := make(chan error, 1)
	go func() {
		_, err := w.Write(in[:first])
		wrote <- err
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Write waited for its batch's write to end: nothing was written behind")
	}
	select {
	case <-g.entered:
	case <-time.After(time.Minute):
		t.Fatal("the first batch never reached the destination")
	}
	close(g.open)
	for p := in[first:]; len(p) > 0; p = p[min(len(p), 32<<10):] {
		if _, err := w.Write(p[:min(len(p), 32<<10)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	runtime.GOMAXPROCS(1) // one goroutine: no write-behind, no halves
	want := writeInChunks(t, r, in, 32<<10)
	runtime.GOMAXPROCS(2)
	if !bytes.Equal(g.buf.Bytes(), want) {
		t.Fatalf("written behind: %d bytes, differing from the %d bytes written in line", g.buf.Len(), len(want))
	}
	if strings.Contains(g.buf.String(), secret) || strings.Contains(g.buf.String(), tok) {
		t.Fatal("a secret or token is left")
	}
}

// TestWriteBehindErrorsAreReturned: a write that fails behind the stream
// fails the next call, and Close.
func TestWriteBehindErrorsAreReturned(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	r := newRedactor(t, Options{Secrets: []string{secret}, NoRules: true})
	boom := errors.New("disk full")
	g := &gatedWriter{entered: make(chan struct{}), open: make(chan struct{}), err: boom}
	w := r.NewWriter(g)
	big := bytes.Repeat([]byte("abcdefgh\n"), (minBatch+r.Window())/9+100) // one batch
	if _, err := w.Write(big); err != nil {
		t.Fatalf("the first Write = %v; its batch's write had not ended", err)
	}
	<-g.entered
	close(g.open)
	// A later Write returns the error once the write has ended.
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := w.Write([]byte("x"))
		if errors.Is(err, boom) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("Write after a failed write = %v, want %v", err, boom)
		}
		time.Sleep(time.Millisecond)
	}
	if err := w.Close(); !errors.Is(err, boom) {
		t.Fatalf("Close = %v, want %v", err, boom)
	}
}

// TestWriterIsTheSameOnOneGoroutine: with random writes, whatever their
// sizes, a Writer free to use two goroutines (the halves searched at once,
// batches written behind) writes byte for byte what it writes on one.
func TestWriterIsTheSameOnOneGoroutine(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	r := newRedactor(t, Options{Secrets: []string{secret}})
	forms := append(Forms(secret), "ghp_R2bX9kQ4mZ7tL1wV8nY3pC6sD0fG5hJ2aE4u", `api_key = "a8f3Kq9ZpL2xW7vR"`, "-----BEGIN")
	// Secrets and tokens every 30 KiB (every batch has replacements), 300
	// KiB, and 3 MiB (most batches are passed on as they are) on average.
	for seed, gap := range []int{30 << 10, 300 << 10, 3 << 20} {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		text := corpus(5 << 20)
		var b strings.Builder
		for off := 0; off < len(text); {
			n := rng.IntN(2 * gap)
			b.WriteString(text[off:min(len(text), off+n)])
			b.WriteString(forms[rng.IntN(len(forms))])
			off += n
		}
		in := []byte(b.String())
		var sizes []int
		for left := len(in); left > 0; {
			n := min(left, 1<<rng.IntN(20)+rng.IntN(1000))
			sizes = append(sizes, n)
			left -= n
		}
		write := func() []byte {
			// Slow to take each write, so that a Writer that reused a
			// buffer still being written would be caught.
			out := &gatedWriter{entered: make(chan struct{}), open: make(chan struct{}), delay: time.Millisecond}
			close(out.open)
			w := r.NewWriter(out)
			p := in
			for _, n := range sizes {
				if _, err := w.Write(p[:n]); err != nil {
					t.Fatal(err)
				}
				p = p[n:]
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			return out.buf.Bytes()
		}
		two := write()
		runtime.GOMAXPROCS(1)
		one := write()
		runtime.GOMAXPROCS(2)
		if !bytes.Equal(one, two) {
			t.Fatalf("seed %d: %d bytes written on two goroutines differ from the %d on one", seed, len(two), len(one))
		}
		if bytes.Contains(two, []byte(secret)) {
			t.Fatalf("seed %d: the secret is left", seed)
		}
	}
}

func reversed(s string) string {
	b := []byte(s)
	slices.Reverse(b)
	return string(b)
}
