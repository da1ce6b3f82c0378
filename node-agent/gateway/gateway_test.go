package gateway

import (
	"bufio"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/fakeprovider"
	"github.com/harnessfacts/harnessfacts/node-agent/egress"
	"github.com/harnessfacts/harnessfacts/node-agent/usage"
)

const realKey = "sk-real-5f1c0a9e7d3b2c41"

// upstream is fake-provider serving TLS on loopback, with every request's
// headers, host and URL recorded as they arrived.
type upstream struct {
	srv      *httptest.Server
	provider *fakeprovider.Provider
	pool     *x509.CertPool
	mu       sync.Mutex
	seen     []*http.Request
	// fail, when set, answers instead of the provider (nil: the provider).
	fail func(w http.ResponseWriter, n int) bool
	hits atomic.Int64
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	s, err := fakeprovider.ParseScript([]byte("steps:\n- answer: done\n"))
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{provider: fakeprovider.New(fakeprovider.Options{Script: s})}
	u.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(u.hits.Add(1))
		u.mu.Lock()
		u.seen = append(u.seen, r.Clone(r.Context()))
		u.mu.Unlock()
		if u.fail != nil && u.fail(w, n) {
			return
		}
		u.provider.ServeHTTP(w, r)
	}))
	t.Cleanup(u.srv.Close)
	u.pool = x509.NewCertPool()
	u.pool.AddCert(u.srv.Certificate())
	return u
}

func (u *upstream) requests() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*http.Request(nil), u.seen...)
}

// serve runs a gateway on a loopback listener, as the executor runs it on
// the run's unix socket, and returns its base URL.
func serve(t *testing.T, opts Options) (*Gateway, string) {
	t.Helper()
	g, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(g, ln)
	t.Cleanup(s.Close)
	return g, "http://" + ln.Addr().String()
}

func post(t *testing.T, url, body string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// The requests of each dialect a CLI sends, streamed and not.
var dialectRequests = []struct {
	name, path, body string
	header           KeyHeader
	forged           map[string]string
}{
	{"anthropic stream", "/v1/messages?beta=true", `{"model":"claude-m","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`, XAPIKey,
		map[string]string{"X-Api-Key": "placeholder", "Authorization": "Bearer forged-auth"}},
	{"anthropic whole", "/v1/messages", `{"model":"claude-m","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`, XAPIKey,
		map[string]string{"X-Api-Key": "forged-x"}},
	{"responses stream", "/v1/responses", `{"model":"gpt-m","stream":true,"input":"hi"}`, Bearer,
		map[string]string{"Authorization": "Bearer forged", "X-Goog-Api-Key": "forged-goog"}},
	{"responses whole", "/v1/responses", `{"model":"gpt-m","stream":false,"input":"hi"}`, Bearer, nil},
	{"chat stream", "/v1/chat/completions", `{"model":"gpt-c","stream":true,"messages":[{"role":"user","content":"hi"}]}`, Bearer,
		map[string]string{"Authorization": "Bearer forged", "Cookie": "s=forged-cookie", "X-HTTP-Method-Override": "forged-DELETE"}},
	{"chat whole", "/v1/chat/completions", `{"model":"gpt-c","messages":[{"role":"user","content":"hi"}]}`, Bearer, nil},
	{"gemini stream", "/v1beta/models/gemini-m:streamGenerateContent?alt=sse&key=forged-query&$key=forged-dollar&access_token=forged-at&$userProject=forged-up&x=1;key=forged-semi", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, XGoogAPIKey,
		map[string]string{"X-Goog-Api-Key": "forged-goog", "X-HTTP-Method": "forged-GET", "X-Method-Override": "forged-PUT"}},
	{"gemini whole", "/v1beta/models/gemini-m:generateContent", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, XGoogAPIKey, nil},
}

// TestGatewayForwardsWithTheRunsKeyAndCountsUsage: each dialect, streamed
// and not, reaches fake-provider over verified TLS with the run's key in
// the provider's header and no credential the agent sent (a forged key in
// any header, a cookie, ?key=), and the counted usage is exactly what
// fake-provider reported.
func TestGatewayForwardsWithTheRunsKeyAndCountsUsage(t *testing.T) {
	up := startUpstream(t)
	for _, c := range dialectRequests {
		t.Run(c.name, func(t *testing.T) {
			before := len(up.provider.Requests())
			g, base := serve(t, Options{Upstream: up.srv.URL, Header: c.header, Key: []byte(realKey), RootCAs: up.pool})
			resp, body := post(t, base+c.path, c.body, c.forged)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			recs := up.provider.Requests()[before:]
			if len(recs) != 1 {
				t.Fatalf("provider saw %d requests", len(recs))
			}
			rec := recs[0]
			if rec.KeySHA256 != fakeprovider.KeyDigest(realKey) || rec.AuthHeader != strings.ToLower(string(c.header)) {
				t.Errorf("the provider got key digest %s in %q, want the run's key (%s) in %q", rec.KeySHA256, rec.AuthHeader, fakeprovider.KeyDigest(realKey), c.header)
			}
			seen := up.requests()[len(up.requests())-1]
			for name, vals := range seen.Header {
				for _, v := range vals {
					if strings.Contains(v, "forged") || strings.Contains(v, "placeholder") {
						t.Errorf("header %s: %q was forwarded", name, v)
					}
				}
			}
			if strings.Contains(seen.URL.RawQuery, "forged") {
				t.Errorf("query %q was forwarded", seen.URL.RawQuery)
			}
			want := usage.Counts{Input: rec.Usage.Input, Output: rec.Usage.Output, CacheRead: rec.Usage.CacheRead, CacheWrite: rec.Usage.CacheWrite}
			if want.Total() == 0 {
				t.Fatal("fake-provider reported no usage")
			}
			st := g.Tally().Status("Gateway", "")
			got := usage.Counts{Input: st.InputTokens, Output: st.OutputTokens, CacheRead: st.CacheReadTokens, CacheWrite: st.CacheWriteTokens}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("counted usage (-fake-provider +gateway):\n%s", diff)
			}
			// The model that answered, as the reply says (not the one asked for).
			if st.Requests != 1 || len(st.Models) != 1 || st.Models[0] != rec.Usage.Model || rec.Usage.Model == rec.Model {
				t.Errorf("requests %d models %v, want 1 and [%s] (asked for %s)", st.Requests, st.Models, rec.Usage.Model, rec.Model)
			}
		})
	}
}

// A key from a Secret made with --from-file ends in a newline: the provider
// gets the key without it (a header cannot carry one); a key with a control
// character inside is refused at once, without the key in the error.
func TestGatewayKeyFromAFile(t *testing.T) {
	up := startUpstream(t)
	_, base := serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(" " + realKey + "\r\n"), RootCAs: up.pool})
	resp, body := post(t, base+dialectRequests[1].path, dialectRequests[1].body, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if rec := up.provider.Requests(); len(rec) != 1 || rec[0].KeySHA256 != fakeprovider.KeyDigest(realKey) {
		t.Errorf("the provider got %+v, want the key without its white space", rec)
	}
	_, err := New(Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey + "\nX-Other: y")})
	if err == nil || strings.Contains(err.Error(), realKey) {
		t.Errorf("a key with a newline inside: %v, want a refusal that does not name it", err)
	}
}

