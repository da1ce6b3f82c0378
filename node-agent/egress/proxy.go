package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/harnessfacts/harnessfacts/node-agent/bounded"
)

// Defaults of Options.
const (
	DefaultDialTimeout       = 10 * time.Second
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxHeaderBytes    = 32 << 10
	// DefaultMaxConns: each tunnel's sockets hold what the far end sent
	// and the agent did not read, in kernel memory charged to the
	// node-agent, outside the run's cgroup: 256 tunnels to a host that
	// kept sending held about 135 MiB of socket buffers. A CLI opens a
	// handful; a package manager a few dozen.
	DefaultMaxConns       = 64
	DefaultMaxDeniedHosts = 10
	// maxHostReport bounds one reported host (status.network.deniedHosts
	// items are at most 261 characters).
	maxHostReport = 261
)

// NodeConns are the node's slots of proxy connections, shared by every
// run's proxy: each tunnel's socket buffers are kernel memory charged to
// the node-agent (where the memory controller counts socket memory: cgroup
// v2, or v1 with kmem.tcp), so eight runs of 64 tunnels each could hold
// about 270 MiB of it. A run still has at most MaxConns; together the
// node's runs have the slots NodeConns holds.
type NodeConns chan struct{}

// DefaultNodeConns is NewNodeConns' bound: four runs' worth, about 135 MiB
// of socket buffers at the most.
const DefaultNodeConns = 4 * DefaultMaxConns

// NewNodeConns bounds the node's proxy connections to n (at least one
// run's MaxConns).
func NewNodeConns(n int) NodeConns { return make(NodeConns, max(n, DefaultMaxConns)) }

// Options configure a Proxy. Zero values mean the defaults.
type Options struct {
	// Allow is what the proxy lets through; nil allows nothing.
	Allow *AllowList
	// DialTimeout bounds resolving and connecting to an allowed host.
	DialTimeout time.Duration
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a kept-alive client connection that sends nothing.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes int
	// MaxConns bounds the client connections served at once; more wait.
	MaxConns int
	// NodeConns, when set, bounds the client connections of every run's
	// proxy on the node together (NewNodeConns); more wait.
	NodeConns NodeConns
	// MaxDeniedHosts is how many distinct denied hosts Stats keeps.
	MaxDeniedHosts int
	// Inside, when set, is what the proxy may reach of the inside (loopback,
	// private, link-local, CGNAT, cluster and metadata addresses): judged on
	// every address dialled, after resolution. When nil (and Dial is nil), a
	// net.Dialer refuses only unspecified, multicast and link-local addresses.
	Inside *Inside
	// Dial connects to an allowed "host:port"; when set, Inside is not used.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Stats are what a Proxy counted.
type Stats struct {
	// Allowed counts the CONNECT tunnels and plain HTTP requests the allow
	// list admitted.
	Allowed int64
	// Denied counts those it refused.
	Denied int64
	// DeniedHosts are the first distinct refused "host:port" targets.
	DeniedHosts []string
	// InsideHosts are those of DeniedHosts refused though allowed: their
	// address is the node's own, or private, loopback or link-local (what
	// --inside-host or a HarnessPolicy's network.insideHosts admits).
	InsideHosts []string
}

// Proxy is one run's egress proxy. Serve it on a listener (a unix socket in
// the run dir); Close ends it and every tunnel through it.
type Proxy struct {
	opts      Options
	srv       *http.Server
	forward   *httputil.ReverseProxy
	transport *http.Transport

	allowed, denied atomic.Int64

	mu          sync.Mutex
	deniedHosts []string
	insideHosts []string
	tunnels     map[net.Conn]struct{}
	closed      bool
}

// New returns a proxy for opts.
func New(opts Options) *Proxy {
	if opts.Allow == nil {
		opts.Allow = &AllowList{ports: map[string][]int{}}
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.MaxDeniedHosts <= 0 {
		opts.MaxDeniedHosts = DefaultMaxDeniedHosts
	}
	switch {
	case opts.Dial != nil:
	case opts.Inside != nil:
		opts.Dial = opts.Inside.Dialer(opts.DialTimeout)
	default:
		d := &net.Dialer{Timeout: opts.DialTimeout, Control: refuseSpecial}
		opts.Dial = d.DialContext
	}
	p := &Proxy{opts: opts, tunnels: map[net.Conn]struct{}{}}
	p.transport = &http.Transport{
		Proxy:                  nil, // never chain to the node's own proxy settings
		DialContext:            p.dialAllowed,
		MaxIdleConns:           16,
		IdleConnTimeout:        opts.IdleTimeout,
		ResponseHeaderTimeout:  10 * time.Minute, // a model may think long before its first byte
		DisableCompression:     true,             // pass bodies through as they are
		MaxResponseHeaderBytes: int64(opts.MaxHeaderBytes) * 4,
	}
	p.forward = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			// The target is the absolute URL of the proxy request; Rewrite
			// already dropped hop-by-hop and Forwarded headers.
			r.Out.URL = r.In.URL
			r.Out.Host = r.In.URL.Host
		},
		Transport:     p.transport,
		FlushInterval: -1, // stream (server-sent events from a model)
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, ErrInside) {
				p.allowed.Add(-1)
				p.denyInside(w, err)
				return
			}
			refuse(w, http.StatusBadGateway, fmt.Sprintf("harnessfacts egress proxy: %s could not be reached: %v\n", r.URL.Host, err))
		},
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: opts.ReadHeaderTimeout,
		IdleTimeout:       opts.IdleTimeout,
		MaxHeaderBytes:    opts.MaxHeaderBytes,
		ErrorLog:          log.New(io.Discard, "", 0), // a client's broken request is its own business
	}
	return p
}

