package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"
	"testing/iotest"
)

// TestAnswersNeverCarryTheKey: a provider that echoes what the gateway
// sent it (a debug endpoint whose path the agent chose, an error page that
// quotes the request, OpenAI's 401 naming the refused key by its last
// characters) hands the agent no part of the key the agent is not to
// hold: in a header, in a whole answer, split across the provider's
// writes, or streamed, on each dialect's model request.
func TestAnswersNeverCarryTheKey(t *testing.T) {
	tail := realKey[len(realKey)-keyTail:]
	up := startUpstream(t)
	up.fail = func(w http.ResponseWriter, _ int) bool {
		r := up.requests()
		got := r[len(r)-1].Header.Get("Authorization")
		key := strings.TrimPrefix(got, "Bearer ")
		w.Header().Set("X-Echo", "you sent "+got)
		// Echoed in another case, and as a header's name (which Go
		// writes in its own case).
		w.Header().Set("X-Echo-Upper", strings.ToUpper(key))
		w.Header()["X-"+key] = []string{"1"}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		f := w.(http.Flusher)
		// The key whole, then cut across two writes, then masked as
		// providers mask it.
		_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided: `+key+`. Again: `+key[:7])
		f.Flush()
		_, _ = io.WriteString(w, key[7:]+`. Masked: sk-real-****`+tail+`, sk-real-...`+tail+`, sk-real-…`+tail+`","code":"invalid_api_key"}}`)
		return true
	}
	_, base := serve(t, Options{Upstream: up.srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: up.pool})
	for _, path := range []string{"/v1/chat/completions", "/v1/responses"} {
		resp, body := post(t, base+path, `{"model":"m","messages":[]}`, nil)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s: status %d, want the provider's 401", path, resp.StatusCode)
		}
		all := body
		for k, vs := range resp.Header {
			all += "\n" + k + ": " + strings.Join(vs, ",")
		}
		if low := strings.ToLower(all); strings.Contains(low, strings.ToLower(realKey)) || strings.Contains(low, strings.ToLower(realKey[:12])) || strings.Contains(all, tail) {
			t.Errorf("%s: the agent got the key or its tail:\n%s", path, all)
		}
		if !strings.Contains(body, `"code":"invalid_api_key"`) || !strings.Contains(resp.Header.Get("X-Echo"), "you sent Bearer ****") {
			t.Errorf("%s: the provider's answer did not come on as it was, but for the key: %q, X-Echo %q", path, body, resp.Header.Get("X-Echo"))
		}
		if n := resp.ContentLength; n >= 0 && n != int64(len(body)) {
			t.Errorf("%s: Content-Length %d for %d bytes", path, n, len(body))
		}
	}
}

