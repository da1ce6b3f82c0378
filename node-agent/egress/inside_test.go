package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/dns/dnsmessage"
)

func TestClassify(t *testing.T) {
	cluster := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("172.20.0.0/16"), netip.MustParsePrefix("fd12:3456::/64")}
	cases := map[string]string{
		"127.0.0.1":          KindLoopback,
		"127.9.8.7":          KindLoopback,
		"::1":                KindLoopback,
		"::ffff:127.0.0.1":   KindLoopback,
		"10.1.2.3":           KindPrivate,
		"172.16.0.1":         KindPrivate,
		"192.168.1.1":        KindPrivate,
		"fd00::1":            KindPrivate,
		"169.254.1.1":        KindLinkLocal,
		"fe80::1":            KindLinkLocal,
		"169.254.169.254":    KindMetadata,
		"fd00:ec2::254":      KindMetadata,
		"100.100.100.200":    KindMetadata,
		"168.63.129.16":      KindMetadata,
		"64:ff9b:1::a00:1":   KindReserved, // NAT64 local-use: wherever its IPv4 address sits
		"64:ff9b:1:a00:1::":  KindReserved,
		"64:ff9b:1::808:808": KindReserved,
		"100.64.0.1":         KindCGNAT,
		"100.127.255.254":    KindCGNAT,
		"10.244.3.4":         KindCluster,
		"172.20.0.10":        KindCluster,
		"fd12:3456::a":       KindCluster,
		"0.0.0.0":            KindUnspecified,
		"::":                 KindUnspecified,
		"0.1.2.3":            KindReserved,
		"224.0.0.1":          KindMulticast,
		"255.255.255.255":    KindReserved,
		"64:ff9b::a00:1":     KindPrivate,  // NAT64 of 10.0.0.1
		"64:ff9b::7f00:1":    KindLoopback, // NAT64 of 127.0.0.1
		"2002:a00:1::1":      KindPrivate,  // 6to4 of 10.0.0.1
		"2002:a9fe:a9fe::1":  KindMetadata, // 6to4 of 169.254.169.254
		"::a00:1":            KindReserved, // IPv4-compatible
		"8.8.8.8":            "",
		"1.1.1.1":            "",
		"100.128.0.1":        "",
		"172.32.0.1":         "",
		"2606:4700::1111":    "",
		"64:ff9b::808:808":   "", // NAT64 of 8.8.8.8: the outside
		"2a00:1450:4001::64": "",
	}
	got := map[string]string{}
	for ip := range cases {
		got[ip] = Classify(netip.MustParseAddr(ip), cluster)
	}
	if diff := cmp.Diff(cases, got); diff != "" {
		t.Errorf("Classify (-want +got):\n%s", diff)
	}
}

