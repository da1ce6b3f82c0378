package gateway

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

func TestAskForUsage(t *testing.T) {
	for _, c := range []struct {
		name, body string
		asked      bool
		// opts is stream_options as the provider gets it, when asked.
		opts string
	}{
		{"not streamed", `{"model":"m","messages":[]}`, false, ""},
		{"stream false", `{"model":"m","stream":false}`, false, ""},
		{"streamed", `{"model":"m","stream":true}`, true, `{"include_usage":true}`},
		{"options null", `{"stream":true,"stream_options":null}`, true, `{"include_usage":true}`},
		{"options without it", `{"stream":true,"stream_options":{"include_obfuscation":false}}`, true,
			`{"include_obfuscation":false,"include_usage":true}`},
		{"it refused", `{"stream":true,"stream_options":{"include_usage":false}}`, true, `{"include_usage":true}`},
		{"it asked", `{"stream":true,"stream_options":{"include_usage":true}}`, false, ""},
		// The provider reads the last of two keys; so does the gateway,
		// and what it sends has one of each.
		{"the last stream wins", `{"stream":false,"stream":true}`, true, `{"include_usage":true}`},
		{"the last options win", `{"stream":true,"stream_options":{"include_usage":true},"stream_options":{}}`, true, `{"include_usage":true}`},
		{"keys are case-sensitive", `{"Stream":true}`, false, ""},
		{"options not an object", `{"stream":true,"stream_options":"x"}`, false, ""},
		{"stream as a string", `{"stream":"true"}`, true, `{"include_usage":true}`},
		{"stream null", `{"stream":null}`, false, ""},
		{"not JSON", `stream=true`, false, ""},
		{"an array", `[{"stream":true}]`, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, asked := askForUsage([]byte(c.body), parseRequest([]byte(c.body)))
			if asked != c.asked {
				t.Fatalf("asked %v, want %v (%s)", asked, c.asked, out)
			}
			if !asked {
				if string(out) != c.body {
					t.Errorf("body changed: %s", out)
				}
				return
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if string(got["stream_options"]) != c.opts || string(got["stream"]) != string(parseRequest([]byte(c.body))["stream"]) {
				t.Errorf("stream %s, stream_options %s; want the agent's stream, %s", got["stream"], got["stream_options"], c.opts)
			}
			if n := strings.Count(string(out), `"stream_options"`); n != 1 {
				t.Errorf("%d stream_options keys in %s", n, out)
			}
		})
	}
	// The agent's text goes on byte for byte: no HTML escaping, no
	// re-encoding of the messages.
	in := `{"stream":true,"messages":[{"role":"user","content":"a <b> & \"c\" \u00e9 é"}]}`
	out, _ := askForUsage([]byte(in), parseRequest([]byte(in)))
	if !bytes.Contains(out, []byte(`"messages":[{"role":"user","content":"a <b> & \"c\" \u00e9 é"}]`)) {
		t.Errorf("messages changed: %s", out)
	}
	// Encoded again where the agent sent options of its own.
	in = `{"stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":"a <b> & é"}]}`
	out, _ = askForUsage([]byte(in), parseRequest([]byte(in)))
	if !bytes.Contains(out, []byte(`"messages":[{"role":"user","content":"a <b> & é"}]`)) {
		t.Errorf("messages changed: %s", out)
	}
}

// A stream with the usage chunk the gateway asked for, as OpenAI sends it
// (every chunk with "usage":null, then one with no choices), in LF and
// CRLF, with a comment and multi-line data.
const (
	chatChunk1   = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n"
	chatComment  = ": keep-alive\n\n"
	chatChunk2   = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\r\ndata: \"usage\":null}\r\n\r\n"
	chatUsageEv  = "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n"
	chatUsageEv2 = "event: x\r\ndata: {\"choices\": [ ],\r\ndata:  \"usage\": {\"prompt_tokens\":1}}\r\n\r\n"
	chatDone     = "data: [DONE]\n\n"
)