// TestGatewayIgnoresHostAndAbsoluteURLs: a request naming another host in
// its Host header or as an absolute URL still goes to the run's provider,
// and nowhere else.
func TestGatewayIgnoresHostAndAbsoluteURLs(t *testing.T) {
	up := startUpstream(t)
	elsewhere := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("a request reached the other host")
	}))
	defer elsewhere.Close()
	_, base := serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: up.pool})
	addr := strings.TrimPrefix(base, "http://")
	other := strings.TrimPrefix(elsewhere.URL, "http://")
	body := `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	for _, reqLine := range []string{
		"POST http://" + other + "/v1/messages HTTP/1.1\r\nHost: " + other,
		"POST /v1/messages HTTP/1.1\r\nHost: " + other,
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "%s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", reqLine, len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		_ = conn.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%q: status %d", reqLine, resp.StatusCode)
		}
	}
	for _, r := range up.requests() {
		if r.Host != strings.TrimPrefix(up.srv.URL, "https://") {
			t.Errorf("the provider got Host %q", r.Host)
		}
	}
	if n := up.hits.Load(); n != 2 {
		t.Errorf("the provider got %d requests, want 2", n)
	}
}

// TestGatewayRefusesWhatIsNotTheModelAPI: other paths of the provider's API
// (files, keys, admin), escapes out of the model paths and other methods
// never reach the provider with the run's key.
func TestGatewayRefusesWhatIsNotTheModelAPI(t *testing.T) {
	up := startUpstream(t)
	_, base := serve(t, Options{Upstream: up.srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: up.pool})
	addr := strings.TrimPrefix(base, "http://")
	for _, target := range []string{
		"POST /v1/files", "POST /v1/organization/api_keys", "POST /v1/messages/../files",
		"POST /v1/models/..%2Ffiles", "POST /v1beta/models/x/../../v1/files", "DELETE /v1/models/m",
		"CONNECT evil.example:443", "POST //evil.example/v1/messages", "POST /v1/messages/batches",
		"POST /v1beta/models/m:batchGenerateContent", "POST /v1beta/models/m:predictLongRunning",
		"POST /v1beta/models/m:predict", "POST /v1beta/models/m:embedContent", "POST /v1/models/m:batchGenerateContent",
		"POST /v1beta/models/:generateContent", "POST /v1beta/models/m:generateContent:x",
		"GET /v1/chat/completions", "GET /v1/chat/completions?limit=100", "GET /v1/messages", "POST /v1/models",
		"GET /v1beta/models/m:generateContent",
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		method, uri, _ := strings.Cut(target, " ")
		fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", method, uri)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		_ = resp.Body.Close()
		_ = conn.Close()
		if resp.StatusCode/100 == 2 {
			t.Errorf("%s: status %d", target, resp.StatusCode)
		}
	}
	if n := up.hits.Load(); n != 0 {
		t.Errorf("%d refused requests reached the provider", n)
	}
}

// TestAllowedPaths: what the CLIs call is forwarded, the rest of a model's
// methods is not (TestGatewayRefusesWhatIsNotTheModelAPI sends them), and
// each with its method only.
func TestAllowedPaths(t *testing.T) {
	for target, want := range map[string]bool{
		"POST /v1/messages": true, "POST /v1/messages/count_tokens": true, "POST /v1/responses": true,
		"POST /v1/responses/compact": true, "POST /v1/chat/completions": true,
		"GET /v1/models": true, "GET /v1/models/gpt-m": true, "GET /v1beta/models": true, "GET /v1beta/models/gemini-m": true,
		"POST /v1beta/models/gemini-m:generateContent": true, "POST /v1beta/models/gemini-m:streamGenerateContent": true,
		"POST /v1beta/models/gemini-m:countTokens": true,
		// A GET of chat completions lists the project's stored ones.
		"GET /v1/chat/completions": false, "GET /v1/messages": false, "GET /v1/responses": false,
		"POST /v1/models": false, "POST /v1beta/models/gemini-m": false, "GET /v1beta/models/gemini-m:generateContent": false,
		"POST /v1beta/models/gemini-m:batchGenerateContent": false, "POST /v1beta/models/gemini-m:predictLongRunning": false,
		"POST /v1beta/models/gemini-m:embedContent": false, "POST /v1beta/models/gemini-m:batchEmbedContents": false,
		"POST /v1beta/models/:generateContent": false, "POST /v1beta/models/gemini-m:": false,
		"GET /v1beta/models/gemini-m/operations": false, "POST /v1/messages/batches": false, "POST /v1/files": false,
	} {
		method, p, _ := strings.Cut(target, " ")
		if got := allowed(method, p); got != want {
			t.Errorf("allowed(%s) = %v, want %v", target, got, want)
		}
	}
}

// TestGatewayRefusesProtocolUpgrades: a provider that would switch to
// whatever protocol is asked (as one serving WebSocket answers does) never
// gets an upgrade request through the gateway, whatever the Upgrade header
// says: a switched connection would be a tunnel with the run's key on its
// request and nothing of it counted.
func TestGatewayRefusesProtocolUpgrades(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\ntunnel open\n", r.Header.Get("Upgrade"))
		_ = brw.Flush()
	}))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	up := &upstream{srv: srv, pool: pool}
	_, base := serve(t, Options{Upstream: up.srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: up.pool})
	addr := strings.TrimPrefix(base, "http://")
	for _, upgrade := range []string{"websocket", "WebSocket", "websocket, x", "x, websocket", "h2c", "tunnel", "websocket\r\nUpgrade: h2c"} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET /v1/responses HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: %s\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", upgrade)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("Upgrade: %q: %v", upgrade, err)
		}
		_ = resp.Body.Close()
		_ = conn.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("Upgrade: %q: status %d, want 404 (Codex then uses plain HTTP)", upgrade, resp.StatusCode)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d upgrade requests reached the provider", n)
	}
}

// TestGatewayStopsOnACertificateThatDoesNotVerify: the gateway does not
// trust the provider's test CA, so the run ends with its reason, and no
// request reached the provider with the key.
func TestGatewayStopsOnACertificateThatDoesNotVerify(t *testing.T) {
	up := startUpstream(t)
	var stops []*Stop
	g, base := serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: x509.NewCertPool(),
		OnStop: func(s *Stop) { stops = append(stops, s) }})
	resp, _ := post(t, base+"/v1/messages", `{"model":"m","messages":[]}`, nil)
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status %d, want 502", resp.StatusCode)
	}
	s := g.Stopped()
	if s == nil || s.Reason != ReasonProviderCertificate || !s.Infrastructure || !strings.Contains(s.Message, "certificate") || len(stops) != 1 {
		t.Fatalf("stop %+v (%d calls), want %s", s, len(stops), ReasonProviderCertificate)
	}
	if len(up.provider.Requests()) != 0 {
		t.Error("the provider served a request over a connection the gateway could not verify")
	}
	// Afterwards nothing more is forwarded.
	if resp, _ := post(t, base+"/v1/messages", `{}`, nil); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("after the stop: status %d", resp.StatusCode)
	}
}

func TestGatewayLimits(t *testing.T) {
	up := startUpstream(t)
	body := `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`

	var stopped *Stop
	g, base := serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: up.pool, MaxRequests: 2,
		OnStop: func(s *Stop) { stopped = s }})
	for i := range 3 {
		resp, _ := post(t, base+"/v1/messages", body, nil)
		if want := map[bool]int{true: 200, false: 429}[i < 2]; resp.StatusCode != want {
			t.Errorf("request %d: status %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	if stopped == nil || stopped.Reason != ReasonRequestLimit || stopped.Infrastructure || g.Tally().Requests() != 2 {
		t.Errorf("stop %+v after %d requests, want %s after 2", stopped, g.Tally().Requests(), ReasonRequestLimit)
	}

	// The first reply alone is over 1000 tokens.
	g, base = serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: up.pool, MaxTokens: 1000})
	if resp, _ := post(t, base+"/v1/messages", body, nil); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if s := g.Stopped(); s == nil || s.Reason != ReasonTokenLimit {
		t.Errorf("stop %+v, want %s", s, ReasonTokenLimit)
	}
	if resp, _ := post(t, base+"/v1/messages", body, nil); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("after the token limit: status %d", resp.StatusCode)
	}
}

func TestGatewayRetries(t *testing.T) {
	up := startUpstream(t)
	fast := Retry{Attempts: 3, Base: time.Millisecond, Max: 5 * time.Millisecond}
	body := `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`

	// 429 then 503, then the provider answers: the CLI sees one answer.
	up.fail = func(w http.ResponseWriter, n int) bool {
		switch n {
		case 1:
			w.Header().Set("Retry-After", "0")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case 2:
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		default:
			return false
		}
		return true
	}
	g, base := serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: up.pool, Retry: fast})
	if resp, b := post(t, base+"/v1/messages", body, nil); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if up.hits.Load() != 3 || g.Stopped() != nil || g.Tally().Requests() != 1 {
		t.Errorf("provider hits %d, stop %+v, requests %d: want 3 tries, no stop, one request", up.hits.Load(), g.Stopped(), g.Tally().Requests())
	}
	// Each try carried the whole body.
	for _, r := range up.requests() {
		if r.ContentLength != int64(len(body)) {
			t.Errorf("a try had Content-Length %d", r.ContentLength)
		}
	}

	// Failing to the end: the CLI gets the last answer and the run goes
	// on (the CLI's own retries are the agent's), the failure remembered
	// until the provider answers again.
	up.hits.Store(0)
	down := true
	up.fail = func(w http.ResponseWriter, _ int) bool {
		if down {
			http.Error(w, "down", http.StatusBadGateway)
		}
		return down
	}
	g, base = serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: up.pool, Retry: fast})
	if resp, _ := post(t, base+"/v1/messages", body, nil); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status %d, want the provider's 502", resp.StatusCode)
	}
	f := g.ProviderFailing()
	if g.Stopped() != nil || f == nil || f.Reason != ReasonProviderUnavailable || !f.Infrastructure || !strings.Contains(f.Message, "after 3 tries") ||
		up.hits.Load() != 3 || g.ProviderErrorsHandedOver() != 1 {
		t.Errorf("stop %+v, failing %+v, %d handed over, after %d tries: want no stop, %s after 3 tries, 1", g.Stopped(), f, g.ProviderErrorsHandedOver(), up.hits.Load(), ReasonProviderUnavailable)
	}
	down = false
	if resp, b := post(t, base+"/v1/messages", body, nil); resp.StatusCode != 200 {
		t.Fatalf("the provider back: status %d: %s", resp.StatusCode, b)
	}
	if f := g.ProviderFailing(); f != nil || g.ProviderErrorsHandedOver() != 1 {
		t.Errorf("after an answered request: failing %+v, %d handed over; want none, 1", f, g.ProviderErrorsHandedOver())
	}

	// No retry would end before the deadline: one try only.
	up.hits.Store(0)
	down = true
	g, base = serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: up.pool,
		Retry: Retry{Attempts: 5, Base: time.Hour, Max: time.Hour}, Deadline: time.Now().Add(time.Minute)})
	post(t, base+"/v1/messages", body, nil)
	if f := g.ProviderFailing(); g.Stopped() != nil || f == nil || !strings.Contains(f.Message, "the episode ends") || up.hits.Load() != 1 {
		t.Errorf("stop %+v, failing %+v after %d tries, want %s after 1", g.Stopped(), f, up.hits.Load(), ReasonProviderUnavailable)
	}
}

// TestGatewayKeepsTheProvidersWait: the gateway never tries again before
// the provider said it may (Retry-After in seconds or as a date, OpenAI's
// retry-after-ms), nor at all when it said not to (x-should-retry: false)
// or asked for longer than the gateway waits: then the CLI has the answer,
// Retry-After and all, at once, and its own retries wait.
func TestGatewayKeepsTheProvidersWait(t *testing.T) {
	body := `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	pol := Retry{Attempts: 3, Base: time.Millisecond, Max: 2 * time.Second}
	for _, c := range []struct {
		name   string
		header [2]string
		tries  int64
		status int
		wait   time.Duration // at least, between the two tries
	}{
		{"Retry-After in seconds", [2]string{"Retry-After", "0.4"}, 2, 200, 400 * time.Millisecond},
		{"retry-after-ms", [2]string{"Retry-After-Ms", "300"}, 2, 200, 300 * time.Millisecond},
		{"Retry-After as a date", [2]string{"Retry-After", "date"}, 2, 200, 800 * time.Millisecond},
		{"longer than the gateway waits", [2]string{"Retry-After", "30"}, 1, http.StatusTooManyRequests, 0},
		{"x-should-retry: false", [2]string{"X-Should-Retry", "false"}, 1, http.StatusTooManyRequests, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := startUpstream(t)
			var first, second time.Time
			up.fail = func(w http.ResponseWriter, n int) bool {
				if n == 1 {
					first = time.Now()
					v := c.header[1]
					if v == "date" {
						// A second's resolution: at least a second from now.
						v = first.Add(2 * time.Second).UTC().Format(http.TimeFormat)
					}
					w.Header().Set(c.header[0], v)
					http.Error(w, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, http.StatusTooManyRequests)
					return true
				}
				second = time.Now()
				return false
			}
			g, base := serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: up.pool, Retry: pol})
			resp, b := post(t, base+"/v1/messages", body, nil)
			if resp.StatusCode != c.status || up.hits.Load() != c.tries || g.Stopped() != nil {
				t.Fatalf("status %d after %d tries, stop %+v: want %d after %d, no stop (%s)", resp.StatusCode, up.hits.Load(), g.Stopped(), c.status, c.tries, b)
			}
			if c.tries == 2 {
				if d := second.Sub(first); d < c.wait {
					t.Errorf("tried again %s after the provider's %s: %q", d, c.header[0], c.header[1])
				}
				return
			}
			if got := resp.Header.Get(c.header[0]); got != c.header[1] {
				t.Errorf("the CLI had %s %q, want the provider's %q", c.header[0], got, c.header[1])
			}
			// One rate limit judges nothing: an agent can cause one itself.
			if f := g.ProviderFailing(); f != nil || g.ProviderErrorsHandedOver() != 1 {
				t.Errorf("failing %+v, %d handed over: want none yet, 1", f, g.ProviderErrorsHandedOver())
			}
		})
	}
}

