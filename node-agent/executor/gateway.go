package executor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/gateway"
)

// SandboxGatewayPort is the loopback port inside the sandbox on which
// the run's model gateway is bridged (see loopback).
const SandboxGatewayPort = 7702

// gatewayURL is the model gateway's base URL as the agent's CLI sees it.
var gatewayURL = fmt.Sprintf("http://127.0.0.1:%d", SandboxGatewayPort)

// nodeGatewayBodies bounds the request bodies the model gateways of all
// the node's runs hold at once for retries (eight of 16 MiB): a quarter of
// the chart's 512 MiB node-agent memory limit, whatever the slots and
// however many agents send big bodies. A request beyond it waits.
const nodeGatewayBodies = 128 << 20

// gatewayBodiesPerRun is how many request bodies one run's gateway may
// hold at once: its share of the node's (at most gateway's own bound, at
// least one). A run whose provider is slow to answer (a run author's own
// may take up to ten minutes to send its headers) holds its bodies all
// that time; with shares that add up to at most the node's slots, it
// never keeps another run's requests waiting. Past eight slots a share is
// one body and the node's bound can still be reached by all runs at once.
func gatewayBodiesPerRun(node gateway.NodeBodies, slots int) int {
	return min(gateway.MaxHeldBodies, max(1, cap(node)/max(slots, 1)))
}

// gatewayChannel bounds the gateway's socket like the provider relay's: a
// model may think for minutes before it answers.
var gatewayChannel = providerChannel

// modelGateway is the run's model gateway as the executor runs it: served
// on a unix socket in the run's sockets/ folder, which only this run's
// sandbox sees, so no run can reach another's gateway.
type modelGateway struct {
	g       *gateway.Gateway
	socket  string
	srv     *gateway.Server
	stopped chan struct{} // closed when the gateway ends the run
}

// routeModel decides whether the run's model requests go through the
// model gateway: every adapter and API key that can, in a sandbox with
// egress ProviderOnly. Where one cannot, status.agent.notes says why, and
// the credential is delivered as before.
func (a *attempt) routeModel(agent harnessv1.AgentSpec) (creds []adapters.Credential, note string) {
	route, why := adapters.GatewayRoute(agent, a.creds)
	if route == nil {
		return a.creds, why
	}
	if !a.useProxy() {
		if route.Key == nil {
			return a.creds, ""
		}
		return a.creds, fmt.Sprintf("the model gateway is off for this run (egress %s%s): the API key is delivered into the sandbox, where the agent can read it",
			a.egress, map[bool]string{true: ", no sandbox", false: ""}[a.runner.Mode() == "plain"])
	}
	a.route = route
	return route.Credentials, ""
}

// readGatewayLimits reads the run's model limits from the HarnessPolicies
// over its namespace, for its gateway. A run whose credentials reach the
// agent without the gateway (an adapter or a credential the gateway cannot
// carry, egress other than ProviderOnly: why says which) is refused when a
// policy limits model use (gateway.maxRequestsPerRun, maxTokensPerRun, a
// spend budget): the agent would hold the key itself, so no limit could
// hold and only the agent would say what it spent.
func (a *attempt) readGatewayLimits(ctx context.Context, why string) error {
	f := a.e.opts.GatewayLimits
	if f == nil || a.route == nil && len(a.creds) == 0 {
		return nil
	}
	lim, err := f(ctx, a.run)
	if err != nil {
		if a.route == nil {
			return fail(harnessv1.ReasonPolicyViolation, fmt.Errorf("the namespace's HarnessPolicies could not be read to see whether they limit model use, so the run is refused: %w", err))
		}
		return fail(harnessv1.ReasonEgressProxyFailed, fmt.Errorf("the model gateway's limits could not be read: %w", err))
	}
	if refusal := modelLimitRefusal(lim, a.route, a.creds, a.run.Spec.Network.AllowHosts, why); refusal != "" {
		return fail(harnessv1.ReasonPolicyViolation, errors.New(refusal))
	}
	if len(lim.Sources) > 0 {
		log.FromContext(ctx).V(1).Info("model gateway limits", "maxRequests", lim.MaxRequests, "maxTokens", lim.MaxTokens, "from", lim.Sources)
	}
	a.gatewayLimits = lim
	return nil
}

