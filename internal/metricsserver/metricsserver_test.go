//go:build !windows

package metricsserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harnessfacts/harnessfacts/internal/certfile"
	"github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/internal/kubeauth"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

var (
	env *testenv.Env
	// k8s makes the tests' objects; api is the servers' client.
	k8s client.Client
	api *kube.Client
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		var err error
		if env, err = testenv.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = env.Stop() }()
		if k8s, err = client.New(env.Config, client.Options{Scheme: env.Scheme}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if api, err = kube.New(env.Config); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		code := m.Run()
		if code == 0 {
			// The API server's clients keep their connections: only the
			// servers' goroutines must be gone.
			if err := goleak.Find(goleak.IgnoreCurrent(), goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
				goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"), goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run"),
				goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.BackoffUntilWithContext.func1"),
				goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/internal/testing/process.(*State).Start.func2"),
				goleak.IgnoreAnyFunction("os/exec.(*Cmd).Start.func2"),
				goleak.IgnoreAnyFunction("os/exec.(*Cmd).watchCtx")); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		return code
	}())
}

// registry is what the tests' servers gather: one counter.
func registry(t *testing.T) prometheus.Gatherer {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "harnessfacts_test_scrapes_total", Help: "A counter the tests read."})
	c.Add(3)
	reg.MustRegister(c)
	return reg
}

// serve runs s until the test ends, and checks it stopped cleanly.
func serve(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v", err)
		}
	})
}

// get asks url with token ("" sends none) over c and returns the answer.
func get(t *testing.T, c *http.Client, url, token string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// TestSecureServesOnlyWhomTheAPIServerAllows: over HTTPS, a scrape
// without a token is refused 401 with a WWW-Authenticate challenge, one
// with a token RBAC does not allow /metrics 403, a metrics reader's 200
// with the metrics' text.
func TestSecureServesOnlyWhomTheAPIServerAllows(t *testing.T) {
	ctx := context.Background()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "metricsserver-"}}
	if err := k8s.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	reader, nosy, err := hftesting.MetricsReaders(ctx, k8s, env.Config, ns, ns+"-metrics-reader", "prometheus", "nosy")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Listen(Options{BindAddress: "127.0.0.1:0", Secure: true, Reviewer: &kubeauth.Reviewer{Client: api},
		Gatherer: registry(t), Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	// The certificate is self-signed, made in memory at start: a scraper
	// is configured to skip its verification, as Prometheus is for
	// controller-runtime's.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see above
	defer c.CloseIdleConnections()
	url := "https://" + s.Addr().String() + Path

	resp, _ := get(t, c, url, "")
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer ") {
		t.Errorf("without a token: %d, WWW-Authenticate %q; want 401 and a Bearer challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if resp, _ := get(t, c, url, "not-a-token"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("with a made-up token: %d, want 401", resp.StatusCode)
	}
	if resp, body := get(t, c, url, nosy); resp.StatusCode != http.StatusForbidden || strings.Contains(body, "harnessfacts_test") {
		t.Errorf("with a token without get on /metrics: %d %q, want 403 and no metric", resp.StatusCode, body)
	}
	resp, body := get(t, c, url, reader)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "harnessfacts_test_scrapes_total 3") {
		t.Errorf("a metrics reader got %d:\n%s", resp.StatusCode, body)
	}
	if resp.TLS == nil || resp.TLS.NegotiatedProtocol == "h2" {
		t.Errorf("served over %v, want HTTPS without HTTP/2", resp.Proto)
	}
	// Plain HTTP to the HTTPS port: refused (a 400, or the connection
	// closed first), with no metric.
	if resp, err := http.Get("http://" + s.Addr().String() + Path); err == nil {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK || strings.Contains(string(body), "harnessfacts_test") {
			t.Errorf("plain HTTP to the HTTPS port: %d %q", resp.StatusCode, body)
		}
	}
}