// TestProviderFailingHolds: a failure after the gateway's tries judges a run
// that did not pass only if it held: a 5xx or an unreachable provider at
// once, rate limits only over a minute and three requests with no answer
// between (one the agent caused itself, spending the key's window with a
// large request, must not turn its failure into the provider's).
// TestProviderRefusalsAreTheKeys: an answer that refuses the run's key or
// its account, as each provider documents it, is not retried, goes to the
// CLI byte for byte, and is judged at once (ProviderRefusedCredential),
// unlike a rate limit of the agent's own making; the third in a row ends
// the run, and an answer between ends the span. Look-alikes (a 429 rate limit, a 400 of the agent's request)
// are not refusals.
func TestProviderRefusalsAreTheKeys(t *testing.T) {
	fast := Retry{Attempts: 3, Base: time.Millisecond, Max: 5 * time.Millisecond}
	body := `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	for _, c := range []struct {
		name, answer string
		status       int
		refused      bool
		code         string
		tries        int64
	}{
		{"Anthropic authentication_error", `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},"request_id":"req_1"}`, 401, true, "authentication_error", 1},
		{"Anthropic billing_error", `{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low."}}`, 402, true, "billing_error", 1},
		{"OpenAI invalid_api_key", `{"error":{"message":"Incorrect API key provided: sk-proj-****abcd.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, 401, true, "invalid_api_key", 1},
		{"OpenAI insufficient_quota", `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`, 429, true, "insufficient_quota", 1},
		{"Gemini API_KEY_INVALID", `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}`, 400, true, "API_KEY_INVALID", 1},
		{"a 401 with no document", `unauthorized`, 401, true, "", 1},
		{"OpenAI rate limit", `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, 429, false, "", 3},
		{"Anthropic invalid request", `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: field required"}}`, 400, false, "", 1},
		{"Gemini bad argument", `{"error":{"code":400,"message":"bad","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.BadRequest"}]}}`, 400, false, "", 1},
		{"a code that is no token", `{"error":{"code":"insufficient_quota \u001b[2J","type":"x"}}`, 429, false, "", 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := startUpstream(t)
			refusing := true
			up.fail = func(w http.ResponseWriter, _ int) bool {
				if !refusing {
					return false
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, c.answer)
				return true
			}
			g, base := serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: up.pool, Retry: fast})
			resp, got := post(t, base+"/v1/messages", body, nil)
			if resp.StatusCode != c.status || got != c.answer {
				t.Errorf("the CLI got %d %q, want the provider's %d %q", resp.StatusCode, got, c.status, c.answer)
			}
			if n := up.hits.Load(); n != c.tries {
				t.Errorf("%d tries, want %d", n, c.tries)
			}
			f := g.ProviderFailing()
			switch {
			case c.refused && (f == nil || f.Reason != ReasonProviderRefused || !f.Infrastructure || !strings.Contains(f.Message, fmt.Sprint(c.status))):
				t.Errorf("failing %+v, want %s naming HTTP %d", f, ReasonProviderRefused, c.status)
			case c.refused && c.code != "" && !strings.Contains(f.Message, "("+c.code+")"):
				t.Errorf("failing %q does not name the code %s", f.Message, c.code)
			case c.refused && strings.Contains(f.Message, "abcd"):
				t.Errorf("failing %q quotes the provider's message", f.Message)
			case !c.refused && f != nil && f.Reason == ReasonProviderRefused:
				t.Errorf("judged a refusal: %+v", f)
			}
			if !c.refused {
				return
			}
			// The third refusal in a row ends the run.
			if g.Stopped() != nil {
				t.Errorf("one refusal stopped the run: %+v", g.Stopped())
			}
			post(t, base+"/v1/messages", body, nil)
			if g.Stopped() != nil {
				t.Errorf("two refusals stopped the run: %+v", g.Stopped())
			}
			post(t, base+"/v1/messages", body, nil)
			if s := g.Stopped(); s == nil || s.Reason != ReasonProviderRefused || !s.Infrastructure || !strings.Contains(s.Message, "last 3 model requests") {
				t.Errorf("after three refusals in a row: stop %+v, want %s", s, ReasonProviderRefused)
			}
			// An answer between ends the span.
			g, base = serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: up.pool, Retry: fast})
			post(t, base+"/v1/messages", body, nil)
			post(t, base+"/v1/messages", body, nil)
			refusing = false
			if resp, b := post(t, base+"/v1/messages", body, nil); resp.StatusCode != 200 {
				t.Fatalf("the provider back: %d %s", resp.StatusCode, b)
			}
			if f := g.ProviderFailing(); f != nil {
				t.Errorf("after an answer: failing %+v", f)
			}
			refusing = true
			post(t, base+"/v1/messages", body, nil)
			if s, f := g.Stopped(), g.ProviderFailing(); s != nil || f == nil || !strings.Contains(f.Message, "last 1 model requests") {
				t.Errorf("two refusals, an answer, a refusal: stop %+v, failing %+v; want no stop, the last refusal judged", s, f)
			}
			// A key kept from listing models, which the agent lists
			// as often as it likes: never the key's failure.
			g, base = serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: up.pool, Retry: fast})
			for range 4 {
				resp, err := http.Get(base + "/v1/models")
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				if resp.StatusCode != c.status {
					t.Fatalf("GET /v1/models: %d, want the provider's %d", resp.StatusCode, c.status)
				}
			}
			if s, f := g.Stopped(), g.ProviderFailing(); s != nil || f != nil {
				t.Errorf("refused model lists: stop %+v, failing %+v; want neither", s, f)
			}
		})
	}
}