// mapResolver is a test resolver: the names of a test, without DNS or the
// host's /etc/hosts.
type mapResolver map[string][]string

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	addrs, ok := m[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, a := range addrs {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

// TestProxyRefusesTheInside serves a proxy with an Inside policy and names
// that resolve to each kind of inside address. The allow list lets every
// name through; the dialler refuses each inside address after resolution,
// except the loopback provider on its exact port and a name the policy
// allows.
func TestProxyRefusesTheInside(t *testing.T) {
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "provider") }))
	defer provider.Close()
	// Another port on loopback: what a loopback providerURL must not open.
	other := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, _ *http.Request) {
		t.Error("the proxy reached another loopback port")
	}))
	defer other.Close()
	providerPort := provider.Listener.Addr().(*net.TCPAddr).Port
	otherPort := other.Listener.Addr().(*net.TCPAddr).Port

	res := mapResolver{
		"loopback.test":    {"127.0.0.1"},
		"private.test":     {"10.0.0.7"},
		"private6.test":    {"fd00::7"},
		"linklocal.test":   {"169.254.3.4"},
		"metadata.test":    {"169.254.169.254"},
		"cgnat.test":       {"100.64.1.1"},
		"pod.test":         {"10.244.1.5"},
		"service.test":     {"172.20.0.1"},
		"nat64.test":       {"64:ff9b::a9fe:a9fe"},
		"mixed.test":       {"10.0.0.8", "127.0.0.1"},
		"gateway.internal": {"127.0.0.1"}, // allowed by name by the policy
		"node.test":        {"203.0.113.9"},
	}
	var entries []string
	for name := range res {
		entries = append(entries, fmt.Sprintf("%s:%d", name, providerPort))
	}
	entries = append(entries,
		fmt.Sprintf("127.0.0.1:%d", providerPort), // the loopback providerURL
		fmt.Sprintf("127.0.0.1:%d", otherPort),    // a loopback allowHosts entry
		fmt.Sprintf("localhost.test:%d", otherPort),
		fmt.Sprintf("203.0.113.9:%d", providerPort)) // the node's own, public address
	res["localhost.test"] = []string{"127.0.0.1"}
	allow, err := NewAllowList(entries...)
	if err != nil {
		t.Fatal(err)
	}
	inside := &Inside{
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("172.20.0.0/16")},
		Hosts:        []string{"gateway.internal"},
		Loopback:     []string{fmt.Sprintf("127.0.0.1:%d", providerPort)},
		Node:         []netip.Addr{netip.MustParseAddr("203.0.113.9")},
		Resolver:     res,
	}
	p := New(Options{Allow: allow, Inside: inside})
	client := serveProxy(t, p)

	cases := []struct {
		host string
		port int
		want string // part of the 403 body; "" when the provider answers
	}{
		{"127.0.0.1", providerPort, ""},
		{"gateway.internal", providerPort, ""},
		{"127.0.0.1", otherPort, fmt.Sprintf("refusing to connect to 127.0.0.1:%d, a loopback address", otherPort)},
		{"localhost.test", otherPort, "localhost.test resolves to 127.0.0.1, a loopback address"},
		{"loopback.test", providerPort, "loopback.test resolves to 127.0.0.1, a loopback address"},
		{"private.test", providerPort, "private.test resolves to 10.0.0.7, a private address"},
		{"private6.test", providerPort, "private6.test resolves to fd00::7, a private address"},
		{"linklocal.test", providerPort, "linklocal.test resolves to 169.254.3.4, a link-local address"},
		{"metadata.test", providerPort, "metadata.test resolves to 169.254.169.254, a metadata address"},
		{"cgnat.test", providerPort, "cgnat.test resolves to 100.64.1.1, a CGNAT address"},
		{"pod.test", providerPort, "pod.test resolves to 10.244.1.5, a cluster address"},
		{"service.test", providerPort, "service.test resolves to 172.20.0.1, a cluster address"},
		{"nat64.test", providerPort, "nat64.test resolves to 64:ff9b::a9fe:a9fe, a metadata address"},
		{"mixed.test", providerPort, "mixed.test resolves to 10.0.0.8, a private address"},
		{"node.test", providerPort, "node.test resolves to 203.0.113.9, a node's own address"},
		{"203.0.113.9", providerPort, fmt.Sprintf("refusing to connect to 203.0.113.9:%d, a node's own address", providerPort)},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s:%d", tc.host, tc.port), func(t *testing.T) {
			for _, mode := range []string{"plain", "connect"} {
				status, body := fetchThrough(t, client, mode, tc.host, tc.port)
				switch {
				case tc.want == "" && (status != http.StatusOK || body != "provider"):
					t.Errorf("%s: %d %q, want the provider's answer", mode, status, body)
				case tc.want != "" && (status != http.StatusForbidden || !strings.Contains(body, tc.want)):
					t.Errorf("%s: %d %q, want 403 with %q", mode, status, body, tc.want)
				}
			}
		})
	}
	st := p.Stats()
	if st.Allowed != 4 {
		t.Errorf("allowed %d, want 4 (two targets, plain and CONNECT)", st.Allowed)
	}
	if want := int64(2 * (len(cases) - 2)); st.Denied != want {
		t.Errorf("denied %d, want %d", st.Denied, want)
	}
	if !strings.Contains(strings.Join(st.DeniedHosts, " "), fmt.Sprintf("loopback.test:%d", providerPort)) {
		t.Errorf("denied hosts %v do not name loopback.test", st.DeniedHosts)
	}
	// Each was allowed and refused for its address: the status's hint
	// names insideHosts, not allowHosts, for them.
	if len(st.InsideHosts) == 0 || !slices.Contains(st.InsideHosts, fmt.Sprintf("loopback.test:%d", providerPort)) {
		t.Errorf("inside hosts %v do not name loopback.test", st.InsideHosts)
	}
	for _, h := range st.InsideHosts {
		if !slices.Contains(st.DeniedHosts, h) {
			t.Errorf("inside host %s is not among the denied %v", h, st.DeniedHosts)
		}
	}
}

