package executor

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/egress"
	"github.com/harnessfacts/harnessfacts/node-agent/redact"
)

func TestAllowListOfARun(t *testing.T) {
	run := &harnessv1.HarnessRun{Spec: harnessv1.HarnessRunSpec{
		Agent:   harnessv1.AgentSpec{ProviderURL: "https://Gateway.Example.com/v1"},
		Network: harnessv1.NetworkSpec{AllowHosts: []string{"pypi.example.org", "10.0.0.7:8080"}},
	}}
	inv := &adapters.Invocation{ProviderHosts: []string{"api.example.com:443"}}
	allow, err := allowList(run, inv)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.7:8080", "api.example.com:443", "gateway.example.com:443", "pypi.example.org:443", "pypi.example.org:80"}
	if diff := cmp.Diff(want, allow.Entries()); diff != "" {
		t.Errorf("allow list (-want +got):\n%s", diff)
	}

	run.Spec.Network.AllowHosts = []string{"bad host"}
	if _, err := allowList(run, inv); err == nil || !strings.Contains(err.Error(), "spec.network.allowHosts") {
		t.Errorf("a bad allowHosts entry: %v, want an error naming the field", err)
	}
}

func TestWrapBridgesMCPAndProxy(t *testing.T) {
	e := &Executor{opts: Options{InitBinary: "/hf"}}
	srv := &mcpServer{httpSocket: "/run/x/sockets/mcp-http.sock"}
	px := &egressProxy{proxy: egress.New(egress.Options{}), socket: "/run/x/sockets/egress.sock"}
	cases := []struct {
		name      string
		transport harnessv1.MCPTransport
		px        *egressProxy
		bridge    *providerBridge
		want      []string
	}{
		{"neither", harnessv1.MCPTransportStdio, nil, nil, []string{"agent", "-x"}},
		{"mcp", harnessv1.MCPTransportHTTP, nil, nil, []string{"/hf", "sandbox-init",
			"--forward", "127.0.0.1:7700=unix:/run/x/sockets/mcp-http.sock", "--", "agent", "-x"}},
		{"proxy", harnessv1.MCPTransportNone, px, nil, []string{"/hf", "sandbox-init",
			"--egress-proxy", "127.0.0.1:7701=unix:/run/x/sockets/egress.sock", "--", "agent", "-x"}},
		{"both", harnessv1.MCPTransportHTTP, px, nil, []string{"/hf", "sandbox-init",
			"--forward", "127.0.0.1:7700=unix:/run/x/sockets/mcp-http.sock",
			"--egress-proxy", "127.0.0.1:7701=unix:/run/x/sockets/egress.sock", "--", "agent", "-x"}},
		{"provider on loopback", harnessv1.MCPTransportHTTP, px, &providerBridge{listen: "127.0.0.1:8089", socket: "/run/x/sockets/provider.sock"}, []string{"/hf", "sandbox-init",
			"--forward", "127.0.0.1:7700=unix:/run/x/sockets/mcp-http.sock",
			"--forward", "127.0.0.1:8089=unix:/run/x/sockets/provider.sock",
			"--egress-proxy", "127.0.0.1:7701=unix:/run/x/sockets/egress.sock", "--", "agent", "-x"}},
	}
	for _, tc := range cases {
		if diff := cmp.Diff(tc.want, e.wrap([]string{"agent", "-x"}, srv, tc.transport, tc.px, tc.bridge)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestProviderBridgeOnlyForLoopback(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "provider.sock")
	for _, u := range []string{"", "https://api.example.com/v1", "http://10.0.0.1:8080"} {
		if b, err := startProviderBridge(sock, u); b != nil || err != nil {
			t.Errorf("%q: bridge %v, err %v; want none", u, b, err)
		}
	}
	for _, u := range []string{"http://127.0.0.1:7700", "http://localhost:7701/v1", "http://[::1]:8080"} {
		if b, err := startProviderBridge(sock, u); err == nil {
			b.stop()
			t.Errorf("%q: bridged, want an error", u)
		}
	}
	b, err := startProviderBridge(sock, "http://localhost:8089/s/hello")
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
	if err == nil || !strings.Contains(err.Error(), "too long") || !strings.Contains(err.Error(), "at most 41 characters") {
		t.Fatalf("got %v, want a refusal naming the longest root that works", err)
	}
}

// noSources has nothing to read: the executor refuses before it would.
type noSources struct{ Sources }
