package gateway

import (
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/usage"
)

// anthropicCRStream is a Messages stream whose lines end in a lone CR, as
// the event stream format allows (and the CLIs' SDKs read).
var anthropicCRStream = strings.ReplaceAll("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-cr\",\"usage\":{\"input_tokens\":50,\"cache_read_input_tokens\":20,\"output_tokens\":1}}}\n\n"+
	"event: ping\ndata: {\"type\": \"ping\"}\n\n"+
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n"+
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\n\n"+
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", "\n", "\r")

// TestGatewayCountsLinesEndedByALoneCR: a provider whose event stream ends
// its lines in a lone CR is counted as one that uses LF, its stream reaches
// the agent unchanged, and a token limit does not end the run for an
// answer "without figures" (before, nothing of such a stream was counted,
// and under a limit every answer ended the run).
func TestGatewayCountsLinesEndedByALoneCR(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		for b := anthropicCRStream; len(b) > 0; {
			n := min(5, len(b))
			_, _ = io.WriteString(w, b[:n])
			w.(http.Flusher).Flush()
			b = b[n:]
		}
	}))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	g, base := serve(t, Options{Upstream: srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: pool, MaxTokens: 1000})
	resp, body := post(t, base+"/v1/messages?beta=true", `{"model":"m","stream":true,"max_tokens":8,"messages":[]}`, nil)
	if resp.StatusCode != http.StatusOK || body != anthropicCRStream {
		t.Fatalf("status %d, body %q", resp.StatusCode, body)
	}
	if got, want := g.Tally().Counts(), (usage.Counts{Input: 50, Output: 7, CacheRead: 20}); got != want {
		t.Errorf("counted %+v, want %+v", got, want)
	}
	if s := g.Stopped(); s != nil {
		t.Errorf("stopped: %v", s)
	}
}

// TestGatewayFiltersTheUsageChunkOfALoneCRStream: a Chat Completions stream
// with lines ended by a lone CR, whose usage the gateway asked for, is
// counted, and the agent, which had not asked, gets it without the usage
// chunk, as it would with LF (before, it got the chunk, and the first 64
// KiB of the stream only once they had all arrived).
func TestGatewayFiltersTheUsageChunkOfALoneCRStream(t *testing.T) {
	cr := strings.NewReplacer("\r\n", "\r", "\n", "\r").Replace
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, cr(chatChunk1+chatChunk2+chatUsageEv+chatDone))
	}))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	g, base := serve(t, Options{Upstream: srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: pool, MaxTokens: 1000})
	resp, body := post(t, base+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`, nil)
	if want := cr(chatChunk1 + chatChunk2 + chatDone); resp.StatusCode != http.StatusOK || body != want {
		t.Fatalf("status %d, body\n%q\nwant\n%q", resp.StatusCode, body, want)
	}
	if got, want := g.Tally().Counts(), (usage.Counts{Input: 5, Output: 2}); got != want || g.Stopped() != nil {
		t.Errorf("counted %+v, stopped %v; want %+v", got, g.Stopped(), want)
	}
}

// TestGatewayCountsAStreamWithoutAContentType: a provider that streams its
// events without a Content-Type (a web framework's streamed response has
// none unless told) is counted as one that names text/event-stream, under
// a token limit, and a Chat stream whose usage the gateway asked for
// reaches the agent without the usage chunk. Before, such a stream was read
// as one JSON document: nothing counted, and the limit ended the run at
// its first answer; the agent got the chunk it had not asked for.
func TestGatewayCountsAStreamWithoutAContentType(t *testing.T) {
	lf := strings.NewReplacer("\r", "\n").Replace
	for _, c := range []struct {
		name, path, req, stream, want string
		header                        KeyHeader
		counts                        usage.Counts
	}{
		{"messages", "/v1/messages", `{"model":"m","stream":true,"max_tokens":8,"messages":[]}`, lf(anthropicCRStream), lf(anthropicCRStream),
			XAPIKey, usage.Counts{Input: 50, Output: 7, CacheRead: 20}},
		{"chat, usage asked by the gateway", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`,
			chatChunk1 + chatChunk2 + chatUsageEv + chatDone, chatChunk1 + chatChunk2 + chatDone, Bearer, usage.Counts{Input: 5, Output: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header()["Content-Type"] = nil // nil, or Go's server sniffs one
				_, _ = io.WriteString(w, c.stream)
			}))
			t.Cleanup(srv.Close)
			pool := x509.NewCertPool()
			pool.AddCert(srv.Certificate())
			g, base := serve(t, Options{Upstream: srv.URL, Header: c.header, Key: []byte(realKey), RootCAs: pool, MaxTokens: 1000})
			resp, body := post(t, base+c.path, c.req, nil)
			if resp.StatusCode != http.StatusOK || body != c.want {
				t.Fatalf("status %d, Content-Type %q, body\n%q\nwant\n%q", resp.StatusCode, resp.Header.Get("Content-Type"), body, c.want)
			}
			if got := g.Tally().Counts(); got != c.counts || g.Stopped() != nil {
				t.Errorf("counted %+v, stopped %v; want %+v", got, g.Stopped(), c.counts)
			}
		})
	}
}

// TestGatewayStopsAtAnUnreadLastChunk: a Gemini stream whose last chunk,
// with the totals, is too large to read (an inline image over 4 MiB)
// after a chunk whose figures were read: those earlier figures are not
// the answer's, and under a token limit the run ends rather than going on
// with a count that is short by the whole answer.
func TestGatewayStopsAtAnUnreadLastChunk(t *testing.T) {
	up := startUpstream(t)
	up.fail = func(w http.ResponseWriter, _ int) bool {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `data: {"candidates":[{"content":{"parts":[{"text":"a"}]}}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":1},"modelVersion":"gemini-m"}`+"\n\n")
		_, _ = io.WriteString(w, `data: {"candidates":[{"content":{"parts":[{"inlineData":{"mimeType":"image/png","data":"`+strings.Repeat("A", 5<<20)+`"}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":900000,"totalTokenCount":900010},"modelVersion":"gemini-m"}`+"\n\n")
		return true
	}
	g, base := serve(t, Options{Upstream: up.srv.URL, Header: XGoogAPIKey, Key: []byte(realKey), RootCAs: up.pool, MaxTokens: 1000})
	resp, body := post(t, base+"/v1beta/models/gemini-m:streamGenerateContent?alt=sse", `{"contents":[{"role":"user","parts":[{"text":"draw"}]}]}`, nil)
	if resp.StatusCode != http.StatusOK || len(body) < 5<<20 {
		t.Fatalf("the answer did not reach the agent whole: %d, %d bytes", resp.StatusCode, len(body))
	}
	st := g.Stopped()
	if st == nil || st.Reason != ReasonTokenLimit || !strings.Contains(st.Message, "too large to read") {
		t.Errorf("the run went on with %d tokens counted of 900010 served: stop %+v", g.Tally().Counts().Total(), st)
	}
	// Without a limit, the answer is counted as uncounted in the run's
	// status rather than as whole.
	g, base = serve(t, Options{Upstream: up.srv.URL, Header: XGoogAPIKey, Key: []byte(realKey), RootCAs: up.pool})
	post(t, base+"/v1beta/models/gemini-m:streamGenerateContent?alt=sse", `{"contents":[{"role":"user","parts":[{"text":"draw"}]}]}`, nil)
	if u := g.Tally().Status(harnessv1.UsageFromGateway, ""); u == nil || u.UncountedResponses != 1 {
		t.Errorf("without a limit, the answer's usage: %+v, want one uncounted response", u)
	}
}
