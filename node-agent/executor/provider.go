package executor

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/egress"
	"github.com/harnessfacts/harnessfacts/node-agent/sandboxinit"
)

// refuseLoopbackProvider refuses a providerURL on this node-agent's own
// loopback where the node-agent was told to (NoLoopbackProviders): the
// bridge into the sandbox, or the model gateway, would carry the agent's
// requests to whatever listens there, which in a pod is the node-agent
// itself and its sidecars (a service mesh's unauthenticated admin API).
func (a *attempt) refuseLoopbackProvider(context.Context) error {
	if !a.e.opts.NoLoopbackProviders {
		return nil
	}
	if addr, ok := loopbackProvider(a.run.Spec.Agent.ProviderURL); ok {
		return fail(harnessv1.ReasonPolicyViolation, fmt.Errorf("spec.agent.providerURL names %s, this node-agent's own loopback, which this node reaches for no run (--loopback-providers=false, the chart's default: in a pod the loopback is the node-agent's own and its sidecars'): serve the provider at an address of the cluster, and allow it with a HarnessPolicy's network.insideHosts", addr))
	}
	return nil
}

// providerBridge carries a sandbox's connections to a model provider that
// listens on the node's loopback: the sandbox has its own loopback, where
// the runner listens on the provider's address and relays to a unix
// socket in the run's sockets/ folder, which this relays to the provider.
// The egress proxy cannot carry these: NO_PROXY keeps loopback direct.
type providerBridge struct {
	listen, socket string
	ln             net.Listener
	done           chan struct{}
}

// startProviderBridge bridges rawURL's address through socket when it is
// on the node's loopback; it returns nil for any other provider (the egress
// proxy allows those) and for none.
func startProviderBridge(socket, rawURL string, inside *egress.Inside, owner socketOwner) (*providerBridge, error) {
	if rawURL == "" {
		return nil, nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("spec.agent.providerURL: %w", err)
	}
	host, port := u.Hostname(), u.Port()
	ip := net.ParseIP(host)
	if host == "localhost" {
		ip = net.IPv4(127, 0, 0, 1)
	}
	if ip == nil || !ip.IsLoopback() {
		return nil, nil
	}
	if ip.To4() == nil {
		return nil, fmt.Errorf("spec.agent.providerURL %q: an IPv6 loopback provider is not bridged; use 127.0.0.1", rawURL)
	}
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	// Where sandbox-init bridges it (AppContainer) it listens on the port
	// as the run's unprivileged user, which may not bind one below 1024:
	// found only when the agent had started, the run was the agent's
	// failure ("exited with code 127"). One rule for every runner.
	if n, err := strconv.Atoi(port); err != nil || n < 1024 || n > 65535 {
		return nil, fmt.Errorf("spec.agent.providerURL %q: a provider on this node's loopback is bridged into the sandbox on its own port, which the run's unprivileged user can bind only from 1024 to 65535: serve it on such a port", rawURL)
	}
	if port == fmt.Sprint(SandboxMCPPort) || port == fmt.Sprint(SandboxEgressPort) || port == fmt.Sprint(SandboxGatewayPort) {
		return nil, fmt.Errorf("spec.agent.providerURL %q: port %s is taken in the sandbox by the run's own MCP, egress and model gateway bridges", rawURL, port)
	}
	// The agent dials the address it was given; the bridge listens on
	// 127.0.0.1 in the sandbox whichever loopback name the URL uses.
	listen := net.JoinHostPort("127.0.0.1", port)
	target := net.JoinHostPort(ip.String(), port)
	if _, err := sandboxinit.ParseForward(listen + "=unix:/x"); err != nil {
		return nil, err
	}
	b := &providerBridge{listen: listen, socket: socket, done: make(chan struct{})}
	if b.ln, err = listenBounded(b.socket, providerChannel, owner); err != nil {
		return nil, err
	}
	// The relay dials through the run's Inside too: it reaches loopback
	// only at the providerURL's exact port, judged on the socket dialled.
	// The URL's own loopback name is the one Inside.Loopback allows.
	in := *inside
	if t, ok := loopbackProvider(rawURL); ok {
		in.Loopback = []string{t, target}
	}
	dial := in.Dialer(egress.DefaultDialTimeout)
	go func() {
		defer close(b.done)
		sandboxinit.Relay(b.ln, func() (net.Conn, error) { return dial(context.Background(), "tcp", target) })
	}()
	return b, nil
}

func (b *providerBridge) stop() {
	_ = b.ln.Close()
	<-b.done
}