func TestUsageChunkFilter(t *testing.T) {
	in := chatChunk1 + chatComment + chatUsageEv + chatChunk2 + chatUsageEv2 + chatDone
	want := chatChunk1 + chatComment + chatChunk2 + chatDone
	for _, size := range []int{1, 2, 3, 7, 64, len(in)} {
		f := newUsageChunkFilter(io.NopCloser(&chunkedReader{b: []byte(in), n: size}))
		got, err := io.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("read %d bytes at a time:\n%q\nwant\n%q", size, got, want)
		}
	}
	// Not usage chunks: choices with a delta and usage, an empty choices
	// without usage or with usage null, a cut event at the end.
	keep := "data: {\"choices\":[{\"delta\":{}}],\"usage\":{\"prompt_tokens\":1}}\n\n" +
		"data: {\"choices\":[]}\n\n" + "data: {\"choices\":[],\"usage\":null}\n\n" + "data: {\"usage\":{\"x\":1}}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n"
	got, err := io.ReadAll(newUsageChunkFilter(io.NopCloser(strings.NewReader(keep))))
	if err != nil || string(got) != keep {
		t.Errorf("got %q, %v; want it unchanged", got, err)
	}
	// An event past the bound goes on as it is, and the events after its
	// end are filtered again, its blank line in any read (LF, CRLF, a
	// lone CR, or mixed).
	for _, bigEnd := range []string{"\n\n", "\n\r\n", "\r\r", "\r\n\r", "\r\n\n", "\n\r"} {
		big := "data: {\"choices\":[],\"usage\":{\"a\":\"" + strings.Repeat("x", maxFilteredEvent+64<<10) + "\"}}" + bigEnd
		in, want := big+chatUsageEv+chatChunk1+chatUsageEv2, big+chatChunk1
		for _, size := range []int{1, 3, 4093, 32 << 10, len(in)} {
			got, err := io.ReadAll(newUsageChunkFilter(io.NopCloser(&chunkedReader{b: []byte(in), n: size})))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != want {
				t.Errorf("an event over the bound, %q, read %d bytes at a time: %d bytes passed, want %d", bigEnd, size, len(got), len(want))
			}
		}
	}
	// Lines ended by a lone CR, and all three ends mixed (a CR then an
	// LF is one end, in any reads): the usage chunks are told all the
	// same (before, a lone CR never ended an event, and the agent got
	// them).
	cr := strings.NewReplacer("\r\n", "\r", "\n", "\r").Replace
	mixed := chatChunk1 + cr(chatUsageEv) + cr(chatChunk2) + "data: {\"choices\":[],\r\ndata: \"usage\":{\"prompt_tokens\":1}}\r\n\r" + cr(chatComment) +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2}}\n\r" + chatChunk1 + cr(chatUsageEv) + cr(chatDone)
	wantMixed := chatChunk1 + cr(chatChunk2) + cr(chatComment) + chatChunk1 + cr(chatDone)
	for _, size := range []int{1, 2, 3, 5, 64, len(mixed)} {
		got, err := io.ReadAll(newUsageChunkFilter(io.NopCloser(&chunkedReader{b: []byte(mixed), n: size})))
		if err != nil || string(got) != wantMixed {
			t.Errorf("lone CRs and mixed line ends, read %d bytes at a time:\n%q, %v\nwant\n%q", size, got, err, wantMixed)
		}
	}
}

// TestUsageChunkFilterHoldsLittle: an endless event goes on as it arrives;
// the filter holds no more of it than its bound.
func TestUsageChunkFilterHoldsLittle(t *testing.T) {
	endless := io.MultiReader(strings.NewReader("data: {\"choices\":[{\"delta\":{\"content\":\""), &repeatReader{b: 'x', n: 64 << 20})
	f := newUsageChunkFilter(io.NopCloser(endless))
	p := make([]byte, 32<<10)
	var n int64
	for {
		k, err := f.Read(p)
		n += int64(k)
		if held := cap(f.pending) + cap(f.ready) + cap(f.tail); held > 2*maxFilteredEvent+len(f.buf) {
			t.Fatalf("the filter holds %d bytes after %d passed", held, n)
		}
		if err != nil {
			break
		}
	}
	if n < 64<<20 {
		t.Errorf("%d bytes passed, want all of them", n)
	}
}

// repeatReader reads n copies of b.
type repeatReader struct {
	b byte
	n int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = r.b
	}
	r.n -= k
	return k, nil
}

// chunkedReader reads at most n bytes at a time.
type chunkedReader struct {
	b []byte
	n int
}

func (r *chunkedReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.n)], r.b)
	r.b = r.b[n:]
	return n, nil
}