// TestKeyScrubAtEverySplit: the key and its masked tail are masked
// wherever the reads cut them, nothing else changes, and a tail that only
// looks like a pattern's start is handed on at the end.
func TestKeyScrubAtEverySplit(t *testing.T) {
	key := []byte(realKey)
	pats := keyPatterns(key)
	tail := realKey[len(realKey)-keyTail:]
	in := "a" + realKey + "b" + realKey + realKey + "c ****" + tail + " …" + tail + " " + tail + " sk-real-5f"
	want := "a" + strings.Repeat("*", len(realKey)) + "b" + strings.Repeat("*", 2*len(realKey)) + "c ****" + strings.Repeat("*", keyTail) +
		" " + strings.Repeat("*", len("…")+keyTail) + " " + tail + " sk-real-5f"
	for split := 0; split <= len(in); split++ {
		src := io.NopCloser(io.MultiReader(strings.NewReader(in[:split]), strings.NewReader(in[split:])))
		got, err := io.ReadAll(iotest.OneByteReader(newKeyScrub(src, pats)))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("split at %d:\n got %q\nwant %q", split, got, want)
		}
	}
	// Byte by byte from the provider too.
	got, err := io.ReadAll(newKeyScrub(io.NopCloser(iotest.OneByteReader(strings.NewReader(in))), pats))
	if err != nil || string(got) != want {
		t.Fatalf("one byte at a time: %q, %v", got, err)
	}
	// A stream is not held up: what cannot begin a pattern is handed on
	// before the provider's next write.
	pr, pw := io.Pipe()
	s := newKeyScrub(pr, pats)
	go func() { _, _ = pw.Write([]byte("data: {}\n\n")) }()
	buf := make([]byte, 64)
	n, err := s.Read(buf)
	if err != nil || string(buf[:n]) != "data: {}\n\n" {
		t.Fatalf("a stream's event was held: %q, %v", buf[:n], err)
	}
	_ = pw.Close()
	// A key whose tail is digits: a number or an emphasis that ends in
	// them is no mask and stays as it was (stars in a JSON number would
	// break the stream); a mask of stars or dots is masked.
	digits := keyPatterns([]byte("sk-test-key-000000001234"))
	for in, want := range map[string]string{
		`{"logprob":-0.1234,"x":"*1234 x.1234"}`: `{"logprob":-0.1234,"x":"*1234 x.1234"}`,
		`"sk-****1234 sk-...1234"`:               `"sk-******** sk-*******"`,
	} {
		got, err := io.ReadAll(newKeyScrub(io.NopCloser(strings.NewReader(in)), digits))
		if err != nil || string(got) != want {
			t.Errorf("%s: got %q, want %q (%v)", in, got, want, err)
		}
	}
	// A key too short to look for changes nothing.
	if keyPatterns([]byte("local")) != nil || !bytes.Equal(keyPatterns(key)[0], key) {
		t.Fatal("keyPatterns")
	}
}

// TestKeyInTrailersAndEarlyHintsNeverReachesTheAgent: a trailer's value
// comes after the body (after the gateway's look at the answer), and a 1xx
// answer's headers go to the agent before the answer itself: neither
// carries the key to the agent.
func TestKeyInTrailersAndEarlyHintsNeverReachesTheAgent(t *testing.T) {
	up := startUpstream(t)
	up.fail = func(w http.ResponseWriter, _ int) bool {
		r := up.requests()
		key := strings.TrimPrefix(r[len(r)-1].Header.Get("Authorization"), "Bearer ")
		w.Header().Set("Link", "</hint?k="+key+">; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Trailer", "X-Echo")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"id":"x","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
		w.Header().Set("X-Echo", "you sent "+key)
		return true
	}
	_, base := serve(t, Options{Upstream: up.srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: up.pool})
	var hints []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		hints = append(hints, fmt.Sprint(code, " ", h.Get("Link")))
		return nil
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost,
		base+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if len(hints) != 1 || !strings.Contains(hints[0], "103 </hint?k=****") {
		t.Errorf("the early hint did not come on masked: %q", hints)
	}
	for _, h := range hints {
		if strings.Contains(h, realKey) {
			t.Errorf("the agent read the run's key in a 1xx answer: %q", h)
		}
	}
	for k, vs := range resp.Trailer {
		if strings.Contains(strings.Join(vs, ","), realKey) {
			t.Errorf("the agent read the run's key in trailer %s: %q", k, vs)
		}
	}
}

// TestProviderReadsTheBodyAsJSON: the body the gateway checked as JSON
// reaches the provider as JSON, whatever type the agent named (Google's
// APIs also read protobuf, which the gateway does not check).
func TestProviderReadsTheBodyAsJSON(t *testing.T) {
	up := startUpstream(t)
	_, base := serve(t, Options{Upstream: up.srv.URL, Header: XGoogAPIKey, Key: []byte(realKey), RootCAs: up.pool})
	resp, _ := post(t, base+"/v1beta/models/gemini-m:generateContent", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
		map[string]string{"Content-Type": "application/x-protobuf"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	r := up.requests()
	if got := r[len(r)-1].Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("the provider was told the body is %q", got)
	}
}