// Serve serves the proxy on l until Close. It returns nil after Close.
func (p *Proxy) Serve(l net.Listener) error {
	// At most MaxConns clients at once (more wait in the kernel's backlog),
	// with connections that still half-close for the tunnels' relay.
	err := p.srv.Serve(bounded.NewListener(l, bounded.Limits{MaxConns: p.opts.MaxConns, Node: p.opts.NodeConns}))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops serving and closes every connection and tunnel.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.tunnels {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.srv.Close()
	p.transport.CloseIdleConnections()
	return err
}

// Stats returns what the proxy counted so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Allowed: p.allowed.Load(), Denied: p.denied.Load(), DeniedHosts: append([]string(nil), p.deniedHosts...),
		InsideHosts: append([]string(nil), p.insideHosts...)}
}

// ServeHTTP handles one proxy request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if r.URL.Host == "" || !r.URL.IsAbs() {
		refuse(w, http.StatusBadRequest, "harnessfacts egress proxy: this is an HTTP proxy; send absolute-form requests (http://host/...) or CONNECT host:port\n")
		return
	}
	if r.URL.Scheme != "http" {
		refuse(w, http.StatusBadRequest, fmt.Sprintf("harnessfacts egress proxy: scheme %q is not proxied; use CONNECT for https\n", r.URL.Scheme))
		return
	}
	target := r.URL.Host
	if r.URL.Port() == "" {
		target = net.JoinHostPort(r.URL.Hostname(), "80")
	}
	canonical, ok := p.opts.Allow.Allows(target)
	if !ok {
		p.deny(w, canonical)
		return
	}
	p.allowed.Add(1)
	p.forward.ServeHTTP(w, r)
}

func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	target := r.Host
	canonical, ok := p.opts.Allow.Allows(target)
	if !ok {
		p.deny(w, canonical)
		return
	}
	p.allowed.Add(1)
	ctx, cancel := context.WithTimeout(r.Context(), p.opts.DialTimeout)
	up, err := p.opts.Dial(ctx, "tcp", target)
	cancel()
	if errors.Is(err, ErrInside) {
		p.allowed.Add(-1)
		p.denyInside(w, err)
		return
	}
	if err != nil {
		refuse(w, http.StatusBadGateway, fmt.Sprintf("harnessfacts egress proxy: %s is allowed but could not be reached: %v\n", canonical, err))
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = up.Close()
		refuse(w, http.StatusInternalServerError, "harnessfacts egress proxy: cannot tunnel on this connection\n")
		return
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		_ = up.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	defer p.untrack(c, up)
	_ = c.SetDeadline(time.Time{}) // the server's header deadline no longer applies
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// A client may send its first bytes (a TLS hello) right behind the
	// request; they sit in the server's buffer.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
	}
	splice(c, up)
}