// TestGatewayCountsAStreamThatDidNotAskForUsage: an agent's streamed Chat
// Completions request without stream_options (Aider's, or one left out on
// purpose) is counted all the same, and the agent gets the stream it asked
// for, without the usage chunk; one that asked gets it.
func TestGatewayCountsAStreamThatDidNotAskForUsage(t *testing.T) {
	up := startUpstream(t)
	for _, c := range []struct {
		name, body string
		chunk      bool
	}{
		{"not asked", `{"model":"gpt-c","stream":true,"messages":[{"role":"user","content":"hi"}]}`, false},
		{"refused", `{"model":"gpt-c","stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":"hi"}]}`, false},
		{"asked", `{"model":"gpt-c","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(up.provider.Requests())
			g, base := serve(t, Options{Upstream: up.srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: up.pool, MaxTokens: 1 << 40})
			resp, body := post(t, base+"/v1/chat/completions", c.body, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			rec := up.provider.Requests()[before]
			st := g.Tally().Status("Gateway", "")
			if rec.Usage.Input == 0 || st.InputTokens != rec.Usage.Input || st.OutputTokens != rec.Usage.Output || st.UncountedResponses != 0 {
				t.Errorf("counted %+v, the provider sent %+v", st, rec.Usage)
			}
			if got := strings.Contains(body, `"choices":[]`); got != c.chunk {
				t.Errorf("the agent got the usage chunk: %v, want %v:\n%s", got, c.chunk, body)
			}
			if !strings.HasSuffix(body, "data: [DONE]\n\n") || !strings.Contains(body, `"finish_reason"`) {
				t.Errorf("the stream is not whole:\n%s", body)
			}
			if g.Stopped() != nil {
				t.Errorf("stopped: %v", g.Stopped())
			}
		})
	}
}

// TestGatewayHoldsTheTokenLimitWithoutUsage: an answer that arrives whole
// without token figures cannot be counted; under a token limit it ends the
// run (an agent could otherwise spend past the limit that way), without one
// it is counted as uncounted. An answer the agent cuts short is counted as
// uncounted only: the agent's own end cuts its last answer.
func TestGatewayHoldsTheTokenLimitWithoutUsage(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case bytes.Contains(body, []byte(`"fail"`)):
			// A stream that fails on the provider's side, before usage.
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"usage\":null,\"error\":{\"code\":\"server_error\"}}}\n\n")
		case bytes.Contains(body, []byte(`"no-usage"`)) && r.URL.Path == "/v1/responses":
			// A provider that reports no usage, whole.
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"resp_1","object":"response","status":"completed","output":[],"usage":null}`)
		case bytes.Contains(body, []byte(`"no-usage"`)):
			// One that ignores stream_options: a whole stream, no usage.
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, chatChunk1+chatDone)
		case bytes.Contains(body, []byte(`"no-delta"`)):
			// A Messages stream that ends without its message_delta.
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"c\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"+
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		case bytes.Contains(body, []byte(`"brotli"`)):
			// An encoding the gateway did not ask for.
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "br")
			_, _ = io.WriteString(w, "\x1b\x07\x00\xf8\xa5\x40\xc2\xaa")
		case bytes.Contains(body, []byte(`"early-usage"`)):
			// A Responses stream whose usage came in response.created
			// (output 0), its text after, and no response.completed.
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"r\",\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}\n\n"+
				"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"all of the answer\"}\n\n")
		case bytes.Contains(body, []byte(`"cut"`)):
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, chatChunk1)
			w.(http.Flusher).Flush()
			<-release
		default:
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())

	whole := []struct {
		name, path, body string
	}{
		{"a response without usage", "/v1/responses", `{"model":"no-usage","input":"hi"}`},
		{"a stream without usage", "/v1/chat/completions", `{"model":"no-usage","stream":true,"messages":[]}`},
	}
	for _, c := range whole {
		t.Run(c.name, func(t *testing.T) {
			for _, limit := range []int64{0, 1000} {
				g, base := serve(t, Options{Upstream: srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: pool, MaxTokens: limit})
				resp, body := post(t, base+c.path, c.body, nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				if n := g.Tally().Status("Gateway", "").UncountedResponses; n != 1 {
					t.Errorf("limit %d: %d uncounted, want 1", limit, n)
				}
				s := g.Stopped()
				switch {
				case limit == 0 && s != nil:
					t.Errorf("no limit: stopped: %v", s)
				case limit > 0 && (s == nil || s.Reason != ReasonTokenLimit || !strings.Contains(s.Message, "no token figures")):
					t.Errorf("limit %d: stop %+v, want %s for an answer without figures", limit, s, ReasonTokenLimit)
				}
			}
		})
	}

	t.Run("a Messages stream without its closing figures", func(t *testing.T) {
		for _, limit := range []int64{0, 1000} {
			g, base := serve(t, Options{Upstream: srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: pool, MaxTokens: limit})
			if resp, body := post(t, base+"/v1/messages", `{"model":"no-delta","stream":true,"max_tokens":8,"messages":[]}`, nil); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			s := g.Stopped()
			switch {
			case limit == 0 && s != nil:
				t.Errorf("no limit: stopped: %v", s)
			case limit > 0 && (s == nil || s.Reason != ReasonTokenLimit || !strings.Contains(s.Message, "without its closing token figures")):
				t.Errorf("limit %d: stop %+v, want %s", limit, s, ReasonTokenLimit)
			}
		}
	})

	t.Run("an answer in an encoding not asked for", func(t *testing.T) {
		for _, limit := range []int64{0, 1000} {
			g, base := serve(t, Options{Upstream: srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: pool, MaxTokens: limit})
			req, err := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(`{"model":"brotli","max_tokens":8,"messages":[]}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "br" || string(got) != "\x1b\x07\x00\xf8\xa5\x40\xc2\xaa" {
				t.Errorf("the CLI got %d, %q, %q: want the answer as it came", resp.StatusCode, resp.Header.Get("Content-Encoding"), got)
			}
			s := g.Stopped()
			switch {
			case limit == 0 && s != nil:
				t.Errorf("no limit: stopped: %v", s)
			case limit > 0 && (s == nil || s.Reason != ReasonTokenLimit || !strings.Contains(s.Message, "Content-Encoding: br")):
				t.Errorf("limit %d: stop %+v, want %s naming the encoding", limit, s, ReasonTokenLimit)
			}
		}
	})

	t.Run("a Responses stream whose figures came before its text", func(t *testing.T) {
		for _, limit := range []int64{0, 1000} {
			g, base := serve(t, Options{Upstream: srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: pool, MaxTokens: limit})
			if resp, body := post(t, base+"/v1/responses", `{"model":"early-usage","stream":true,"input":"hi"}`, nil); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			s := g.Stopped()
			switch {
			case limit == 0 && s != nil:
				t.Errorf("no limit: stopped: %v", s)
			case limit > 0 && (s == nil || s.Reason != ReasonTokenLimit || !strings.Contains(s.Message, "without its closing token figures")):
				t.Errorf("limit %d: stop %+v, want %s", limit, s, ReasonTokenLimit)
			}
		}
	})

	t.Run("failed on the provider's side", func(t *testing.T) {
		g, base := serve(t, Options{Upstream: srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: pool, MaxTokens: 1000})
		if resp, body := post(t, base+"/v1/responses", `{"model":"fail","stream":true,"input":"hi"}`, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		if n := g.Tally().Status("Gateway", "").UncountedResponses; n != 1 {
			t.Errorf("%d uncounted, want 1", n)
		}
		if s := g.Stopped(); s != nil {
			t.Errorf("a failed answer stopped the run: %v", s)
		}
	})

	t.Run("cut by the agent", func(t *testing.T) {
		g, base := serve(t, Options{Upstream: srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: pool, MaxTokens: 1000})
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{"model":"cut","stream":true}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		first := make([]byte, len(chatChunk1))
		if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != chatChunk1 {
			t.Fatalf("first event %q, %v", first, err)
		}
		_ = resp.Body.Close()
		deadline := time.Now().Add(10 * time.Second)
		for g.Tally().Status("Gateway", "").UncountedResponses != 1 {
			if time.Now().After(deadline) {
				t.Fatal("the cut answer was never counted as uncounted")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if s := g.Stopped(); s != nil {
			t.Errorf("a cut answer stopped the run: %v", s)
		}
	})
}

// TestParseRequestDoesNotCopyTheBody: reading a held 16 MiB request costs
// its map, not a second copy of its values (the node's held bodies are
// bounded; what reading them costs beside must stay small).
func TestParseRequestDoesNotCopyTheBody(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 16<<20-100) + `"}],"tools":[]}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req := parseRequest(body)
	runtime.ReadMemStats(&after)
	if req == nil || len(req["messages"]) < 16<<20-100 {
		t.Fatalf("not read: %d keys", len(req))
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("reading a 16 MiB request allocated %d KiB", n>>10)
	}
}

// TestParseRequestBoundsItsMembers: a request, or its stream_options, of
// a million and a half tiny members is not decoded into a map (which held
// 100 MiB, and asking for its usage allocated 255 MiB more, of the
// node-agent's memory for one request); one of maxMembers still is.
func TestParseRequestBoundsItsMembers(t *testing.T) {
	object := func(head string, n int) []byte {
		var b strings.Builder
		b.WriteString(head + "{")
		for i := range n {
			fmt.Fprintf(&b, `"%s":0,`, strconv.FormatInt(int64(i), 36))
		}
		b.WriteString(`"last":0}`)
		return []byte(b.String())
	}
	many := object("", 1_500_000)
	streamOpts := append([]byte(`{"model":"m","stream":true,"stream_options":`), object("", 1_500_000)...)
	streamOpts = append(streamOpts, '}')
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req := parseRequest(many)
	out, asked := askForUsage(streamOpts, parseRequest(streamOpts))
	runtime.ReadMemStats(&after)
	if req != nil || asked || len(out) != len(streamOpts) {
		t.Errorf("1.5 million members read: %d keys; stream_options asked anew: %v", len(req), asked)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("reading 1.5 million members allocated %d MiB", n>>20)
	}
	if req := parseRequest(object("", maxMembers-1)); len(req) != maxMembers {
		t.Errorf("a request of %d members: %d read", maxMembers, len(req))
	}
	if req := parseRequest([]byte(` { "a" : [ {"x":"}"} ] , "b" : "\"" , "c" : 1e3 } `)); len(req) != 3 {
		t.Errorf("a loose request: %d members read", len(req))
	}
}

// TestGatewayHoldsTheTokenLimitOverCutAnswers: an agent that closes each
// stream once it has the text it wants, before the provider's closing
// figures (Chat's usage chunk, the Responses API's response.completed,
// Anthropic's message_delta), had every answer's tokens, or its output's,
// go uncounted, and spent past the run's token limit with no end: five
// answers of 5000 tokens each under a limit of 1000 counted 0 (Chat) and
// 55 (Anthropic), and 50 (Gemini, whose chunks before the last carry the
// prompt's count alone, read as final figures). The cut answer itself does not end the run (the agent's
// own end cuts its last one), but under a token limit the next request is
// refused and the run ended. So under a spend budget alone, which is
// charged from the count: the agent's cut answers let it spend its
// namespace's budget uncounted.
func TestGatewayHoldsTheTokenLimitOverCutAnswers(t *testing.T) {
	for name, lim := range map[string]Options{
		"maxTokensPerRun": {MaxTokens: 1000},
		"a spend budget":  {Budgets: []string{"HarnessPolicy p spend.namespaceTokens"}},
	} {
		t.Run(name, func(t *testing.T) { testCutAnswersUnderACount(t, lim) })
	}
}

func testCutAnswersUnderACount(t *testing.T, lim Options) {
	const (
		chatText   = "data: {\"id\":\"c\",\"model\":\"gpt-c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"all the text\"},\"finish_reason\":\"stop\"}]}\n\n"
		chatUsage  = "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":4000}}\n\ndata: [DONE]\n\n"
		claudeText = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-m\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"all the text\"}}\n\n" +
			"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
		claudeUsage = "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":4990}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
		// Gemini's chunks each carry usageMetadata, but before the one
		// with the finishReason only the prompt's count (as the API
		// sends them): the output's comes last.
		geminiText  = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"all the text\"}],\"role\":\"model\"},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":10,\"totalTokenCount\":10},\"modelVersion\":\"gemini-m\"}\r\n\r\n"
		geminiUsage = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"\"}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":10,\"candidatesTokenCount\":4990,\"totalTokenCount\":5000},\"modelVersion\":\"gemini-m\"}\r\n\r\n"
	)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		text, figures := chatText, chatUsage
		switch {
		case r.URL.Path == "/v1/messages":
			text, figures = claudeText, claudeUsage
		case strings.HasSuffix(r.URL.Path, ":streamGenerateContent"):
			text, figures = geminiText, geminiUsage
		}
		_, _ = io.WriteString(w, text)
		w.(http.Flusher).Flush()
		if r.URL.Path == "/v1/responses" {
			// The provider's connection fails mid-stream: not the agent's
			// doing, which ends nothing.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		// The closing figures come once the agent has gone (a real
		// provider sends them right after; an agent cuts a few tokens
		// earlier).
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		_, _ = io.WriteString(w, figures)
	}))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())

	for _, c := range []struct{ path, body, text string }{
		{"/v1/chat/completions", `{"model":"gpt-c","stream":true,"messages":[]}`, chatText},
		{"/v1/messages", `{"model":"claude-m","stream":true,"max_tokens":5000,"messages":[]}`, claudeText},
		{"/v1/responses", `{"model":"gpt-r","stream":true,"input":"hi"}`, chatText},
		{"/v1beta/models/gemini-m:streamGenerateContent?alt=sse", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, geminiText},
	} {
		g, base := serve(t, Options{Upstream: srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: pool, MaxTokens: lim.MaxTokens, Budgets: lim.Budgets})
		var statuses []int
		for range 5 {
			resp, err := http.Post(base+c.path, "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			statuses = append(statuses, resp.StatusCode)
			switch {
			case c.path == "/v1/responses":
				// Read until the gateway ends the cut answer.
				_, _ = io.ReadAll(resp.Body)
			case resp.StatusCode == http.StatusOK:
				got := make([]byte, len(c.text))
				if _, err := io.ReadFull(resp.Body, got); err != nil {
					t.Fatal(err)
				}
			}
			_ = resp.Body.Close()
			// The gateway has taken the cut answer before the next request.
			for deadline := time.Now().Add(5 * time.Second); g.Tally().Status("Gateway", "").UncountedResponses+int64(len(g.Tally().ByModel())) == 0 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond)
		}
		st := g.Tally().Status("Gateway", "")
		s := g.Stopped()
		t.Logf("%s: statuses %v, %d tokens counted, %d uncounted, stop %v", c.path, statuses, g.Tally().Counts().Total(), st.UncountedResponses, s)
		if c.path == "/v1/responses" {
			if s != nil || slices.ContainsFunc(statuses, func(s int) bool { return s != http.StatusOK }) {
				t.Errorf("answers the provider cut: statuses %v, stop %+v", statuses, s)
			}
			continue
		}
		// The provider's closing figures may still reach the gateway
		// before it sees the agent gone (then that answer is counted
		// whole): under a budget alone, the next one is cut.
		refused := statuses[1] == http.StatusTooManyRequests || lim.MaxTokens == 0 && statuses[2] == http.StatusTooManyRequests
		if s == nil || s.Reason != ReasonTokenLimit || statuses[0] != http.StatusOK || !refused {
			t.Errorf("%s: statuses %v, stop %+v: want the request after a cut answer refused, and %s", c.path, statuses, s, ReasonTokenLimit)
		}
		for _, rule := range lim.Budgets {
			if s != nil && (!strings.Contains(s.Message, rule) || !strings.Contains(s.Message, "cut an answer short")) {
				t.Errorf("%s: the stop does not say a cut answer and the budget %q: %s", c.path, rule, s.Message)
			}
		}
	}
}

