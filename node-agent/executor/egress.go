package executor

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/egress"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// SandboxEgressPort is the loopback port inside the sandbox on which
// the run's egress proxy is bridged (egress ProviderOnly; see loopback).
const SandboxEgressPort = 7701

// useProxy says whether the run gets the egress proxy: ProviderOnly in a
// sandbox with its own network. A plain child shares the node's network: a
// proxy would restrict only the tools that honour HTTPS_PROXY, so it gets
// none (condition Sandboxed says the run was not isolated).
func (a *attempt) useProxy() bool {
	return a.egress == harnessv1.EgressProviderOnly && a.runner.Mode() != sandbox.ModePlain
}

// startEgress starts the run's egress proxy and the model gateway or, for a
// provider on the node's loopback (harnessfacts fake-provider, a local
// model server) without one, the bridge that carries it to the same
// address in the sandbox's own loopback, so the CLI uses the URL the run
// names. Each dials through the run's Inside: no inside address (loopback, private, link-local, CGNAT,
// the cluster's ranges, metadata) unless the policy allows its name, and a
// loopback providerURL on its exact port.
func (a *attempt) startEgress(ctx context.Context) error {
	if !a.useProxy() {
		if a.egress == harnessv1.EgressUnrestricted && a.runner.Mode() != sandbox.ModePlain {
			// The sandbox's user-mode network never reaches the node's
			// loopback; a provider the run names there (fake-provider,
			// a local model server) is bridged onto the same address in
			// the sandbox, as under ProviderOnly: the agent's requests
			// failed until its deadline.
			inside, err := a.e.inside(a.run)
			if err != nil {
				return fail(harnessv1.ReasonEgressProxyFailed, fmt.Errorf("what the run may reach of the inside cannot be settled: %w", err))
			}
			return a.bridgeLoopbackProvider(inside)
		}
		return nil
	}
	allow, err := allowList(a.run, a.inv, a.route == nil)
	if err != nil {
		return fail(harnessv1.ReasonEgressProxyFailed, fmt.Errorf("the egress allow list cannot be built: %w", err))
	}
	inside, err := a.e.inside(a.run)
	if err != nil {
		return fail(harnessv1.ReasonEgressProxyFailed, fmt.Errorf("what the run may reach of the inside cannot be settled: %w", err))
	}
	a.inside = inside
	proxyInside := inside
	if a.route != nil {
		// The gateway's provider is the gateway's alone: on loopback, the
		// proxy reaches no port of it.
		in := *inside
		in.Loopback = nil
		proxyInside = &in
	}
	px, err := a.e.serveEgress(a.dir, allow, proxyInside, a.runIDs())
	if err != nil {
		return fail(harnessv1.ReasonEgressProxyFailed, fmt.Errorf("the egress proxy could not start: %w", err))
	}
	a.proxy = px
	a.deferCleanup(px.stop)
	log.FromContext(ctx).V(1).Info("egress proxy", "allowed", allow.Entries(), "insideHosts", inside.Hosts, "loopbackProvider", inside.Loopback)

	if a.route != nil {
		// The model path is the gateway's: the agent reaches no provider
		// itself.
		return a.startGateway(ctx)
	}
	return a.bridgeLoopbackProvider(inside)
}

// bridgeLoopbackProvider bridges the run's providerURL into the sandbox when
// it is on the node's loopback (startProviderBridge); nothing otherwise.
func (a *attempt) bridgeLoopbackProvider(inside *egress.Inside) error {
	bridge, err := startProviderBridge(a.dir.Socket(fixture.SocketProvider), a.run.Spec.Agent.ProviderURL, inside, a.runIDs())
	if err != nil {
		return fail(harnessv1.ReasonEgressProxyFailed, fmt.Errorf("the provider on this node's loopback cannot be bridged into the sandbox: %w", err))
	}
	if bridge != nil {
		a.bridge = bridge
		a.deferCleanup(bridge.stop)
	}
	return nil
}

// inside is what a ProviderOnly run may reach of the inside: the names the
// namespace's HarnessPolicies allow (status.insideHosts, recorded by the
// controller when it bound the run; a run author cannot write status) and
// those of this executor's Options.InsideHosts, and its providerURL's own
// host and port when that is on loopback.
func (e *Executor) inside(run *harnessv1.HarnessRun) (*egress.Inside, error) {
	in := &egress.Inside{ClusterCIDRs: e.opts.ClusterCIDRs, Resolver: e.opts.Resolver, Node: nodeAddrs(e.opts.NodeAddrs), AllowedBy: e.opts.InsideAllowedBy}
	for _, h := range append(append([]string(nil), e.opts.InsideHosts...), run.Status.InsideHosts...) {
		c, err := egress.Canonical(h)
		if err != nil {
			return nil, fmt.Errorf("inside host %q: %w", h, err)
		}
		if !slices.Contains(in.Hosts, c) {
			in.Hosts = append(in.Hosts, c)
		}
	}
	if target, ok := loopbackProvider(run.Spec.Agent.ProviderURL); ok {
		in.Loopback = []string{target}
	}
	return in, nil
}

