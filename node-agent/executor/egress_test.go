package executor

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/egress"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/redact"
	"github.com/harnessfacts/harnessfacts/node-agent/sandboxinit"
)

func TestAllowListOfARun(t *testing.T) {
	run := &harnessv1.HarnessRun{Spec: harnessv1.HarnessRunSpec{
		Agent:   harnessv1.AgentSpec{ProviderURL: "https://Gateway.Example.com/v1"},
		Network: harnessv1.NetworkSpec{AllowHosts: []string{"pypi.example.org", "10.0.0.7:8080"}},
	}}
	inv := &adapters.Invocation{ProviderHosts: []string{"api.example.com:443"}}
	allow, err := allowList(run, inv, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.7:8080", "api.example.com:443", "gateway.example.com:443", "pypi.example.org:443", "pypi.example.org:80"}
	if diff := cmp.Diff(want, allow.Entries()); diff != "" {
		t.Errorf("allow list (-want +got):\n%s", diff)
	}

	// With the model gateway the provider is withheld, whatever
	// allowHosts says: the agent would reach it past the gateway's count.
	run.Spec.Network.AllowHosts = []string{"gateway.example.com", "pypi.example.org"}
	gw, err := allowList(run, inv, false)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"api.example.com:443", "gateway.example.com:80", "pypi.example.org:443", "pypi.example.org:80"}
	if diff := cmp.Diff(want, gw.Entries()); diff != "" {
		t.Errorf("allow list with the gateway (-want +got):\n%s", diff)
	}
	if c, ok := gw.Allows("Gateway.Example.com.:443"); ok || !strings.Contains(gw.Withheld(c), "model gateway") {
		t.Errorf("the gateway's provider through the proxy: allowed %v, withheld %q", ok, gw.Withheld(c))
	}

	run.Spec.Network.AllowHosts = []string{"bad host"}
	if _, err := allowList(run, inv, true); err == nil || !strings.Contains(err.Error(), "spec.network.allowHosts") {
		t.Errorf("a bad allowHosts entry: %v, want an error naming the field", err)
	}
}