// TestProviderThatRefusesTheUsageAskGetsTheAgentsRequest: the gateway adds
// stream_options to a streamed Chat request that lacks it, to count its
// usage; a provider that refuses what it does not know answers 400 to
// every such request (Aider's, which sends none, all failed). The agent's
// own request then goes once more, byte for byte as it sent it; its answer
// reaches the agent and counts as uncounted; no retry of the policy is
// spent and the run is not judged.
func TestProviderThatRefusesTheUsageAskGetsTheAgentsRequest(t *testing.T) {
	// OpenAI's refusal (400), and a server that validates its request
	// model strictly (FastAPI/pydantic's 422, extra fields forbidden):
	// the gateway's ask failed Aider's every request there.
	for _, refusal := range []struct {
		status int
		body   string
	}{
		{http.StatusBadRequest, `{"error":{"message":"Unrecognized request argument supplied: stream_options","type":"invalid_request_error","param":null,"code":null}}`},
		{http.StatusUnprocessableEntity, `{"detail":[{"type":"extra_forbidden","loc":["body","stream_options"],"msg":"Extra inputs are not permitted","input":{"include_usage":true}}]}`},
	} {
		t.Run(http.StatusText(refusal.status), func(t *testing.T) { refusedUsageAsk(t, refusal.status, refusal.body) })
	}
}

