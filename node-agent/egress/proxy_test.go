package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

// A connection the server closes lingers half a second (net/http waits
// for the client to read the last response).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))
}

// startProxy serves a proxy allowing entries on a unix socket, as the
// node-agent does, and returns a client that reaches it.
func startProxy(t *testing.T, entries ...string) (*Proxy, *http.Client, string) {
	t.Helper()
	allow, err := NewAllowList(entries...)
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Allow: allow})
	sock := filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	tr := &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "egress.invalid"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = p.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return p, &http.Client{Transport: tr}, sock
}

func TestProxyPlainHTTP(t *testing.T) {
	// Local servers stand in for a provider and for anything else.
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "provider saw %s %s proxy-auth=%q", r.Method, r.URL.Path, r.Header.Get("Proxy-Authorization"))
	}))
	defer provider.Close()
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("the proxy reached a host that is not allowed")
	}))
	defer elsewhere.Close()

	p, client, _ := startProxy(t, strings.TrimPrefix(provider.URL, "http://"))
	req, _ := http.NewRequest(http.MethodPost, provider.URL+"/v1/messages", strings.NewReader("{}"))
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0") // hop-by-hop: never forwarded
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK || string(body) != `provider saw POST /v1/messages proxy-auth=""` {
		t.Errorf("allowed request: %d %q", res.StatusCode, body)
	}

	res, err = client.Get(elsewhere.URL + "/steal")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	_ = res.Body.Close()
	host := strings.TrimPrefix(elsewhere.URL, "http://")
	if res.StatusCode != http.StatusForbidden || !strings.Contains(string(body), host+" is not allowed for this run") ||
		!strings.Contains(string(body), "spec.network.allowHosts") {
		t.Errorf("denied request: %d %q", res.StatusCode, body)
	}
	want := Stats{Allowed: 1, Denied: 1, DeniedHosts: []string{host}}
	if diff := cmp.Diff(want, p.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

func TestProxyConnectTLS(t *testing.T) {
	// A local TLS server stands in for an https provider; its test CA is
	// the only root the client trusts.
	provider := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "tls provider")
	}))
	defer provider.Close()
	elsewhere := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("the proxy tunnelled to a host that is not allowed")
	}))
	defer elsewhere.Close()

	p, client, _ := startProxy(t, strings.TrimPrefix(provider.URL, "https://"))
	roots := x509.NewCertPool()
	roots.AddCert(provider.Certificate())
	roots.AddCert(elsewhere.Certificate())
	client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: roots}

	res, err := client.Get(provider.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if string(body) != "tls provider" {
		t.Errorf("through the tunnel: %q", body)
	}
	_, err = client.Get(elsewhere.URL)
	if err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("CONNECT to a denied host: %v, want Forbidden", err)
	}
	st := p.Stats()
	if st.Allowed != 1 || st.Denied != 1 || len(st.DeniedHosts) != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestProxyRefusals sends raw requests: the proxy is no open relay and says
// why it refuses.
func TestProxyRefusals(t *testing.T) {
	p, _, sock := startProxy(t, "127.0.0.2:9", "api.example.com")
	cases := []struct {
		request string
		code    int
		body    string
	}{
		{"GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n", 400, "absolute-form"},
		{"GET https://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n", 400, "use CONNECT"},
		{"CONNECT elsewhere.example.com:443 HTTP/1.1\r\nHost: elsewhere.example.com:443\r\n\r\n", 403, "elsewhere.example.com:443 is not allowed"},
		{"CONNECT api.example.com:22 HTTP/1.1\r\nHost: api.example.com:22\r\n\r\n", 403, "api.example.com:22 is not allowed"},
		{"CONNECT API.Example.COM.:8443 HTTP/1.1\r\nHost: x\r\n\r\n", 403, "api.example.com:8443 is not allowed"},
		{"GET http://127.0.0.3:9/ HTTP/1.1\r\nHost: 127.0.0.3:9\r\n\r\n", 403, "127.0.0.3:9 is not allowed"},
		{"GET http://127.0.0.2:9/" + strings.Repeat("a", 64<<10) + " HTTP/1.1\r\nHost: 127.0.0.2:9\r\n\r\n", 431, ""},
	}
	for _, tc := range cases {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, tc.request); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%.60q: %v", tc.request, err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = c.Close()
		if res.StatusCode != tc.code || !strings.Contains(string(body), tc.body) {
			t.Errorf("%.60q: %d %q, want %d with %q", tc.request, res.StatusCode, body, tc.code, tc.body)
		}
	}
	// A hostile agent cannot flood the report.
	for i := range 50 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT h%d.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n", i)
		_, _ = http.ReadResponse(bufio.NewReader(c), nil)
		_ = c.Close()
	}
	st := p.Stats()
	if st.Denied != 54 || len(st.DeniedHosts) != DefaultMaxDeniedHosts || st.DeniedHosts[0] != "elsewhere.example.com:443" {
		t.Errorf("stats %+v, want 54 denied and the first %d hosts", st, DefaultMaxDeniedHosts)
	}
}

