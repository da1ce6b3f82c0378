// Package metricsserver serves a daemon's Prometheus metrics and its health
// probes over net/http, as controller-runtime's manager serves them, for
// the node-agent, which does not link controller-runtime's manager: with
// it came client-go's scheme of every API group, most of an idle
// node-agent's memory (package kube says more).
//
// Each server is made in two steps: Listen binds the address (so a busy
// port, a missing certificate or the port picked for ":0" is known before
// anything starts), then Serve serves until its context ends.
package metricsserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/harnessfacts/harnessfacts/internal/certfile"
	"github.com/harnessfacts/harnessfacts/internal/kubeauth"
	"github.com/harnessfacts/harnessfacts/node-agent/bounded"
)

// Path is where the metrics are served.
const Path = "/metrics"

// shutdownTimeout bounds how long Serve waits, once its context ended, for
// the requests being answered.
const shutdownTimeout = 5 * time.Second

// Options configure the metrics server.
type Options struct {
	// BindAddress is host:port (port 0 picks one); "0" or "" turns the
	// server off.
	BindAddress string
	// Secure serves HTTPS, and the metrics only to callers Reviewer's API
	// server authenticates and authorizes (get on the non-resource URL
	// /metrics); false serves plain HTTP to anyone who reaches the address.
	Secure bool
	// Reviewer asks the API server about callers; needed when Secure.
	Reviewer *kubeauth.Reviewer
	// CertDir holds tls.crt and tls.key, read again when they change; an
	// empty CertDir serves a self-signed certificate made at start.
	CertDir string
	// Gatherer is what is served.
	Gatherer prometheus.Gatherer
	// Log says where it serves, and why a request failed.
	Log logr.Logger
}

// Server is a bound HTTP server. A nil *Server is one turned off: its Addr
// is nil and its Serve waits for its context to end.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	log  logr.Logger
	what string
}

// Listen binds the metrics server o describes; nil when BindAddress turns
// it off.
func Listen(o Options) (*Server, error) {
	if off(o.BindAddress) {
		return nil, nil
	}
	if o.Gatherer == nil {
		return nil, errors.New("metrics: nothing to serve (no Gatherer)")
	}
	mux := http.NewServeMux()
	mux.Handle(Path, promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{
		ErrorLog:      promLog{o.Log},
		ErrorHandling: promhttp.HTTPErrorOnError,
	}))
	var handler http.Handler = mux
	var tlsCfg *tls.Config
	if o.Secure {
		if o.Reviewer == nil {
			return nil, errors.New("metrics: served securely, but nothing asks the API server about callers (no Reviewer)")
		}
		handler = o.Reviewer.Middleware(o.Log, mux)
		var err error
		if tlsCfg, err = serving(o.CertDir, o.Log); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	ln, err := net.Listen("tcp", o.BindAddress)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	what := "metrics over HTTP, to anyone who reaches the address"
	if tlsCfg != nil {
		what = "metrics over HTTPS, to callers the API server authorizes"
	}
	s := newServer(ln, handler, o.Log, what)
	s.srv.TLSConfig = tlsCfg
	return s, nil
}

// serving is the TLS configuration of the certificate in dir, or of a
// self-signed one when dir is empty.
func serving(dir string, log logr.Logger) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if dir == "" {
		certPEM, keyPEM, err := certfile.SelfSigned("localhost", "localhost")
		if err != nil {
			return nil, err
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
		return cfg, nil
	}
	keys, err := certfile.Load(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), log)
	if err != nil {
		return nil, err
	}
	cfg.GetCertificate = keys.GetCertificate
	return cfg, nil
}

// ListenProbes binds the health probe server: plain HTTP, /healthz and
// /readyz answering 200 "ok" while the process serves, as
// controller-runtime's healthz.Ping does; nil when addr is "0" or "".
func ListenProbes(addr string, log logr.Logger) (*Server, error) {
	if off(addr) {
		return nil, nil
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write([]byte("ok"))
	})
	mux := http.NewServeMux()
	mux.Handle("/healthz", ok)
	mux.Handle("/readyz", ok)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health probes: %w", err)
	}
	return newServer(ln, mux, log, "health probes (/healthz, /readyz)"), nil
}

func off(addr string) bool { return addr == "0" || addr == "" }

// The connections a metrics or probe server holds open, in all and from
// one address.
const (
	maxConns        = 64
	maxConnsPerAddr = 16
)

// newServer serves h on ln. HTTP/2 is not offered: a scrape or a probe
// needs none of it, and its stream resets were a way to exhaust a server
// (CVE-2023-44487), which kubebuilder's scaffolding turns it off for too.
func newServer(ln net.Listener, h http.Handler, log logr.Logger, what string) *Server {
	protocols := &http.Protocols{}
	protocols.SetHTTP1(true)
	// A scraper or a probe holds a connection or two; the bound keeps
	// unread connections from growing the daemon's memory (16,000 of
	// them, each with an unfinished 30 KB header, ran a node-agent out
	// of its 512Mi).
	ln = bounded.NewListener(ln, bounded.Limits{MaxConns: maxConns, PerAddr: maxConnsPerAddr})
	return &Server{ln: ln, log: log, what: what, srv: &http.Server{
		Handler:           h,
		Protocols:         protocols,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    32 << 10,
		// Failed TLS handshakes (a scraper that does not trust the
		// certificate) are the scraper's to report.
		ErrorLog: stdlog.New(debugLog{log}, "", 0),
	}}
}

// Addr is the address the server is bound to (nil when off).
func (s *Server) Addr() net.Addr {
	if s == nil {
		return nil
	}
	return s.ln.Addr()
}

// Serve serves until ctx ends, then lets the requests being answered finish
// (a few seconds at most) and returns nil; it returns an error when the
// server fails before. A server turned off (nil) waits for ctx.
func (s *Server) Serve(ctx context.Context) error {
	if s == nil {
		<-ctx.Done()
		return nil
	}
	s.log.Info("serving "+s.what, "address", s.ln.Addr().String())
	errc := make(chan error, 1)
	go func() {
		if s.srv.TLSConfig != nil {
			errc <- s.srv.ServeTLS(s.ln, "", "")
			return
		}
		errc <- s.srv.Serve(s.ln)
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(shut); err != nil {
		_ = s.srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// promLog is promhttp's error log: a gathering or writing error.
type promLog struct{ log logr.Logger }

func (l promLog) Println(v ...any) { l.log.Error(nil, fmt.Sprint(v...)) }

// debugLog turns the HTTP server's own messages into debug logs.
type debugLog struct{ log logr.Logger }

func (l debugLog) Write(p []byte) (int, error) {
	l.log.V(1).Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Close unbinds a server that is not to be served after all (a later step
// of the start failed).
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	return s.ln.Close()
}