func refusedUsageAsk(t *testing.T, status int, refusal string) {
	up := startUpstream(t)
	var (
		mu     sync.Mutex
		bodies []string
	)
	strict := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		if strings.Contains(string(b), "stream_options") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, refusal)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		up.provider.ServeHTTP(w, r)
	}))
	t.Cleanup(strict.Close)
	pool := x509.NewCertPool()
	pool.AddCert(strict.Certificate())
	g, base := serve(t, Options{Upstream: strict.URL, Header: Bearer, Key: []byte(realKey), RootCAs: pool})
	// The agent's own request, with no stream_options: its answer.
	// With stream_options of its own (include_usage false), the provider
	// refuses that too, and the agent gets the provider's refusal of its
	// own request.
	for _, c := range []struct {
		agent  string
		status int
	}{
		{`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, http.StatusOK},
		{`{"model":"m","stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":"hi"}]}`, status},
	} {
		mu.Lock()
		bodies = nil
		mu.Unlock()
		resp, body := post(t, base+"/v1/chat/completions", c.agent, nil)
		if resp.StatusCode != c.status || c.status == http.StatusOK && !strings.Contains(body, "data:") {
			t.Fatalf("%s: status %d, want %d: %s", c.agent, resp.StatusCode, c.status, body)
		}
		mu.Lock()
		got := slices.Clone(bodies)
		mu.Unlock()
		if len(got) != 2 || !strings.Contains(got[0], `"include_usage":true`) || got[1] != c.agent {
			t.Errorf("the provider got %q, want the ask and then the agent's own %q", got, c.agent)
		}
	}
	// The answer to the first: no figures (the agent did not ask for
	// them). The provider's refusal of the second is no answer to count.
	if n := g.Tally().Status("Gateway", "").UncountedResponses; n != 1 {
		t.Errorf("%d uncounted, want 1", n)
	}
	if s := g.Stopped(); s != nil || g.ProviderFailing() != nil {
		t.Errorf("a refused ask judged the run: %v, %v, %d", s, g.ProviderFailing(), g.ProviderErrorsHandedOver())
	}
}

// TestCutAnswersAreUncountedWithoutALimit: an answer the agent cut after
// figures that are not its closing ones (Anthropic's message_start: the
// input and one output token) counted its input, and the run's status
// said nothing of the output it missed: uncountedResponses stayed 0, so
// status.usage, and the spend budgets charged from it, read as whole
// figures of an agent that cut every answer. It is counted as uncounted.
func TestCutAnswersAreUncountedWithoutALimit(t *testing.T) {
	const start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-m\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"all the text\"}}\n\n"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, start)
		w.(http.Flusher).Flush()
		// Pings, as Anthropic's streams send, and never the closing
		// figures: the gateway finds the client gone at the next ping it
		// passes on. (Waiting silently for the client's leaving to reach
		// this handler, a closing message_delta sent when it did was read
		// by the gateway now and then: the answer was whole.)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for deadline := time.After(5 * time.Second); ; {
			select {
			case <-r.Context().Done():
				return
			case <-deadline:
				return
			case <-tick.C:
				_, _ = io.WriteString(w, "event: ping\ndata: {\"type\":\"ping\"}\n\n")
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	g, base := serve(t, Options{Upstream: srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: pool})
	for range 3 {
		resp, err := http.Post(base+"/v1/messages", "application/json", strings.NewReader(`{"model":"claude-m","stream":true,"max_tokens":5000,"messages":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(resp.Body, make([]byte, len(start))); err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	// Each answer's input is counted at its message_start, and the answer
	// is found uncounted when the gateway finds the client gone: both are
	// waited for.
	var st *harnessv1.UsageStatus
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if st = g.Tally().Status(harnessv1.UsageFromGateway, ""); st.InputTokens == 30 && st.UncountedResponses == 3 {
			break
		}
	}
	if st.InputTokens != 30 || st.UncountedResponses != 3 || g.Stopped() != nil {
		t.Errorf("three answers cut after message_start: %+v, stop %v; want their input counted and each uncounted, no stop", st, g.Stopped())
	}
}