func TestWrapBridgesMCPAndProxy(t *testing.T) {
	e := &Executor{opts: Options{InitBinary: "/hf"}}
	srv := &mcpServer{httpSocket: "/run/x/sockets/mcp-http.sock"}
	px := &egressProxy{proxy: egress.New(egress.Options{}), socket: "/run/x/sockets/egress.sock"}
	mcpFwd := sandboxinit.Forward{Listen: "127.0.0.1:7700", Socket: "/run/x/sockets/mcp-http.sock"}
	proxyFwd := &sandboxinit.Forward{Listen: "127.0.0.1:7701", Socket: "/run/x/sockets/egress.sock"}
	cases := []struct {
		name      string
		transport harnessv1.MCPTransport
		px        *egressProxy
		bridge    *providerBridge
		want      *sandboxinit.Config // nil: no sandbox-init
	}{
		{"neither", harnessv1.MCPTransportStdio, nil, nil, nil},
		{"mcp", harnessv1.MCPTransportHTTP, nil, nil, &sandboxinit.Config{Forwards: []sandboxinit.Forward{mcpFwd}}},
		{"proxy", harnessv1.MCPTransportNone, px, nil, &sandboxinit.Config{Proxy: proxyFwd}},
		{"both", harnessv1.MCPTransportHTTP, px, nil, &sandboxinit.Config{Forwards: []sandboxinit.Forward{mcpFwd}, Proxy: proxyFwd}},
		{"provider on loopback", harnessv1.MCPTransportHTTP, px, &providerBridge{listen: "127.0.0.1:8089", socket: "/run/x/sockets/provider.sock"},
			&sandboxinit.Config{Forwards: []sandboxinit.Forward{mcpFwd, {Listen: "127.0.0.1:8089", Socket: "/run/x/sockets/provider.sock"}}, Proxy: proxyFwd}},
	}
	for _, tc := range cases {
		forwards, proxy := bridges(srv, tc.transport, tc.px, tc.bridge, nil)
		// The runner serves each on the sandbox's loopback (Linux, and
		// the plain runner).
		var listens []string
		for _, l := range loopback(forwards, proxy) {
			listens = append(listens, l.Addr)
		}
		var want []string
		if tc.want != nil {
			for _, f := range tc.want.Forwards {
				want = append(want, f.Listen)
			}
			if tc.want.Proxy != nil {
				want = append(want, tc.want.Proxy.Listen)
			}
		}
		if diff := cmp.Diff(want, listens); diff != "" {
			t.Errorf("%s: the runner's loopback listeners (-want +got):\n%s", tc.name, diff)
		}
		// Or sandbox-init does, inside (AppContainer).
		argv, env, err := e.wrap([]string{"agent", "-x"}, forwards, proxy)
		if err != nil {
			t.Fatal(err)
		}
		wantArgv := []string{"agent", "-x"}
		if tc.want != nil {
			wantArgv = []string{"/hf", "sandbox-init", "--", "agent", "-x"}
		}
		if diff := cmp.Diff(wantArgv, argv); diff != "" {
			t.Errorf("%s: argv (-want +got):\n%s", tc.name, diff)
		}
		// The sockets are on no command line: they travel in the environment.
		if strings.Contains(strings.Join(argv, " "), "/sockets/") {
			t.Errorf("%s: a socket path on the command line: %q", tc.name, argv)
		}
		got, rest, err := sandboxinit.ConfigFromEnv(env)
		if err != nil || len(rest) != 0 {
			t.Fatalf("%s: env %q: %v", tc.name, env, err)
		}
		if tc.want == nil {
			if len(env) != 0 {
				t.Errorf("%s: env %q without sandbox-init", tc.name, env)
			}
			continue
		}
		if diff := cmp.Diff(*tc.want, got, cmpopts.IgnoreFields(sandboxinit.Config{}, "Stdin")); diff != "" {
			t.Errorf("%s: sandbox-init's config (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestProviderBridgeOnlyForLoopback(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "provider.sock")
	for _, u := range []string{"", "https://api.example.com/v1", "http://10.0.0.1:8080"} {
		if b, err := startProviderBridge(sock, u, &egress.Inside{}, socketOwner{uid: 0, gid: 0}); b != nil || err != nil {
			t.Errorf("%q: bridge %v, err %v; want none", u, b, err)
		}
	}
	for _, u := range []string{"http://127.0.0.1:7700", "http://localhost:7701/v1", "http://[::1]:8080", "http://127.0.0.1", "https://localhost/v1", "http://127.0.0.1:1023"} {
		if b, err := startProviderBridge(sock, u, &egress.Inside{}, socketOwner{uid: 0, gid: 0}); err == nil {
			b.stop()
			t.Errorf("%q: bridged, want an error", u)
		}
	}
	b, err := startProviderBridge(sock, "http://localhost:8089/s/hello", &egress.Inside{}, socketOwner{uid: 0, gid: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop()
	if b.listen != "127.0.0.1:8089" || b.socket != sock {
		t.Errorf("bridge %+v", b)
	}
}

// TestNetworkStatusRedactsDeniedHosts: an agent that puts a credential in a
// host name (CONNECT <secret>.evil.example:443) does not get it into status
// or an Event.
func TestNetworkStatusRedactsDeniedHosts(t *testing.T) {
	const secret = "s3cr3tv4lu3x9q"
	r, err := redact.New(redact.Options{Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	n, w := networkStatus(harnessv1.EgressProviderOnly, &egress.Stats{Allowed: 4, Denied: 2,
		DeniedHosts: []string{secret + ".evil.example:443", "elsewhere.example:80"}}, r)
	if n.Allowed != 4 || n.Denied != 2 || len(n.DeniedHosts) != 2 || n.DeniedHosts[1] != "elsewhere.example:80" {
		t.Errorf("status %+v", n)
	}
	if w == nil || w.Reason != "EgressDenied" || !strings.Contains(w.Message, "refused 2") {
		t.Fatalf("warning %+v", w)
	}
	for _, s := range append([]string{w.Message}, n.DeniedHosts...) {
		if strings.Contains(s, secret) {
			t.Errorf("the secret reached %q", s)
		}
	}
	if strings.Contains(w.Message, "insideHosts") || !strings.Contains(w.Message, "allowHosts") {
		t.Errorf("hosts not allowed, hint %q: want allowHosts alone", w.Message)
	}
	// An allowed host at an inside address (a provider on the LAN): the
	// hint names insideHosts for it, not allowHosts, which it is in.
	_, w = networkStatus(harnessv1.EgressProviderOnly, &egress.Stats{Denied: 1,
		DeniedHosts: []string{"192.0.2.2:18096"}, InsideHosts: []string{"192.0.2.2:18096"}}, r)
	if w == nil || strings.Contains(w.Message, "allowHosts") || !strings.Contains(w.Message, "192.0.2.2:18096 is allowed but resolves to an address of this node or a private network") ||
		!strings.Contains(w.Message, "network.insideHosts") || !strings.Contains(w.Message, "--inside-host") {
		t.Errorf("an inside address's hint: %+v", w)
	}
	if n, w := networkStatus(harnessv1.EgressNone, nil, r); w != nil || n.Egress != harnessv1.EgressNone || n.Allowed != 0 {
		t.Errorf("without a proxy: %+v %+v", n, w)
	}
}

// TestExecutorRefusesARunRootTooLongForSockets: a run root whose run dirs
// could not hold the runs' unix sockets is refused at start, with the
// longest root that works, not at every run.
func TestExecutorRefusesARunRootTooLongForSockets(t *testing.T) {
	root := filepath.Join("/", strings.Repeat("r", 60))
	_, err := New(Options{Sources: noSources{}, RunRoot: root})
	if err == nil || !strings.Contains(err.Error(), "too long") || !strings.Contains(err.Error(), "at most 54 characters") {
		t.Fatalf("got %v, want a refusal naming the longest root that works", err)
	}
}

// noSources has nothing to read: the executor refuses before it would.
type noSources struct{ Sources }

// TestInsideOfARun: what a ProviderOnly run may reach of the inside is the
// names its status carries from the policies (canonical), the executor's
// own, and its loopback providerURL's exact host and port, nothing else.
func TestInsideOfARun(t *testing.T) {
	cidrs := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}
	// The node's own addresses: a public one (twice, once IPv4-mapped),
	// and a private one, inside already by its range.
	known := []netip.Addr{netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("::ffff:203.0.113.9")}
	e := &Executor{opts: Options{ClusterCIDRs: cidrs, InsideHosts: []string{"Lab.Local."}, NodeAddrs: known}}
	run := &harnessv1.HarnessRun{
		Spec:   harnessv1.HarnessRunSpec{Agent: harnessv1.AgentSpec{ProviderURL: "http://LocalHost:8089/s/hello"}},
		Status: harnessv1.HarnessRunStatus{InsideHosts: []string{"gateway.corp", "lab.local"}},
	}
	in, err := e.inside(run)
	if err != nil {
		t.Fatal(err)
	}
	// Then this machine's own addresses outside the inside ranges, if any.
	node := nodeAddrs(known)
	if len(node) == 0 || node[0] != known[0] || slices.Contains(node, known[1]) || slices.Index(node[1:], known[0]) >= 0 {
		t.Errorf("node addresses %v, want %s first, once, and not %s", node, known[0], known[1])
	}
	want := &egress.Inside{ClusterCIDRs: cidrs, Hosts: []string{"lab.local", "gateway.corp"}, Loopback: []string{"localhost:8089"}, Node: node}
	if diff := cmp.Diff(want, in, cmpopts.EquateComparable(netip.Prefix{}, netip.Addr{})); diff != "" {
		t.Errorf("inside (-want +got):\n%s", diff)
	}
	for url, want := range map[string]string{
		"http://127.0.0.1:8089/v1": "127.0.0.1:8089", "https://127.0.0.2/v1": "127.0.0.2:443", "http://[::1]:9/": "[::1]:9",
		"http://[::ffff:127.0.0.1]:7/": "127.0.0.1:7", "https://api.example.com/v1": "", "http://10.0.0.1:8080": "", "": "",
		"http://0.0.0.0:80/": "", "http://2130706433:80/": "",
	} {
		if got, _ := loopbackProvider(url); got != want {
			t.Errorf("loopbackProvider(%q) = %q, want %q", url, got, want)
		}
	}
	run.Status.InsideHosts = []string{"bad host"}
	if _, err := e.inside(run); err == nil {
		t.Error("a bad inside host was taken")
	}
}

// TestProviderBridgeReachesItsPort: the provider relay dials through the
// run's Inside, which lets it reach loopback at the providerURL's port (the
// URL names localhost, the relay dials 127.0.0.1).
func TestProviderBridgeReachesItsPort(t *testing.T) {
	provider, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer provider.Close()
	go func() {
		for {
			c, err := provider.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("provider"))
			_ = c.Close()
		}
	}()
	port := provider.Addr().(*net.TCPAddr).Port
	sock := filepath.Join(t.TempDir(), "provider.sock")
	b, err := startProviderBridge(sock, fmt.Sprintf("http://localhost:%d/v1", port), &egress.Inside{}, socketOwner{uid: os.Getuid(), gid: os.Getgid()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(c)
	_ = c.Close()
	if string(got) != "provider" {
		t.Errorf("through the bridge: %q", got)
	}
}

// TestEgressSharesKeepHostileRunsToTheirOwn: on a node of eight slots,
// seven runs whose agents hold every connection their proxy serves (a
// tunnel has no idle bound: one to an allowed host is held for the whole
// episode) leave the eighth run's proxy connections to serve. With 64 a
// run and 256 for the node, four such runs took every node slot, and every
// other run's agent waited in its socket's backlog for as long as they ran.
func TestEgressSharesKeepHostileRunsToTheirOwn(t *testing.T) {
	const slots = 8
	e := &Executor{opts: Options{Slots: slots}, egressConns: egress.NewNodeConns(egress.DefaultNodeConns)}
	owner := socketOwner{uid: os.Getuid(), gid: os.Getgid()}
	serve := func() string {
		dir := &fixture.RunDir{Path: t.TempDir()}
		if err := os.Mkdir(dir.Sockets(), 0o700); err != nil {
			t.Fatal(err)
		}
		allow, err := egress.NewAllowList("provider.example")
		if err != nil {
			t.Fatal(err)
		}
		px, err := e.serveEgress(dir, allow, nil, owner)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(px.stop)
		return px.socket
	}
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			_ = c.Close()
		}
	})
	for range slots - 1 {
		sock := serve()
		for range egress.DefaultMaxConns {
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
		}
	}
	// The hostile runs' connections are taken as far as their proxies let them.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if len(e.egressConns) == cap(e.egressConns) {
			break
		}
	}
	victim := serve()
	c, err := net.Dial("unix", victim)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, "CONNECT denied.example:443 HTTP/1.1\r\nHost: denied.example:443\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the eighth run's proxy did not answer with %d of the node's %d tunnels held by seven runs: %v", len(e.egressConns), cap(e.egressConns), err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("the eighth run's proxy answered %s, want its refusal of a host not allowed", resp.Status)
	}
}

// TestEgressConnsPerRunAddUpToTheNodes: each run's share of the node's
// proxy connections; together at most the node's up to 32 slots.
func TestEgressConnsPerRunAddUpToTheNodes(t *testing.T) {
	node := egress.NewNodeConns(egress.DefaultNodeConns)
	for slots, want := range map[int]int{0: 64, 1: 64, 2: 64, 4: 64, 5: 51, 8: 32, 16: 16, 32: 8, 100: 8} {
		got := egressConnsPerRun(node, slots)
		if got != want {
			t.Errorf("%d slots: %d connections a run, want %d", slots, got, want)
		}
		if slots > 0 && slots <= 32 && got*slots > cap(node) {
			t.Errorf("%d slots of %d connections each pass the node's %d", slots, got, cap(node))
		}
	}
}
