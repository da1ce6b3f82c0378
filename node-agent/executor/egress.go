package executor

import (
	"context"
	"fmt"
	"net"

	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/egress"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// SandboxEgressPort is the loopback port inside the sandbox on which
// sandbox-init exposes the run's egress proxy (egress ProviderOnly).
const SandboxEgressPort = 7701

// useProxy says whether the run gets the egress proxy: ProviderOnly in a
// sandbox with its own network. A plain child shares the node's network: a
// proxy would restrict only the tools that honour HTTPS_PROXY, so it gets
// none (condition Sandboxed says the run was not isolated).
func (a *attempt) useProxy() bool {
	return a.egress == harnessv1.EgressProviderOnly && a.runner.Mode() != sandbox.ModePlain
}

// startEgress starts the run's egress proxy and, for a provider on the
// node's loopback (harnessfacts fake-provider, a local model server), the
// bridge that carries it to the same address in the sandbox's own
// loopback, so the CLI uses the URL the run names.
func (a *attempt) startEgress(ctx context.Context) error {
	if !a.useProxy() {
		return nil
	}
	allow, err := allowList(a.run, a.inv, a.route == nil)
	if err != nil {
		return fail(harnessv1.ReasonEgressProxyFailed, fmt.Errorf("the egress allow list cannot be built: %w", err))
	}
	px, err := serveEgress(a.dir, allow, a.runIDs())
	if err != nil {
		return fail(harnessv1.ReasonEgressProxyFailed, fmt.Errorf("the egress proxy could not start: %w", err))
	}
	a.proxy = px
	a.deferCleanup(px.stop)
	log.FromContext(ctx).V(1).Info("egress proxy", "allowed", allow.Entries())

	if a.route != nil {
		// The model path is the gateway's: the agent reaches no provider
		// itself.
		return a.startGateway(ctx)
	}
	bridge, err := startProviderBridge(a.dir.Socket(fixture.SocketProvider), a.run.Spec.Agent.ProviderURL, a.runIDs())
	if err != nil {
		return fail(harnessv1.ReasonEgressProxyFailed, fmt.Errorf("the provider on this node's loopback cannot be bridged into the sandbox: %w", err))
	}
	if bridge != nil {
		a.bridge = bridge
		a.deferCleanup(bridge.stop)
	}
	return nil
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
// With the model gateway (withProvider false) the provider is not on it:
// the agent's model path is the gateway, which holds the key.
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

func serveEgress(dir *fixture.RunDir, allow *egress.AllowList, owner socketOwner) (*egressProxy, error) {
	px := &egressProxy{proxy: egress.New(egress.Options{Allow: allow}), socket: dir.Socket(fixture.SocketEgress), done: make(chan struct{})}
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

func (px *egressProxy) stop() {
	_ = px.proxy.Close()
	<-px.done
}