func TestProviderFailingHolds(t *testing.T) {
	g, err := New(Options{Upstream: "https://provider.test"})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	for name, c := range map[string]struct {
		f    *failure
		want bool
	}{
		"none":                             {nil, false},
		"a 502 after the tries":            {&failure{first: t0, last: t0, requests: 1, what: "HTTP 502"}, true},
		"one rate limit":                   {&failure{first: t0, last: t0, requests: 1, rateLimited: true}, false},
		"rate limits for 59 s":             {&failure{first: t0, last: t0.Add(59 * time.Second), requests: 5, rateLimited: true}, false},
		"two rate limits over two minutes": {&failure{first: t0, last: t0.Add(2 * time.Minute), requests: 2, rateLimited: true}, false},
		"three over a minute":              {&failure{first: t0, last: t0.Add(time.Minute), requests: 3, rateLimited: true, what: "HTTP 429"}, true},
	} {
		g.failing = c.f
		got := g.ProviderFailing()
		if (got != nil) != c.want {
			t.Errorf("%s: %+v, want judged %v", name, got, c.want)
		}
		if got != nil && (got.Reason != ReasonProviderUnavailable || !got.Infrastructure || !strings.Contains(got.Message, c.f.what)) {
			t.Errorf("%s: %+v", name, got)
		}
	}
}