// serveProxy serves p on a unix socket and returns a client that uses it.
func serveProxy(t *testing.T, p *Proxy) *http.Client {
	t.Helper()
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
		DisableKeepAlives: true,
	}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = p.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &http.Client{Transport: tr}
}

// fetchThrough asks the proxy for http://host:port/ as a plain proxy request
// or through a CONNECT tunnel, and returns the status and body the client
// sees.
func fetchThrough(t *testing.T, client *http.Client, mode, host string, port int) (int, string) {
	t.Helper()
	hostport := net.JoinHostPort(host, fmt.Sprint(port))
	if mode == "plain" {
		res, err := client.Get("http://" + hostport + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	tr := client.Transport.(*http.Transport)
	c, err := tr.DialContext(context.Background(), "unix", "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, hostport)
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", hostport)
	inner, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Body.Close()
	b, _ := io.ReadAll(inner.Body)
	return inner.StatusCode, string(b)
}

// libcResolver answers the numeric forms that getaddrinfo (inet_aton)
// accepts as IPv4 addresses: decimal (2130706433), octal (0177.0.0.1), hex
// (0x7f.1) and short forms, as a node-agent built with cgo would resolve
// them. The allow list treats them as names; what they resolve to is judged.
type libcResolver map[string]string

func (m libcResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestProxyRefusesAdversarialTargets: the forms an agent would try to reach
// the node's loopback through an allowed-looking target. Each is in the
// allow list (as a run author could put it in allowHosts); none reaches the
// loopback server, and the loopback provider's own port stays reachable.
func TestProxyRefusesAdversarialTargets(t *testing.T) {
	var hits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	defer target.Close()
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "provider") }))
	defer provider.Close()
	port := target.Listener.Addr().(*net.TCPAddr).Port
	providerPort := provider.Listener.Addr().(*net.TCPAddr).Port

	res := libcResolver{"2130706433": "127.0.0.1", "0177.0.0.1": "127.0.0.1", "0x7f.0.0.1": "127.0.0.1", "0x7f000001": "127.0.0.1",
		"127.1": "127.0.0.1", "0": "0.0.0.0"}
	cases := []struct{ host, want string }{
		{"::ffff:127.0.0.1", "refusing to connect to 127.0.0.1"}, // IPv4-mapped IPv6, canonical form IPv4
		{"::ffff:7f00:1", "refusing to connect to 127.0.0.1"},
		{"2130706433", "2130706433 resolves to 127.0.0.1, a loopback address"},
		{"0177.0.0.1", "0177.0.0.1 resolves to 127.0.0.1, a loopback address"},
		{"0x7f.0.0.1", "0x7f.0.0.1 resolves to 127.0.0.1, a loopback address"},
		{"0x7f000001", "0x7f000001 resolves to 127.0.0.1, a loopback address"},
		{"127.1", "127.1 resolves to 127.0.0.1, a loopback address"},
		{"0.0.0.0", "a unspecified address"}, // Linux connects 0.0.0.0 to this host
		{"0", "0 resolves to 0.0.0.0, a unspecified address"},
		{"::", "a unspecified address"},
		{"::1", "a loopback address"},
		{"127.0.0.1", "a loopback address"}, // the provider's address, another port
	}
	var entries []string
	for _, c := range cases {
		entries = append(entries, net.JoinHostPort(c.host, fmt.Sprint(port)))
	}
	entries = append(entries, net.JoinHostPort("127.0.0.1", fmt.Sprint(providerPort)))
	allow, err := NewAllowList(entries...)
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Allow: allow, Inside: &Inside{Loopback: []string{net.JoinHostPort("127.0.0.1", fmt.Sprint(providerPort))}, Resolver: res}})
	client := serveProxy(t, p)
	for _, c := range cases {
		for _, mode := range []string{"plain", "connect"} {
			status, body := fetchThrough(t, client, mode, c.host, port)
			if status != http.StatusForbidden || !strings.Contains(body, c.want) {
				t.Errorf("%s %s: %d %q, want 403 with %q", mode, c.host, status, body, c.want)
			}
		}
	}
	// The loopback provider's exact port, also as its IPv4-mapped form.
	for _, host := range []string{"127.0.0.1", "::ffff:127.0.0.1"} {
		for _, mode := range []string{"plain", "connect"} {
			if status, body := fetchThrough(t, client, mode, host, providerPort); status != http.StatusOK || body != "provider" {
				t.Errorf("%s %s:%d (the loopback provider): %d %q", mode, host, providerPort, status, body)
			}
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the loopback server was reached %d times", n)
	}
}