// nodeAddrs are the node's own addresses: known ones and those of this
// process's network namespace now (an address may come and go while the
// executor lives), without the ones already inside by their range.
func nodeAddrs(known []netip.Addr) []netip.Addr {
	var out []netip.Addr
	add := func(ip netip.Addr) {
		ip = ip.Unmap().WithZone("")
		if ip.IsValid() && egress.Classify(ip, nil) == "" && !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	for _, ip := range known {
		add(ip)
	}
	// An error leaves the known ones: the interfaces are a second source.
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				add(ip)
			}
		}
	}
	return out
}

// loopbackProvider is rawURL's canonical "host:port" (the scheme's port
// when it names none) when its host is a loopback address or localhost.
func loopbackProvider(rawURL string) (string, bool) {
	if rawURL == "" {
		return "", false
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", false
	}
	host, err := egress.Canonical(u.Hostname())
	if err != nil {
		return "", false
	}
	if ip, err := netip.ParseAddr(host); (err != nil || !ip.IsLoopback()) && host != "localhost" {
		return "", false
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if port == "" {
		return "", false
	}
	return net.JoinHostPort(host, port), true
}

// effectiveEgress is the run's egress mode; a run read from a file was never
// defaulted by an API server.
func effectiveEgress(m harnessv1.Egress) harnessv1.Egress {
	if m == "" {
		return harnessv1.EgressProviderOnly
	}
	return m
}

// allowList is what a ProviderOnly run may reach: the adapter's provider
// hosts, spec.network.allowHosts and the host of spec.agent.providerURL.
// With the model gateway (withProvider false) the provider is not on it,
// whatever allowHosts says: the agent's model path is the gateway, which
// holds the key and counts and limits every request.
func allowList(run *harnessv1.HarnessRun, inv *adapters.Invocation, withProvider bool) (*egress.AllowList, error) {
	allow, err := egress.NewAllowList(inv.ProviderHosts...)
	if err != nil {
		return nil, fmt.Errorf("the adapter's provider hosts: %w", err)
	}
	for _, h := range run.Spec.Network.AllowHosts {
		if err := allow.Add(h); err != nil {
			return nil, fmt.Errorf("spec.network.allowHosts: %w", err)
		}
	}
	if u := run.Spec.Agent.ProviderURL; u != "" && withProvider {
		if err := allow.AddURL(u); err != nil {
			return nil, fmt.Errorf("spec.agent.providerURL: %w", err)
		}
	} else if u != "" {
		// The model gateway carries the provider the run names, counting
		// and limiting what it serves: an allowHosts entry naming it too
		// (or a loopback provider's port) would let the agent send it
		// requests the gateway never sees, past the policies' request
		// and token limits and the usage in status and receipt. A
		// provider that takes requests without the run's key (a local
		// model server) would answer them.
		if err := allow.Withhold(u, "it is the run's model provider (spec.agent.providerURL), which the agent reaches only through its model gateway ("+gatewayURL+"), so that every request is counted and limited"); err != nil {
			return nil, fmt.Errorf("spec.agent.providerURL: %w", err)
		}
	}
	return allow, nil
}

// egressProxy is the run's egress proxy as the executor runs it: served on
// a unix socket in the run's sockets/ folder, which only this run's sandbox
// sees (the run root is hidden but for the run's own folders).
type egressProxy struct {
	proxy  *egress.Proxy
	socket string
	ln     net.Listener
	done   chan struct{}
}

// serveEgress serves the run's egress proxy on its socket: at most its
// share of the node's tunnels (egressConnsPerRun).
func (e *Executor) serveEgress(dir *fixture.RunDir, allow *egress.AllowList, inside *egress.Inside, owner socketOwner) (*egressProxy, error) {
	px := &egressProxy{proxy: egress.New(egress.Options{Allow: allow, Inside: inside, NodeConns: e.egressConns,
		MaxConns: egressConnsPerRun(e.egressConns, e.opts.Slots)}), socket: dir.Socket(fixture.SocketEgress), done: make(chan struct{})}
	ln, err := listenBounded(px.socket, egressChannel, owner)
	if err != nil {
		return nil, err
	}
	px.ln = ln
	go func() {
		defer close(px.done)
		_ = px.proxy.Serve(ln)
	}()
	return px, nil
}

// egressConnsPerRun is how many connections one run's egress proxy serves
// at once: its share of the node's (at most the proxy's own 64, at least
// minEgressConns). A tunnel has no idle bound, so a run's agent can hold
// every connection its proxy serves for its whole episode; with 64 a run
// and 256 for the node, four such runs kept every other run's agent
// waiting in its socket's backlog. With shares that add up to at most the
// node's (up to 32 slots; the chart's 2 keep 64), no run waits on another's.
func egressConnsPerRun(node egress.NodeConns, slots int) int {
	return min(egress.DefaultMaxConns, max(minEgressConns, cap(node)/max(slots, 1)))
}

// minEgressConns is the fewest connections a run's proxy serves at once,
// however many slots the node has: a CLI opens a handful.
const minEgressConns = 8

func (px *egressProxy) stop() {
	_ = px.proxy.Close()
	<-px.done
}