func TestCheckUpstream(t *testing.T) {
	for raw, ok := range map[string]bool{
		"https://api.anthropic.com":     true,
		"https://127.0.0.1:8443/s/x":    true,
		"http://127.0.0.1:8080/s/hello": true,
		"http://localhost:1234":         true,
		"http://api.openai.com":         false,
		"http://10.0.0.1:80":            false,
		"https://user:pw@example.com":   false,
		"https://example.com/?key=x":    false,
		"ftp://example.com":             false,
		"example.com":                   false,
	} {
		if _, err := CheckUpstream(raw); (err == nil) != ok {
			t.Errorf("CheckUpstream(%q) = %v, want ok=%v", raw, err, ok)
		}
	}
}

// TestGatewayWithoutAKey: a provider that takes no key (a local model
// server) still gets nothing the agent sent as a credential, and the run's
// usage is counted.
func TestGatewayWithoutAKey(t *testing.T) {
	up := startUpstream(t)
	g, base := serve(t, Options{Upstream: up.srv.URL, RootCAs: up.pool})
	resp, body := post(t, base+"/v1/messages", `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`,
		map[string]string{"X-Api-Key": "forged", "Authorization": "Bearer forged"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	r := up.requests()[0]
	if r.Header.Get("X-Api-Key") != "" || r.Header.Get("Authorization") != "" {
		t.Errorf("a credential was forwarded: %v", r.Header)
	}
	if g.Tally().Counts().Total() == 0 {
		t.Error("no usage counted")
	}
	if _, err := New(Options{Upstream: up.srv.URL, Header: XAPIKey}); err == nil {
		t.Error("a key header without a key was accepted")
	}
}

// TestGatewayDialsThroughInside: the node-agent gives the gateway the run's
// egress.Inside dialer. A provider at an inside address the run may not
// reach (here loopback on a port that is not the providerURL's) is never
// connected to: the run ends with PolicyViolation, unretried; the
// providerURL's own loopback port is reached.
func TestGatewayDialsThroughInside(t *testing.T) {
	up := startUpstream(t)
	port := up.srv.Listener.Addr().(*net.TCPAddr).Port
	var stops []*Stop
	g, base := serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: up.pool,
		Retry:  Retry{Attempts: 4, Base: time.Millisecond, Max: time.Millisecond},
		Dial:   (&egress.Inside{Loopback: []string{fmt.Sprintf("127.0.0.1:%d", port+1)}}).Dialer(time.Second),
		OnStop: func(s *Stop) { stops = append(stops, s) }})
	resp, _ := post(t, base+"/v1/messages", `{"model":"m","max_tokens":8,"messages":[]}`, nil)
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status %d, want 502", resp.StatusCode)
	}
	s := g.Stopped()
	if s == nil || s.Reason != harnessv1.ReasonPolicyViolation || s.Infrastructure || !strings.Contains(s.Message, "a loopback address") || len(stops) != 1 {
		t.Fatalf("stop %+v (%d calls), want %s naming a loopback address", s, len(stops), harnessv1.ReasonPolicyViolation)
	}
	if n := up.hits.Load(); n != 0 {
		t.Errorf("the provider was reached %d times", n)
	}

	g, base = serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: up.pool,
		Dial: (&egress.Inside{Loopback: []string{fmt.Sprintf("127.0.0.1:%d", port)}}).Dialer(time.Second)})
	if resp, body := post(t, base+"/v1/messages", `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("the providerURL's own loopback port: %d %s", resp.StatusCode, body)
	}
	if g.Stopped() != nil {
		t.Errorf("stopped: %+v", g.Stopped())
	}
}

// TestNodeBodiesBoundEveryRunTogether: two runs' gateways share the node's
// slots of held request bodies (four here). With the provider slow to
// answer, eight requests from the two agents hold at most four bodies at
// once (the provider sees four, the others wait, none is refused), and all
// are answered once it answers.
func TestNodeBodiesBoundEveryRunTogether(t *testing.T) {
	u := startUpstream(t)
	gate := make(chan struct{})
	var closeGate sync.Once
	release := func() { closeGate.Do(func() { close(gate) }) }
	t.Cleanup(release) // a failure must not leave requests hanging
	var inFlight atomic.Int64
	u.fail = func(w http.ResponseWriter, _ int) bool {
		inFlight.Add(1)
		<-gate
		return false
	}
	node := NewNodeBodies(0) // the least: one run's worth, four slots
	if cap(node) != MaxHeldBodies {
		t.Fatalf("NewNodeBodies(0) has %d slots, want %d", cap(node), MaxHeldBodies)
	}
	var urls []string
	for range 2 {
		_, url := serve(t, Options{Upstream: u.srv.URL, Header: XAPIKey, Key: []byte("k"), RootCAs: u.pool, NodeBodies: node})
		urls = append(urls, url)
	}
	var wg sync.WaitGroup
	codes := make(chan int, 8)
	for i := range 8 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, urls[i%2]+"/v1/messages", strings.NewReader(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for inFlight.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a fifth would have arrived by now
	if got := inFlight.Load(); got != 4 {
		release()
		wg.Wait()
		t.Fatalf("%d requests reached the provider at once from two runs sharing four slots, want 4", got)
	}
	release()
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("a request got HTTP %d; waiting requests must be served, not refused", c)
		}
	}
}

// TestNodeBodiesAreNotHeldByABodyThatNeverArrives: the node's slots of
// held request bodies are shared by every run on the node, whoever's they
// are. Two hostile agents (runs of one namespace) that each open four
// requests and send their headers and a byte of body, then nothing, must
// not keep a third run's agent (another tenant's) from its provider: a
// body must arrive within the gateway's body timeout, or the request is
// refused and its slot given back.
func TestNodeBodiesAreNotHeldByABodyThatNeverArrives(t *testing.T) {
	u := startUpstream(t)
	node := NewNodeBodies(128 << 20)
	slots := cap(node)
	opts := Options{Upstream: u.srv.URL, Header: XAPIKey, Key: []byte("k"), RootCAs: u.pool, NodeBodies: node, BodyTimeout: time.Second}
	var hostile []string
	for range slots / MaxHeldBodies {
		_, url := serve(t, opts)
		hostile = append(hostile, strings.TrimPrefix(url, "http://"))
	}
	for i := range slots {
		c, err := net.Dial("tcp", hostile[i%len(hostile)])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := io.WriteString(c, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(node) < slots && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(node) < slots {
		t.Fatalf("the hostile requests hold %d of the node's %d slots, want all", len(node), slots)
	}
	_, victim := serve(t, opts)
	req, _ := http.NewRequest(http.MethodPost, victim+"/v1/messages", strings.NewReader(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("another run's request was not answered within %s while hostile bodies held the node's slots: %v", time.Since(start).Round(time.Millisecond), err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("another run's request got HTTP %d, want 200", resp.StatusCode)
	}
}

// TestRunSharesOfNodeBodiesKeepSlowProvidersToTheirRuns: a run author's
// own provider may take minutes to send its answer's headers, and the
// request's body is held all that time. With each run holding at most its
// share of the node's slots (8 slots over 4 runs: 2 each, as the executor
// gives them), three runs whose provider never answers leave the fourth
// run's requests their share; with four each, two such runs held all 8.
func TestRunSharesOfNodeBodiesKeepSlowProvidersToTheirRuns(t *testing.T) {
	u := startUpstream(t)
	gate := make(chan struct{})
	var closeGate sync.Once
	release := func() { closeGate.Do(func() { close(gate) }) }
	t.Cleanup(release)
	var slow atomic.Int64
	u.fail = func(w http.ResponseWriter, _ int) bool {
		slow.Add(1)
		<-gate
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	}
	node := NewNodeBodies(128 << 20)
	const runs = 4
	share := cap(node) / runs
	slowOpts := Options{Upstream: u.srv.URL, Header: XAPIKey, Key: []byte("k"), RootCAs: u.pool, NodeBodies: node, MaxHeldBodies: share,
		Retry: Retry{Attempts: 1}}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(release)
	for range runs - 1 {
		_, url := serve(t, slowOpts)
		for range MaxHeldBodies {
			wg.Go(func() {
				resp, err := http.Post(url+"/v1/messages", "application/json", strings.NewReader(`{"model":"slow","max_tokens":8,"messages":[]}`))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			})
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for slow.Load() < int64((runs-1)*share) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // more would have reached the provider by now
	if got, want := len(node), (runs-1)*share; got != want {
		t.Fatalf("three slow runs hold %d of the node's %d slots, want their shares, %d", got, cap(node), want)
	}
	fast := startUpstream(t)
	_, victim := serve(t, Options{Upstream: fast.srv.URL, Header: XAPIKey, Key: []byte("k"), RootCAs: fast.pool, NodeBodies: node, MaxHeldBodies: share})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, victim+"/v1/messages", strings.NewReader(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the fourth run's request waited on the slow runs' bodies: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the fourth run's request got HTTP %d, want 200", resp.StatusCode)
	}
}

// TestGatewayScopesTheKeyAsTheRunSelected: the agent cannot pick another
// organization or project for the run's key: the provider gets the run's,
// or none.
func TestGatewayScopesTheKeyAsTheRunSelected(t *testing.T) {
	up := startUpstream(t)
	forged := map[string]string{"OpenAI-Organization": "org-forged", "OpenAI-Project": "proj-forged", "X-Goog-User-Project": "gp-forged"}
	for _, c := range []struct {
		name  string
		scope map[string]string
		want  map[string]string
	}{
		{"none selected", nil, map[string]string{}},
		{"the run's organization", map[string]string{"OpenAI-Organization": "org-run\n"}, map[string]string{"Openai-Organization": "org-run"}},
	} {
		_, base := serve(t, Options{Upstream: up.srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: up.pool, Scope: c.scope})
		if resp, body := post(t, base+"/v1/responses", `{"model":"gpt-m","input":"hi"}`, forged); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d: %s", c.name, resp.StatusCode, body)
		}
		seen := up.requests()[len(up.requests())-1]
		got := map[string]string{}
		for _, h := range ScopeHeaders {
			if v := seen.Header.Get(h); v != "" {
				got[http.CanonicalHeaderKey(h)] = v
			}
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s: the provider got (-want +got):\n%s", c.name, diff)
		}
	}
	for _, scope := range []map[string]string{{"OpenAI-Organization": "org\r\nX-Evil: 1"}, {"Authorization": "x"}, {"OpenAI-Project": " "}} {
		if _, err := New(Options{Upstream: up.srv.URL, Header: Bearer, Key: []byte(realKey), Scope: scope}); err == nil {
			t.Errorf("scope %q accepted", scope)
		}
	}
}

// TestGatewayBoundsRequestsInFlight: at most MaxInFlight of a run's
// requests are with the provider at once, streaming answers included (a
// request's held body goes when its answer begins); the others wait, then
// pass.
func TestGatewayBoundsRequestsInFlight(t *testing.T) {
	var now, most atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		defer now.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		// Streamed: the answer begins at once (which lets the request's
		// held body go) and ends when released.
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n")
	}))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	_, base := serve(t, Options{Upstream: srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: pool})
	const sent = MaxInFlight + 4
	codes := make(chan int, sent)
	for range sent {
		go func() {
			resp, err := http.Post(base+"/v1/messages", "application/json", strings.NewReader(`{"model":"m"}`))
			if err != nil {
				codes <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body) // the request is in flight until its answer ends
			_ = resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for now.Load() < MaxInFlight && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the other four had time to get through, if they could
	if n := now.Load(); n != MaxInFlight {
		t.Errorf("%d requests with the provider at once, want %d", n, MaxInFlight)
	}
	close(release)
	for range sent {
		if c := <-codes; c != http.StatusOK {
			t.Errorf("a request got %d", c)
		}
	}
	if m := most.Load(); m != MaxInFlight {
		t.Errorf("at most %d with the provider at once, want %d", m, MaxInFlight)
	}
}

// Codex's remote compaction (POST /v1/responses/compact) has the model
// read the whole conversation: its answer's usage is counted as a
// Response's and held to the token limit, so that an agent cannot spend
// through it uncounted.
func TestGatewayCountsCompaction(t *testing.T) {
	const compaction = `{"id":"cmp_1","object":"response.compaction","model":"gpt-x-2026",` +
		`"output":[{"type":"compaction","encrypted_content":"gAAA"}],` +
		`"usage":{"input_tokens":9000,"input_tokens_details":{"cached_tokens":6000},"output_tokens":210,"total_tokens":9210}}`
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/responses/compact" {
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, compaction)
	}))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())

	g, base := serve(t, Options{Upstream: srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: pool})
	if resp, body := post(t, base+"/v1/responses/compact", `{"model":"gpt-x","input":[]}`, nil); resp.StatusCode != http.StatusOK || body != compaction {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	st := g.Tally().Status("Gateway", "")
	if st.InputTokens != 3000 || st.CacheReadTokens != 6000 || st.OutputTokens != 210 || st.UncountedResponses != 0 || st.Requests != 1 {
		t.Errorf("counted %+v, want 3000 in, 6000 cache read, 210 out", st)
	}

	g, base = serve(t, Options{Upstream: srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: pool, MaxTokens: 5000})
	if resp, body := post(t, base+"/v1/responses/compact", `{"model":"gpt-x","input":[]}`, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if s := g.Stopped(); s == nil || s.Reason != ReasonTokenLimit {
		t.Errorf("stop %+v after a compaction of 9210 tokens, want %s (limit 5000)", s, ReasonTokenLimit)
	}
}

// TestGatewayHoldsLittleOfHostileAnswers: a provider (a run author's own)
// that streams an event of megabytes on each of the run's 16 streams at
// once holds no more of the node-agent's memory than the run's budget of
// answers (maxHeldAnswers) and a little per stream: it held two copies of
// each event before, 96 MiB here. The events after it are counted.
func TestGatewayHoldsLittleOfHostileAnswers(t *testing.T) {
	const event = 3 << 20
	u := startUpstream(t)
	gate := make(chan struct{})
	var closeGate sync.Once
	release := func() { closeGate.Do(func() { close(gate) }) }
	t.Cleanup(release)
	u.fail = func(w http.ResponseWriter, _ int) bool {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\""+strings.Repeat("x", event))
		w.(http.Flusher).Flush()
		<-gate
		_, _ = io.WriteString(w, "\"}}]}\n\n"+chatUsageEv+chatDone)
		return true
	}
	g, url := serve(t, Options{Upstream: u.srv.URL, Header: Bearer, Key: []byte("k"), RootCAs: u.pool})
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	var arrived sync.WaitGroup
	for range MaxInFlight {
		arrived.Add(1)
		wg.Go(func() {
			resp, err := http.Post(url+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"gpt-c","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			if err != nil {
				t.Error(err)
				arrived.Done()
				return
			}
			defer func() { _ = resp.Body.Close() }()
			n, _ := io.CopyN(io.Discard, resp.Body, event)
			arrived.Done()
			rest, _ := io.ReadAll(resp.Body)
			if n != event || !strings.Contains(string(rest), "[DONE]") || strings.Contains(string(rest), `"choices":[],"usage"`) {
				t.Errorf("the agent read %d bytes of the event, then %q", n, rest)
			}
		})
	}
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		// Held before: the filter kept each event until its end.
		t.Errorf("the agents did not get their events as they arrived")
	}
	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	release()
	wg.Wait()
	held := int64(during.HeapInuse) - int64(before.HeapInuse)
	t.Logf("%d streams of a %d MiB event: %.1f MiB more heap in use", MaxInFlight, event>>20, float64(held)/(1<<20))
	if held > maxHeldAnswers+16<<20 {
		t.Errorf("the gateway holds %.1f MiB of %d streams' events, want at most the run's budget (%d MiB) and a little", float64(held)/(1<<20), MaxInFlight, maxHeldAnswers>>20)
	}
	if c := g.Tally().Counts(); c.Input != 5*MaxInFlight || c.Output != 2*MaxInFlight {
		t.Errorf("counted %+v, want each stream's usage chunk", c)
	}
	if left := g.answers.Left(); left != maxHeldAnswers {
		t.Errorf("the budget has %d bytes left once the answers are done, want %d", left, maxHeldAnswers)
	}
}

// geminiRateLimit is a 429 as the Gemini API sends it: no Retry-After
// header, the wait in a google.rpc.RetryInfo among the error's details.
func geminiRateLimit(delay string) string {
	return `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED",` +
		`"details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaValue":"10"}]},` +
		`{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},` +
		`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"` + delay + `"}]}}`
}