// modelLimitRefusal says why a run is refused under the policies' model
// limits lim ("" when it is not): its credentials reach the agent without
// the gateway (route nil: why says how), or, through it, credentials other
// than its key reach the agent while the run may reach hosts of its own
// (one could be a second model key, a host its provider).
func modelLimitRefusal(lim harnessv1.GatewayLimits, route *adapters.ModelRoute, creds []adapters.Credential, allowHosts []string, why string) string {
	if !lim.Any() {
		return ""
	}
	rules := strings.Join(lim.Rules(), ", ")
	if route == nil {
		if len(creds) == 0 {
			return ""
		}
		if why == "" {
			why = "its credentials are delivered to the agent"
		}
		return fmt.Sprintf("refused by the namespace's HarnessPolicies: %s limit model use, which only the model gateway can hold, "+
			"and this run's credentials would reach the agent without it (%s)", rules, why)
	}
	if names := passedThrough(route.Credentials); len(names) > 0 && len(allowHosts) > 0 {
		return fmt.Sprintf("refused by the namespace's HarnessPolicies: %s limit model use, which only the model gateway can hold, "+
			"and this run gives the agent credentials other than the key the gateway carries (%s) while it may reach hosts of its own (network.allowHosts): "+
			"one could be a second model key", rules, strings.Join(names, ", "))
	}
	return ""
}

// passedThrough names the credentials the agent gets as they are (not a
// gateway placeholder, not a key scope).
func passedThrough(creds []adapters.Credential) []string {
	var names []string
	for _, c := range creds {
		if string(c.Value) == adapters.GatewayPlaceholder || adapters.IsScopeEnv(c.Env) {
			continue
		}
		name := c.Env
		if name == "" {
			name = string(c.File)
		}
		names = append(names, name)
	}
	return names
}

// startGateway serves the run's model gateway on sockets/gateway.sock; the
// agent's CLI reaches it at gatewayURL through the bridge (loopback).
func (a *attempt) startGateway(ctx context.Context) error {
	if a.route == nil {
		return nil
	}
	lim := a.gatewayLimits
	mg := &modelGateway{socket: a.dir.Socket(fixture.SocketGateway), stopped: make(chan struct{})}
	g, err := gateway.New(gateway.Options{
		Upstream: a.route.Upstream, Header: a.route.Header, Key: a.route.Key, Scope: a.route.Scope,
		RootCAs:     a.e.opts.ProviderCAs,
		MaxRequests: lim.MaxRequests, MaxTokens: lim.MaxTokens, Budgets: lim.Budgets,
		// The provider reaching the network for the agent only where the
		// run allows it (the policy's forbidProviderTools refuses runs
		// that do, at admission and at claim).
		AllowProviderTools: a.run.Spec.Network.ProviderTools == harnessv1.ProviderToolsAllowed,
		// The episode has not begun yet: a retry waits no longer than it.
		Deadline:      time.Now().Add(time.Duration(a.limits.EpisodeSeconds) * time.Second),
		OnStop:        func(*gateway.Stop) { close(mg.stopped) },
		NodeBodies:    a.e.gatewayBodies,
		MaxHeldBodies: gatewayBodiesPerRun(a.e.gatewayBodies, a.e.opts.Slots),
		// The provider is reached as the egress proxy reaches a host: no
		// inside address but a loopback providerURL's port and the names
		// the policies allow.
		Dial: a.inside.Dialer(10 * time.Second),
	})
	if err != nil {
		return fail(harnessv1.ReasonEgressProxyFailed, fmt.Errorf("the model gateway could not start: %w", err))
	}
	mg.g = g
	ln, err := listenBounded(mg.socket, gatewayChannel, a.runIDs())
	if err != nil {
		return fail(harnessv1.ReasonEgressProxyFailed, fmt.Errorf("the model gateway could not listen: %w", err))
	}
	mg.srv = gateway.Serve(g, ln)
	a.gw = mg
	a.deferCleanup(mg.srv.Close)
	return nil
}

// gatewayListen is where the bridge listens for the gateway.
func gatewayListen() string { return net.JoinHostPort("127.0.0.1", fmt.Sprint(SandboxGatewayPort)) }
