package mcp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

func startServer(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := StartHTTP(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s
}

func connect(ctx context.Context, t *testing.T, tr sdk.Transport) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "test-agent", Version: "1"}, nil)
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connecting an MCP client: %v", err)
	}
	return cs
}

func callToken(ctx context.Context, t *testing.T, cs *sdk.ClientSession) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: ToolName})
	if err != nil {
		t.Fatalf("calling %s: %v", ToolName, err)
	}
	return res
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestHTTPToolCallReturnsTheRunToken(t *testing.T) {
	s := startServer(t, Options{})
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	if u.Hostname() != "127.0.0.1" || len(u.Path) < len("/mcp/")+32 {
		t.Fatalf("URL %s: want 127.0.0.1 and an unpredictable path", s.URL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs := connect(ctx, t, &sdk.StreamableClientTransport{Endpoint: s.URL, DisableStandaloneSSE: true})
	defer cs.Close()

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) != 1 || tools.Tools[0].Name != ToolName {
		t.Fatalf("tools = %+v, want only %s", tools.Tools, ToolName)
	}
	res := callToken(ctx, t, cs)
	if res.IsError || text(res) != s.Token || !strings.HasPrefix(s.Token, "hft_") {
		t.Fatalf("get_token = %q (error %v), want the run token %q", text(res), res.IsError, s.Token)
	}
	sum := s.Summary()
	if sum.Calls != 1 || !sum.TokenIssued || len(sum.Receipts) != 1 || sum.Receipts[0].Outcome != OutcomeIssued || sum.Receipts[0].Transport != v1alpha1.MCPTransportHTTP {
		t.Fatalf("summary after one call = %+v", sum)
	}
	other := startServer(t, Options{})
	if other.Token == s.Token || other.URL == s.URL {
		t.Fatal("two runs share a token or a URL")
	}
}

func TestCallsBeyondTheLimitAreRefusedAndCounted(t *testing.T) {
	s := startServer(t, Options{MaxCalls: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs := connect(ctx, t, &sdk.StreamableClientTransport{Endpoint: s.URL, DisableStandaloneSSE: true})
	defer cs.Close()
	for i := 0; i < 2; i++ {
		if res := callToken(ctx, t, cs); res.IsError {
			t.Fatalf("call %d refused: %s", i+1, text(res))
		}
	}
	res := callToken(ctx, t, cs)
	if !res.IsError || strings.Contains(text(res), s.Token) {
		t.Fatalf("third call = %q, want a refusal without the token", text(res))
	}
	sum := s.Summary()
	if sum.Calls != 3 || sum.Receipts[2].Outcome != OutcomeRefusedLimit {
		t.Fatalf("summary = %+v, want 3 calls, the last refused", sum)
	}
}

func post(t *testing.T, target, host string, hdr map[string]string, body io.Reader, length int64) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, target, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	if host != "" {
		req.Host = host
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestHTTPGuards(t *testing.T) {
	s := startServer(t, Options{MaxBodyBytes: 4096})
	u, _ := url.Parse(s.URL)
	big := initBody + strings.Repeat(" ", 5000)
	tests := []struct {
		name   string
		target string
		host   string
		hdr    map[string]string
		body   string
		chunk  bool
		status int
	}{
		{name: "a plain client is served", target: s.URL, body: initBody, status: http.StatusOK},
		{name: "loopback origin is served", target: s.URL, hdr: map[string]string{"Origin": "http://localhost:3000"}, body: initBody, status: http.StatusOK},
		{name: "localhost Host is served", target: s.URL, host: "localhost:" + u.Port(), body: initBody, status: http.StatusOK},
		{name: "foreign origin", target: s.URL, hdr: map[string]string{"Origin": "https://evil.example"}, body: initBody, status: http.StatusForbidden},
		{name: "null origin", target: s.URL, hdr: map[string]string{"Origin": "null"}, body: initBody, status: http.StatusForbidden},
		{name: "oversize body", target: s.URL, body: big, status: http.StatusRequestEntityTooLarge},
		{name: "oversize chunked body", target: s.URL, body: big, chunk: true, status: http.StatusRequestEntityTooLarge},
		{name: "batch", target: s.URL, body: " [" + initBody + "]", status: http.StatusBadRequest},
		{name: "chunked batch", target: s.URL, body: "\n[" + initBody + "]", chunk: true, status: http.StatusBadRequest},
		{name: "wrong path", target: "http://" + u.Host + "/mcp", body: initBody, status: http.StatusNotFound},
		{name: "root path", target: "http://" + u.Host + "/", body: initBody, status: http.StatusNotFound},
		{name: "rebinding Host", target: s.URL, host: "evil.example:" + u.Port(), body: initBody, status: http.StatusForbidden},
		{name: "Host with another port", target: s.URL, host: "127.0.0.1:1", body: initBody, status: http.StatusForbidden},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(tc.body)
			length := int64(len(tc.body))
			if tc.chunk {
				body = io.MultiReader(body) // hides the length: sent chunked
				length = -1
			}
			resp := post(t, tc.target, tc.host, tc.hdr, body, length)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
		})
	}
	if sum := s.Summary(); sum.Calls != 0 {
		t.Fatalf("refused requests reached the tool: %+v", sum)
	}
}

func TestShutdownStopsServing(t *testing.T) {
	s, err := StartHTTP(Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.Post(s.URL, "application/json", strings.NewReader(initBody)); err == nil {
		resp.Body.Close()
		t.Fatal("the server still answers after Shutdown")
	}
}

func TestStdioRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	token, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	rec := NewReceipts(v1alpha1.MCPTransportStdio, 1)
	// Two pipes: client → server and server → client, as a stdio process's
	// stdin and stdout.
	srvIn, cliOut := io.Pipe()
	cliIn, srvOut := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- ServeStdio(ctx, srvIn, srvOut, token, rec, nil) }()

	cs := connect(ctx, t, &sdk.IOTransport{Reader: cliIn, Writer: cliOut})
	if res := callToken(ctx, t, cs); res.IsError || text(res) != token {
		t.Fatalf("stdio get_token = %q, want the token", text(res))
	}
	if res := callToken(ctx, t, cs); !res.IsError {
		t.Fatal("a second call beyond MaxCalls 1 was answered")
	}
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	if sum := rec.Summary(); sum.Calls != 2 || !sum.TokenIssued || sum.Receipts[0].Transport != v1alpha1.MCPTransportStdio || sum.Receipts[1].Outcome != OutcomeRefusedLimit {
		t.Fatalf("receipts read back = %+v", sum)
	}
}

func TestTokenWatcherSeesASplitToken(t *testing.T) {
	token := "hft_abcdefghijklmnopqrstuvwxyz012345"
	out := []byte("noise " + token + " more noise")
	for _, chunk := range []int{1, 2, 3, 7, len(out)} {
		w := NewTokenWatcher(token)
		for b := bytes.NewReader(out); b.Len() > 0; {
			p := make([]byte, chunk)
			n, _ := b.Read(p)
			_, _ = w.Write(p[:n])
		}
		if !w.Seen() {
			t.Errorf("chunks of %d: token not seen", chunk)
		}
	}
	w := NewTokenWatcher(token)
	_, _ = w.Write([]byte(token[:10]))
	_, _ = w.Write([]byte("x" + token[10:]))
	if w.Seen() {
		t.Error("a broken token was seen")
	}
}

// The watcher's search (its rarest byte first) finds what bytes.Contains
// finds, wherever the token lies and however often its bytes occur around
// it.
func TestTokenWatcherFindsWhatContainsFinds(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, token := range []string{"hft_token", "hft_abcdefghijklmnopqrstuvwxyz012345", "hft_Zx", "ZZZZ"} {
		alphabet := token + "ab \n"
		for n := 0; n < 3000; n++ {
			p := make([]byte, rng.IntN(300))
			for i := range p {
				p[i] = alphabet[rng.IntN(len(alphabet))]
			}
			if rng.IntN(4) == 0 && len(p) >= len(token) {
				at := rng.IntN(len(p) - len(token) + 1)
				copy(p[at:], token)
			}
			w := NewTokenWatcher(token)
			if got, want := w.index(p) >= 0, bytes.Contains(p, []byte(token)); got != want {
				t.Fatalf("token %q in %q: found %v, want %v", token, p, got, want)
			}
			if i := w.index(p); i >= 0 && !bytes.Equal(p[i:i+len(token)], []byte(token)) {
				t.Fatalf("token %q in %q: index %d is not the token", token, p, i)
			}
		}
	}
}

// TestHTTPOnASocketListensOnNoPort: with Options.Socket the server is
// reached only through that socket, its owner's alone (no loopback port,
// which other processes of the network namespace share), and answers
// requests that name the bridge's port.
func TestHTTPOnASocketListensOnNoPort(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "mcp.sock")
	s := startServer(t, Options{Socket: sock, ExtraPorts: []int{7701}})
	if !strings.HasPrefix(s.URL, "http://127.0.0.1:7701/mcp/") || !strings.HasSuffix(s.URL, s.Path) {
		t.Fatalf("URL %s (path %s): want the bridge's port and the random path", s.URL, s.Path)
	}
	st, err := os.Stat(sock)
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("the socket: %v, %v", st, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	cs := connect(ctx, t, &sdk.StreamableClientTransport{Endpoint: s.URL, HTTPClient: client, DisableStandaloneSSE: true})
	defer cs.Close()
	if res := callToken(ctx, t, cs); res.IsError || text(res) != s.Token {
		t.Fatalf("get_token over the socket = %q (error %v)", text(res), res.IsError)
	}
	if _, err := StartHTTP(Options{Socket: filepath.Join(t.TempDir(), "x.sock")}); err == nil {
		t.Error("a socket without a port for the Host header was accepted")
	}
}

// A call's arguments are decoded into Go values: a body of tiny JSON values
// as large as the server takes costs the node-agent a bounded few MiB,
// since up to one such body per connection is decoded at once.
func TestHTTPLargestBodyCostsLittleMemory(t *testing.T) {
	s := startServer(t, Options{})
	head := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_token","arguments":{"a":[`
	tail := `[]]}}}`
	body := head + strings.Repeat("[],", (DefaultMaxBodyBytes-len(head)-len(tail))/3) + tail
	if len(body) > DefaultMaxBodyBytes {
		t.Fatalf("body of %d bytes over the bound", len(body))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp := post(t, s.URL, "", nil, strings.NewReader(body), int64(len(body)))
	runtime.ReadMemStats(&after)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d for a body within the bound", resp.StatusCode)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("one request of %d bytes allocated %d MiB in the server", len(body), alloc>>20)
	}
}

// Over HTTP too, a run's calls decoded and answered at once are
// MaxCallsInFlight, over all its connections: sixteen at once (the
// listener's bound) wait for each other's answers, and are all answered.
func TestHTTPCallsInFlightAreBoundedPerRun(t *testing.T) {
	var inside, most atomic.Int64
	release := make(chan struct{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inside.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		inside.Add(-1)
		_, _ = io.WriteString(w, "{}")
	})
	srv := httptest.NewUnstartedServer(nil)
	srv.Config.Handler = guard("/mcp/x", []int{srv.Listener.Addr().(*net.TCPAddr).Port}, DefaultMaxBodyBytes, NewCalls(), next)
	srv.Start()
	defer srv.Close()
	const conns = 16
	var wg sync.WaitGroup
	var answered atomic.Int64
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"get_token","arguments":{}}}`, i)
			resp, err := http.Post(srv.URL+"/mcp/x", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				answered.Add(1)
			}
		}()
	}
	time.Sleep(time.Second)
	if n := most.Load(); n != MaxCallsInFlight {
		t.Errorf("%d of %d requests decoded and answered at once, want %d", n, conns, MaxCallsInFlight)
	}
	close(release)
	wg.Wait()
	if n := answered.Load(); n != conns {
		t.Errorf("%d of %d requests answered", n, conns)
	}
}