// TestGatewayKeepsGeminisRetryDelay: Gemini says how long to wait in its
// error body, not in a header. The gateway tries again no sooner than
// that, and hands a longer wait to the CLI at once, its body whole (Gemini
// CLI waits it out); before, it tried again after its own 0.5 s, 1 s and
// 2 s, three more requests against a spent quota.
func TestGatewayKeepsGeminisRetryDelay(t *testing.T) {
	body := `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`
	pol := Retry{Attempts: 3, Base: time.Millisecond, Max: 2 * time.Second}
	for _, c := range []struct {
		name, errBody string
		tries         int64
		status        int
		wait          time.Duration
	}{
		{"a short wait", geminiRateLimit("0.4s"), 2, 200, 400 * time.Millisecond},
		{"a streamed request's array", "[" + geminiRateLimit("0.3s") + "]", 2, 200, 300 * time.Millisecond},
		{"longer than the gateway waits", geminiRateLimit("22s"), 1, http.StatusTooManyRequests, 0},
		{"a body past what is read", strings.Repeat(" ", maxErrorPeek) + geminiRateLimit("22s"), 3, http.StatusTooManyRequests, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := startUpstream(t)
			var first, second time.Time
			up.fail = func(w http.ResponseWriter, n int) bool {
				if n == 1 || c.status != 200 {
					first = time.Now()
					w.Header().Set("Content-Type", "application/json; charset=UTF-8")
					w.WriteHeader(http.StatusTooManyRequests)
					_, _ = io.WriteString(w, c.errBody)
					return true
				}
				second = time.Now()
				return false
			}
			g, base := serve(t, Options{Upstream: up.srv.URL, Header: XGoogAPIKey, Key: []byte(realKey), RootCAs: up.pool, Retry: pol})
			resp, b := post(t, base+"/v1beta/models/gemini-m:generateContent", body, nil)
			if resp.StatusCode != c.status || up.hits.Load() != c.tries || g.Stopped() != nil {
				t.Fatalf("status %d after %d tries, stop %+v: want %d after %d, no stop (%.200s)", resp.StatusCode, up.hits.Load(), g.Stopped(), c.status, c.tries, b)
			}
			if c.status == 200 {
				if d := second.Sub(first); d < c.wait {
					t.Errorf("tried again %s after the provider's retryDelay of %s", d, c.wait)
				}
				return
			}
			if b != c.errBody {
				t.Errorf("the CLI had %d bytes of the provider's %d-byte error body", len(b), len(c.errBody))
			}
		})
	}
}