// TestInsideRefusesAMixedAnswerWhole: a name that resolves to a public and
// a private address is refused before any dial, whichever comes first (a
// dialler that skipped the private one would connect to the public one,
// one that tried them in order would reach the private one when the public
// one does not answer).
func TestInsideRefusesAMixedAnswerWhole(t *testing.T) {
	for _, tc := range []struct {
		answer []string
		inside string
	}{
		{[]string{"192.0.2.10", "10.1.2.3"}, "10.1.2.3"},
		{[]string{"10.1.2.3", "192.0.2.10"}, "10.1.2.3"},
		{[]string{"2001:4860::1", "::1"}, "::1"},
	} {
		in := Inside{Resolver: mapResolver{"mixed.test": tc.answer}}
		c, err := in.Dialer(time.Second)(context.Background(), "tcp", "mixed.test:443")
		if c != nil {
			_ = c.Close()
		}
		// The refusal alone: no dial of the public address failed first.
		_, alone := err.(*insideError) //nolint:errorlint // the refusal itself, not one joined with a failed dial
		if !alone || !strings.Contains(err.Error(), "mixed.test resolves to "+tc.inside+",") {
			t.Errorf("%v: %v, want only a refusal naming %s", tc.answer, err, tc.inside)
		}
	}
}

// dnsServer answers A queries on a loopback UDP port from answers, the nth
// query for a name with the nth address (the last one after that), and
// AAAA queries with nothing: a real resolver path, including an answer that
// changes between queries (DNS rebinding).
func dnsServer(t *testing.T, answers map[string][]string) (*net.Resolver, *atomic.Int64) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	var queries atomic.Int64
	var mu sync.Mutex
	asked := map[string]int{}
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			name := strings.TrimSuffix(q.Name.String(), ".")
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, RecursionAvailable: true})
			b.EnableCompression()
			_ = b.StartQuestions()
			_ = b.Question(q)
			_ = b.StartAnswers()
			if q.Type == dnsmessage.TypeA {
				queries.Add(1)
				mu.Lock()
				list := answers[name]
				i := min(asked[name], len(list)-1)
				asked[name]++
				mu.Unlock()
				if len(list) > 0 {
					a := netip.MustParseAddr(list[i]).As4()
					_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}, dnsmessage.AResource{A: a})
				}
			}
			msg, err := b.Finish()
			if err == nil {
				_, _ = pc.WriteTo(msg, from)
			}
		}
	}()
	addr := pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "udp", addr)
	}}, &queries
}