// denyInside refuses an allowed host that would reach the inside; the
// host's allow-list name is what Stats reports.
func (p *Proxy) denyInside(w http.ResponseWriter, err error) {
	var in *insideError
	target := "?"
	if errors.As(err, &in) {
		target = in.target
	}
	report := p.countDenied(target)
	p.mu.Lock()
	if len(p.insideHosts) < p.opts.MaxDeniedHosts && !containsString(p.insideHosts, report) {
		p.insideHosts = append(p.insideHosts, report)
	}
	p.mu.Unlock()
	refuse(w, http.StatusForbidden, "harnessfacts egress proxy: "+err.Error()+"\n")
}

// countDenied counts a refusal and keeps its target for Stats.
func (p *Proxy) countDenied(target string) string {
	p.denied.Add(1)
	report := strings.ToValidUTF8(target, "?")
	if len(report) > maxHostReport {
		report = strings.ToValidUTF8(report[:maxHostReport-3], "") + "..."
	}
	p.mu.Lock()
	if len(p.deniedHosts) < p.opts.MaxDeniedHosts && !containsString(p.deniedHosts, report) {
		p.deniedHosts = append(p.deniedHosts, report)
	}
	p.mu.Unlock()
	return report
}

func (p *Proxy) deny(w http.ResponseWriter, target string) {
	report := p.countDenied(target)
	if why := p.opts.Allow.Withheld(target); why != "" {
		refuse(w, http.StatusForbidden, fmt.Sprintf("harnessfacts egress proxy: %s is not reached through this proxy: %s\n", quoteForBody(report), why))
		return
	}
	refuse(w, http.StatusForbidden, fmt.Sprintf(
		"harnessfacts egress proxy: %s is not allowed for this run.\n"+
			"The run's spec.network.egress is ProviderOnly: the agent may reach only its adapter's provider hosts, "+
			"spec.network.allowHosts and the host of spec.agent.providerURL (here: %s).\n"+
			"Add the host to spec.network.allowHosts, or set spec.network.egress to Unrestricted.\n",
		quoteForBody(report), strings.Join(p.opts.Allow.Entries(), ", ")))
}

func refuse(w http.ResponseWriter, code int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body)
}

// quoteForBody keeps control characters a client sent out of the body.
func quoteForBody(s string) string {
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}

func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.tunnels[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.tunnels, c)
		_ = c.Close()
	}
}

// dialAllowed is the forwarding transport's dialer: it checks the allow
// list again (the transport dials what the request named, and nothing else
// should ever reach it) and dials.
func (p *Proxy) dialAllowed(ctx context.Context, network, addr string) (net.Conn, error) {
	if _, ok := p.opts.Allow.Allows(addr); !ok {
		return nil, fmt.Errorf("%s is not allowed", addr)
	}
	return p.opts.Dial(ctx, network, addr)
}

// refuseSpecial refuses, after resolution, addresses a provider never has:
// the unspecified address (which Linux treats as this host), multicast, and
// link-local addresses (a cloud's instance metadata service lives there, so
// an allowed name that resolves there must not reach it).
func refuseSpecial(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsUnspecified() || ip.IsMulticast() || ip.IsLinkLocalUnicast() {
		return fmt.Errorf("refusing to connect to %s: not an address a provider has", address)
	}
	return nil
}

// splice copies both ways until both directions are done or one fails.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	half := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
			_ = cw.CloseWrite()
		} else {
			// An error on one side ends the tunnel.
			_ = a.Close()
			_ = b.Close()
		}
		done <- struct{}{}
	}
	go half(a, b)
	go half(b, a)
	<-done
	<-done
}

// limitListener serves at most cap(sem) connections at once.
func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