// status.usage.requests counts the model requests: a count of tokens
// (Anthropic's count_tokens, Gemini's countTokens, both free) and a listing
// of models go through the gateway but are no generation, and counted as
// one they made requests disagree with the provider's own count of the
// answers it billed (before, a run whose CLI counted tokens once showed
// one request more than its provider served).
func TestGatewayCountsOnlyGenerationsAsRequests(t *testing.T) {
	const message = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"hi"}],` +
		`"stop_reason":"end_turn","usage":{"input_tokens":120,"cache_read_input_tokens":30,"cache_creation_input_tokens":5,"output_tokens":9}}`
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "POST /v1/messages":
			_, _ = io.WriteString(w, message)
		case "POST /v1/messages/count_tokens":
			_, _ = io.WriteString(w, `{"input_tokens":4321}`)
		case "POST /v1beta/models/g:countTokens":
			_, _ = io.WriteString(w, `{"totalTokens":1234}`)
		case "GET /v1/models":
			_, _ = io.WriteString(w, `{"data":[{"type":"model","id":"claude-x"}],"has_more":false}`)
		default:
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	g, base := serve(t, Options{Upstream: srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: pool})
	for _, p := range []string{"/v1/messages/count_tokens", "/v1beta/models/g:countTokens", "/v1/messages"} {
		if resp, body := post(t, base+p, `{"model":"claude-x","messages":[{"role":"user","content":"hi"}]}`, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d: %s", p, resp.StatusCode, body)
		}
	}
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/models: status %d", resp.StatusCode)
	}
	st := g.Tally().Status("Gateway", "")
	if st.Requests != 1 || st.UncountedResponses != 0 || st.InputTokens != 120 || st.CacheReadTokens != 30 || st.CacheWriteTokens != 5 || st.OutputTokens != 9 {
		t.Errorf("counted %+v, want 1 request of 120 in, 30 cache read, 5 cache write, 9 out", st)
	}
}

// TestGatewayDropsTheAgentsTrailers: a request's chunked body may end in
// trailer fields, which the gateway forwarded to the provider as they came
// (announced in a Trailer header): a forged key, scope and content type
// reached the provider after the body, past the headers the gateway drops
// and sets. A server that merges trailers into the request's headers
// (Tomcat's allowedTrailerHeaders, some proxies) would read them. No model
// API takes trailers: the provider gets none, and the body goes with its
// Content-Length.
func TestGatewayDropsTheAgentsTrailers(t *testing.T) {
	type seen struct {
		header, trailer http.Header
		te              []string
		length          int64
		body            string
	}
	got := make(chan seen, 1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Header.Clone(), r.Trailer.Clone(), r.TransferEncoding, r.ContentLength, string(b)}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	}))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	_, base := serve(t, Options{Upstream: srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: pool,
		Scope: map[string]string{"OpenAI-Organization": "org-run"}})
	const body = `{"model":"m","messages":[]}`
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", io.MultiReader(strings.NewReader(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1
	req.Trailer = http.Header{"Authorization": {"Bearer forged"}, "X-Api-Key": {"forged"},
		"Openai-Organization": {"org-other"}, "Content-Type": {"application/x-protobuf"}}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	s := <-got
	if len(s.trailer) > 0 || s.header.Get("Trailer") != "" || len(s.te) > 0 || s.length != int64(len(body)) || s.body != body {
		t.Errorf("the provider got trailers %v (announced %q), transfer encoding %v, length %d, body %q; want none, and the body with its length",
			s.trailer, s.header.Get("Trailer"), s.te, s.length, s.body)
	}
	if s.header.Get("Authorization") != "Bearer "+realKey || s.header.Get("OpenAI-Organization") != "org-run" {
		t.Errorf("the provider got Authorization %q, OpenAI-Organization %q", s.header.Get("Authorization"), s.header.Get("OpenAI-Organization"))
	}
}

// A provider that fails after its status line (a 200 whose stream ends in
// an error event: Anthropic's overloaded_error, a Responses stream's
// response.failed, an OpenAI-compatible router's in-band error) failed
// each request as a 5xx does: a run of them is the provider's failure
// (ProviderFailing), not the agent's, and an answer that ends whole ends
// the span. Every such answer was taken as an answer, and the run was
// judged the agent's failure while the provider served nothing.
func TestProviderFailingInsideItsStream(t *testing.T) {
	up := startUpstream(t)
	failing := true
	up.fail = func(w http.ResponseWriter, _ int) bool {
		if !failing {
			return false
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"m\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"+
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
		return true
	}
	g, base := serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: up.pool, Retry: Retry{Attempts: 1}})
	body := `{"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for range 3 {
		if resp, b := post(t, base+"/v1/messages", body, nil); resp.StatusCode != 200 || !strings.Contains(b, "overloaded_error") {
			t.Fatalf("status %d, want the provider's 200 with its error: %s", resp.StatusCode, b)
		}
	}
	f := g.ProviderFailing()
	if g.Stopped() != nil || f == nil || f.Reason != ReasonProviderUnavailable || !f.Infrastructure ||
		!strings.Contains(f.Message, "last 3 model requests") || !strings.Contains(f.Message, "an error in the provider's streamed answer") {
		t.Errorf("stop %+v, failing %+v: want no stop, %s over the last 3 requests", g.Stopped(), f, ReasonProviderUnavailable)
	}
	failing = false
	if resp, b := post(t, base+"/v1/messages", body, nil); resp.StatusCode != 200 || strings.Contains(b, "overloaded_error") {
		t.Fatalf("the provider back: status %d: %s", resp.StatusCode, b)
	}
	if f := g.ProviderFailing(); f != nil {
		t.Errorf("after a whole answer: failing %+v", f)
	}
}