func TestProxyCloseEndsTunnels(t *testing.T) {
	// A local echo server stands in for an allowed host.
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = echo.Close() }()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	allow, _ := NewAllowList(echo.Addr().String())
	p := New(Options{Allow: allow})
	sock := filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: x\r\n\r\n", echo.Addr())
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", res, err)
	}
	fmt.Fprint(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo through the tunnel: %q %v", line, err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := br.ReadString('\n'); err == nil {
		t.Error("the tunnel outlived the proxy")
	}
}

// TestProxyServesAtMostMaxConns: with MaxConns 1, a second client gets no
// answer while the first holds its connection open; once the first closes,
// the second is served.
func TestProxyServesAtMostMaxConns(t *testing.T) {
	allow, err := NewAllowList("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Allow: allow, MaxConns: 1})
	sock := filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	defer func() {
		_ = p.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	refused := func(c net.Conn) <-chan int {
		codes := make(chan int, 1)
		go func() {
			defer close(codes)
			fmt.Fprint(c, "CONNECT elsewhere.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n")
			if res, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				codes <- res.StatusCode
			}
		}()
		return codes
	}
	first, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if code := <-refused(first); code != http.StatusForbidden {
		t.Fatalf("the first client: %d, want 403", code)
	}
	second, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	answer := refused(second)
	select {
	case code := <-answer:
		t.Fatalf("the second client was answered (%d) while the first held the only connection", code)
	case <-time.After(200 * time.Millisecond):
	}
	_ = first.Close()
	select {
	case code := <-answer:
		if code != http.StatusForbidden {
			t.Errorf("the second client: %d, want 403", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("closing the first connection did not let the second in")
	}
}

// TestProxyRefusesAWithheldPair: a pair the allow list withholds gets a 403
// that says why, and is counted as denied.
func TestProxyRefusesAWithheldPair(t *testing.T) {
	allow, err := NewAllowList("127.0.0.2:9")
	if err != nil {
		t.Fatal(err)
	}
	if err := allow.Withhold("http://127.0.0.2:9", "the run's model gateway carries its provider"); err != nil {
		t.Fatal(err)
	}
	p := New(Options{Allow: allow})
	sock := filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.Serve(ln) }()
	t.Cleanup(func() { _ = p.Close() })
	for _, req := range []string{
		"CONNECT 127.0.0.2:9 HTTP/1.1\r\nHost: 127.0.0.2:9\r\n\r\n",
		"POST http://127.0.0.2:9/v1/messages HTTP/1.1\r\nHost: 127.0.0.2:9\r\nContent-Length: 0\r\n\r\n",
	} {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, req)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = c.Close()
		if res.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "the run's model gateway carries its provider") {
			t.Errorf("%.40q: %d %q, want 403 saying why", req, res.StatusCode, body)
		}
	}
	if st := p.Stats(); st.Denied != 2 || st.Allowed != 0 {
		t.Errorf("stats %+v, want 2 denied", st)
	}
}