// TestInsideWithARealResolver resolves through a DNS server on loopback:
// names that resolve to loopback, private, metadata and CGNAT addresses
// are refused, a name the policy allows reaches its server, and a name
// that first resolves outside and then to loopback (rebinding) never
// reaches the loopback server: the address dialled is the one resolved and
// judged, once.
func TestInsideWithARealResolver(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1); fmt.Fprint(w, "inside") }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	res, queries := dnsServer(t, map[string][]string{
		"loopback.test": {"127.0.0.1"}, "private.test": {"192.168.7.7"}, "metadata.test": {"169.254.169.254"},
		"cgnat.test": {"100.100.1.1"}, "allowed.test": {"127.0.0.1"},
		"rebind.test": {"192.0.2.1", "127.0.0.1"},
	})
	in := Inside{Resolver: res, Hosts: []string{"allowed.test"}}
	dial := in.Dialer(300 * time.Millisecond)
	for name, kind := range map[string]string{"loopback.test": KindLoopback, "private.test": KindPrivate, "metadata.test": KindMetadata, "cgnat.test": KindCGNAT} {
		_, err := dial(context.Background(), "tcp", net.JoinHostPort(name, fmt.Sprint(port)))
		if !errors.Is(err, ErrInside) || !strings.Contains(err.Error(), "a "+kind+" address") {
			t.Errorf("%s: %v, want a refusal naming a %s address", name, err, kind)
		}
	}
	c, err := dial(context.Background(), "tcp", net.JoinHostPort("allowed.test", fmt.Sprint(port)))
	if err != nil {
		t.Fatalf("allowed.test, allowed by name: %v", err)
	}
	_ = c.Close()
	before, hitsBefore := queries.Load(), hits.Load()
	// 192.0.2.1 (TEST-NET-1) is outside and answers nothing here: the dial
	// fails, and no second resolution gives the loopback address a chance.
	if c, err := dial(context.Background(), "tcp", net.JoinHostPort("rebind.test", fmt.Sprint(port))); err == nil {
		_ = c.Close()
		t.Errorf("rebind.test connected")
	}
	if n := queries.Load() - before; n != 1 {
		t.Errorf("rebind.test was resolved %d times for one dial, want once", n)
	}
	if c, err := dial(context.Background(), "tcp", net.JoinHostPort("rebind.test", fmt.Sprint(port))); !errors.Is(err, ErrInside) {
		if c != nil {
			_ = c.Close()
		}
		t.Errorf("rebind.test, now resolving to loopback: %v, want a refusal", err)
	}
	if n := hits.Load() - hitsBefore; n != 0 {
		t.Errorf("the loopback server was reached %d times through rebind.test", n)
	}
}

// TestNodesOwnAddressInEveryForm: the node's own address is refused in the
// forms that reach it through a translator too (IPv4-mapped, NAT64, 6to4),
// as every other inside address is.
func TestNodesOwnAddressInEveryForm(t *testing.T) {
	in := Inside{Node: []netip.Addr{netip.MustParseAddr("203.0.113.9")}}
	for _, a := range []string{"203.0.113.9", "[::ffff:203.0.113.9]", "[64:ff9b::cb00:7109]", "[2002:cb00:7109::1]"} {
		if err := in.check("node.test", "node.test:443", a+":443"); err == nil || !strings.Contains(err.Error(), "node's own") {
			t.Errorf("%s (the node's 203.0.113.9): %v, want a refusal", a, err)
		}
	}
	// NAT64's local-use prefix is inside whole: where its IPv4 address
	// sits depends on the translator.
	if err := in.check("node.test", "node.test:443", "[64:ff9b:1::cb00:7109]:443"); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("64:ff9b:1::cb00:7109: %v, want a refusal", err)
	}
	if err := in.check("other.test", "other.test:443", "[2002:cb00:710a::1]:443"); err != nil {
		t.Errorf("another address's 6to4 form: %v", err)
	}
}