// A provider that answers 404 to every model request (a providerURL with
// a path the provider does not serve, an OpenAI-compatible base that is
// not /v1) answered nothing: a run of them is the run's configuration
// (ProviderFailing, naming the status and the path), not the agent's
// failure; it was judged AgentFailed, "exited with code 1".
func TestProviderThatServesNoModelThere(t *testing.T) {
	up := startUpstream(t)
	up.fail = func(w http.ResponseWriter, _ int) bool {
		http.NotFound(w, nil)
		return true
	}
	g, base := serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: up.pool, Retry: Retry{Attempts: 1}})
	body := `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	for range 2 {
		if resp, _ := post(t, base+"/v1/messages", body, nil); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("status %d, want the provider's 404", resp.StatusCode)
		}
	}
	f := g.ProviderFailing()
	if f == nil || !f.Infrastructure || !strings.Contains(f.Message, "last 2 model requests") || !strings.Contains(f.Message, "404 Not Found to POST /v1/messages") {
		t.Errorf("failing %+v: want the provider's, naming the 404 and the path", f)
	}
	// Once a model answer came whole, the URL serves: a 404 after it is
	// the request's (an agent can send one of its own through the relay,
	// a model named "nope", to turn its Fail into the provider's Error).
	serving := false
	up.fail = func(w http.ResponseWriter, _ int) bool {
		if serving {
			return false
		}
		http.NotFound(w, nil)
		return true
	}
	g, base = serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: up.pool, Retry: Retry{Attempts: 1}})
	serving = true
	if resp, b := post(t, base+"/v1/messages", body, nil); resp.StatusCode != 200 {
		t.Fatalf("an answer: %d %s", resp.StatusCode, b)
	}
	serving = false
	post(t, base+"/v1/messages", body, nil)
	if f := g.ProviderFailing(); f != nil {
		t.Errorf("a 404 after an answer: failing %+v", f)
	}
	// A GET the agent makes (a model list) that 404s judges nothing.
	g, base = serve(t, Options{Upstream: up.srv.URL, Header: XAPIKey, Key: []byte(realKey), RootCAs: up.pool, Retry: Retry{Attempts: 1}})
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if f := g.ProviderFailing(); f != nil {
		t.Errorf("a model list's 404: failing %+v", f)
	}
}