// TestPlainServesAnyone: without Secure, anyone who reaches the address
// reads the metrics over HTTP.
func TestPlainServesAnyone(t *testing.T) {
	s, err := Listen(Options{BindAddress: "127.0.0.1:0", Gatherer: registry(t), Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	resp, body := get(t, &http.Client{}, "http://"+s.Addr().String()+Path, "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "harnessfacts_test_scrapes_total 3") {
		t.Errorf("got %d:\n%s", resp.StatusCode, body)
	}
}

// TestCertDirIsReloaded: the certificate of --metrics-cert-dir is served,
// and after its files are replaced (a renewed Secret) the new one is, with
// no restart.
func TestCertDirIsReloaded(t *testing.T) {
	dir := t.TempDir()
	issue := func(name string) *x509.CertPool {
		t.Helper()
		certPEM, keyPEM, err := certfile.SelfSigned(name, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "tls.key"), keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(certPEM)
		return pool
	}
	first := issue("first")
	s, err := Listen(Options{BindAddress: "127.0.0.1:0", Secure: true, CertDir: dir,
		Reviewer: &kubeauth.Reviewer{Client: api}, Gatherer: registry(t), Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s)
	// handshake reports the name of the certificate served, when it
	// chains to roots.
	handshake := func(roots *x509.CertPool) (string, error) {
		conn, err := tls.Dial("tcp", s.Addr().String(), &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
		if err != nil {
			return "", err
		}
		defer func() { _ = conn.Close() }()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
	}
	if name, err := handshake(first); err != nil || name != "first" {
		t.Fatalf("served %q (%v), want the certificate of the folder", name, err)
	}
	second := issue("second")
	if name, err := handshake(second); err != nil || name != "second" {
		t.Fatalf("after the files changed, served %q (%v), want the new certificate", name, err)
	}
	if _, err := handshake(first); err == nil {
		t.Fatal("after the files changed, the old certificate is still served")
	}
}

// TestZeroTurnsOff: "0" binds nothing, and Serve of a server turned off
// waits for its context like the others.
func TestZeroTurnsOff(t *testing.T) {
	m, err := Listen(Options{BindAddress: "0", Secure: true})
	if err != nil || m != nil {
		t.Fatalf("metrics at \"0\": %v, %v; want none", m, err)
	}
	p, err := ListenProbes("0", logr.Discard())
	if err != nil || p != nil {
		t.Fatalf("probes at \"0\": %v, %v; want none", p, err)
	}
	if m.Addr() != nil || m.Close() != nil {
		t.Fatal("a server turned off has an address")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("Serve of a server turned off returned %v before its context ended", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestProbes: /healthz and /readyz answer 200 "ok" over plain HTTP; once
// Serve returned, the port is closed.
func TestProbes(t *testing.T) {
	p, err := ListenProbes("127.0.0.1:0", logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	c := &http.Client{}
	for _, path := range []string{"/healthz", "/readyz"} {
		if resp, body := get(t, c, "http://"+p.Addr().String()+path, ""); resp.StatusCode != http.StatusOK || body != "ok" {
			t.Errorf("%s: %d %q, want 200 \"ok\"", path, resp.StatusCode, body)
		}
	}
	if resp, _ := get(t, c, "http://"+p.Addr().String()+"/metrics", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/metrics on the probes' port: %d, want 404", resp.StatusCode)
	}
	c.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v", err)
	}
	if conn, err := net.Dial("tcp", p.Addr().String()); err == nil {
		_ = conn.Close()
		t.Fatal("the port still answers after Serve returned")
	}
}

// TestListenSaysWhatIsWrong: a busy port, or a secure server with nothing
// to ask about callers, fails at Listen, before anything is served.
func TestListenSaysWhatIsWrong(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Close() }()
	if _, err := Listen(Options{BindAddress: busy.Addr().String(), Gatherer: registry(t)}); err == nil {
		t.Error("metrics on a busy port: no error")
	}
	if _, err := ListenProbes(busy.Addr().String(), logr.Discard()); err == nil {
		t.Error("probes on a busy port: no error")
	}
	if _, err := Listen(Options{BindAddress: "127.0.0.1:0", Secure: true, Gatherer: registry(t)}); err == nil {
		t.Error("a secure server without a Reviewer: no error")
	}
	if _, err := Listen(Options{BindAddress: "127.0.0.1:0", Secure: true, CertDir: t.TempDir(),
		Reviewer: &kubeauth.Reviewer{Client: api}, Gatherer: registry(t)}); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a cert dir without tls.crt: %v", err)
	}
}
