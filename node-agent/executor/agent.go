package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/artifacts"
	"github.com/harnessfacts/harnessfacts/node-agent/bounded"
	"github.com/harnessfacts/harnessfacts/node-agent/egress"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/gateway"
	"github.com/harnessfacts/harnessfacts/node-agent/mcp"
	"github.com/harnessfacts/harnessfacts/node-agent/sandboxinit"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// ran is what the agent's run and the steps after it found: the verdict's
// and the evidence's input besides the attempt itself.
type ran struct {
	agent    sandbox.Result
	agentErr error
	stop     *StopCause
	// stoppedInChecks: stop came once the agent had ended, while its
	// checks ran (they were cut short).
	stoppedInChecks bool
	out             *output
	egressStats     *egress.Stats // nil when the run had no egress proxy
	// gatewayStop is why the model gateway ended the run (nil if it did not).
	gatewayStop *gateway.Stop
	// providerFailing is the provider's failure that answered the agent's
	// last model requests, if it held (gateway.ProviderFailing);
	// providerErrors counts the requests whose failure went to its CLI.
	providerFailing *gateway.Stop
	providerErrors  int64
	// refusedProviderTools counts the model requests the gateway refused
	// for a tool that has the provider reach the network.
	refusedProviderTools int64

	checks    []harnessv1.CheckResult
	artifacts []artifacts.Result
	mcp       mcp.Summary
	tokenSeen bool
	activity  adapters.Activity
	usage     *harnessv1.UsageStatus
	// trajectory is the sealed trajectory.json (nil: none).
	trajectory *sealedTrajectory
	// diskFull is the run dir's usage when it was full as the agent ended,
	// or, with noRoomForChecks, when the agent left too little of it for
	// the fixture's verifier part.
	diskFull        *fixture.DiskUsage
	noRoomForChecks bool
}

// prepareAgent has the run's adapter turn the run into a command line,
// environment and files.
func (a *attempt) prepareAgent(ctx context.Context) error {
	run := a.run
	adapter, err := a.e.opts.Adapters.Get(run.Spec.Agent.Adapter)
	if err != nil {
		return fail(harnessv1.ReasonAdapterUnavailable, err)
	}
	a.adapter = adapter
	prompt := a.fix.Manifest.Prompt
	if run.Spec.Fixture.Prompt != "" {
		prompt = run.Spec.Fixture.Prompt
	}
	a.egress = effectiveEgress(run.Spec.Network.Egress)
	var proxyURL string
	if a.useProxy() {
		proxyURL = fmt.Sprintf("http://127.0.0.1:%d", SandboxEgressPort)
	}
	// Through the model gateway, the CLI gets the gateway's URL in the
	// sandbox and a placeholder for each model key.
	agent := run.Spec.Agent
	var providerNote string
	agent.ProviderURL, providerNote = adapters.ProviderRoot(agent)
	creds, gatewayNote := a.routeModel(agent)
	if a.route != nil {
		agent.ProviderURL = gatewayURL
	}
	if err := a.readGatewayLimits(ctx, gatewayNote); err != nil {
		return err
	}
	a.prompt = prompt
	in := adapters.Input{
		Agent: agent, Prompt: prompt, Workspace: a.dir.Workspace(), Home: a.dir.Home(),
		MCP: a.mcp.endpoint, MaxDecisions: a.limits.MaxDecisions, Credentials: creds, ProxyURL: proxyURL,
	}
	if run.Spec.Agent.Adapter == harnessv1.AdapterOracle {
		// Only an oracle's run dir ever holds the fixture's solution.
		if in.Solution, err = a.fix.MaterializeSolution(a.dir); err != nil {
			return fail(harnessv1.ReasonBadFixture, fmt.Errorf("the oracle cannot run: %w", err))
		}
		in.SolutionEnv = a.fix.Manifest.Solution.Env
		a.solutionDir = filepath.Join(a.dir.FixtureDir(), filepath.FromSlash(a.fix.Manifest.SolutionDir()))
	}
	inv, err := adapter.Prepare(in)
	if err != nil {
		return fail(harnessv1.ReasonAdapterFailed, fmt.Errorf("the adapter could not prepare the run: %w", err))
	}
	for _, n := range []string{providerNote, gatewayNote, a.fixtureNote} {
		if n != "" {
			inv.Notes = append(inv.Notes, a.redactor.String(n))
		}
	}
	a.inv = inv
	return nil
}

// writeAgentFiles writes the adapter's config files into the run's home and
// finds the CLI's version for the receipt.
func (a *attempt) writeAgentFiles(ctx context.Context) error {
	if err := writeFiles(a.dir.Home(), a.inv.Files); err != nil {
		return fail(harnessv1.ReasonAdapterFailed, fmt.Errorf("writing the adapter's config files: %w", err))
	}
	a.cliVersion = a.e.cliVersionLater(ctx, a.adapter)
	if len(a.inv.Argv) > 0 {
		a.cliPath, a.cliDigest = a.e.cliBinary(a.inv.Argv[0], a.cliView())
	}
	return nil
}

// cliView is where the agent's sandbox finds its command: the adapter's
// CLI folders, then PATH (the image's own, in an environment image), and
// the workspace for a relative path.
func (a *attempt) cliView() cliView {
	v := cliView{pathDirs: a.inv.PathDirs, path: filepath.SplitList(a.e.opts.Path), workdir: a.dir.Workspace()}
	if a.env != nil {
		v.root = a.env.overlay.Root
		if p, ok := envLookup(a.env.image.Config.Env, "PATH"); ok {
			v.path = filepath.SplitList(p)
		}
	}
	return v
}

// envLookup is key's value in env (KEY=VALUE entries), the last one set.
func envLookup(env []string, key string) (string, bool) {
	val, found := "", false
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			val, found = v, true
		}
	}
	return val, found
}

// runAgent runs the agent in the sandbox, within the run's limits, its
// output going through the token watcher and the redactor.
func (a *attempt) runAgent(ctx context.Context) (*ran, error) {
	e := a.e
	spec := a.baseSpec(a.egress)
	forwards, proxy := bridges(a.mcp, a.transport, a.proxy, a.bridge, a.gw)
	argv, initEnv := a.inv.Argv, []string(nil)
	if !sandbox.ServesLoopback(a.runner) {
		// No loopback of the sandbox's that the runner could listen on
		// from outside (AppContainer; bwrap as a user, who may make no
		// network namespace): sandbox-init listens inside.
		var err error
		if argv, initEnv, err = e.wrap(argv, forwards, proxy); err != nil {
			return nil, fail(harnessv1.ReasonSandboxUnavailable, fmt.Errorf("sandbox-init's bridges: %w", err))
		}
	} else {
		spec.Loopback = loopback(forwards, proxy)
	}
	if initEnv == nil && a.transport != harnessv1.MCPTransportStdio {
		// Nothing in the sandbox connects to the run's sockets: the
		// runner relays the bridges from outside, and no stdio MCP
		// server (sandbox-init) runs inside. So neither the sockets nor
		// sandbox-init are bound in: the agent reaches the node-agent
		// through its loopback ports alone, and the sandbox has two
		// mounts fewer (each a read of the mount table for bwrap).
		spec.ReadOnly = slices.DeleteFunc(spec.ReadOnly, func(p string) bool {
			return p == a.dir.Sockets() || p == e.opts.InitBinary
		})
	} else if err := initLoaderProblem(e.opts.InitBinary, e.initInterp, spec.Root); err != nil {
		return nil, fail(harnessv1.ReasonSandboxUnavailable, err)
	}
	spec.Argv = argv
	spec.Env = append(spec.Env, a.inv.Env...)
	spec.Env = append(spec.Env, initEnv...)
	if proxy != nil && initEnv == nil {
		// Last: what the agent's own variables said of a proxy gives way.
		spec.Env = append(spec.Env, sandboxinit.ProxyEnv(proxy.Listen)...)
	}
	if a.inv.Stdin != nil {
		spec.Stdin = bytes.NewReader(a.inv.Stdin)
	}
	spec.ReadOnly = append(spec.ReadOnly, a.inv.ReadOnly...)
	if spec.Root != "" && a.solutionDir != "" {
		// Where a Harbor solve.sh finds its own files.
		spec.BindAt = append(spec.BindAt, sandbox.BindAt{Source: a.solutionDir, Target: HarborSolutionDir})
	}
	if len(a.inv.PathDirs) > 0 {
		spec.Env = setEnv(spec.Env, "PATH", strings.Join(a.inv.PathDirs, ":")+":"+envValue(spec.Env, "PATH", e.opts.Path))
	}
	spec.Limits = sandbox.Limits{
		MemoryBytes:  a.limits.Memory.Value(),
		MaxProcesses: int64(a.limits.MaxProcesses),
		Timeout:      time.Duration(a.limits.EpisodeSeconds) * time.Second,
	}.WithDefaults()
	if initEnv != nil {
		// sandbox-init's threads share the agent's cgroup: they come on
		// top, so that a small maxProcesses leaves the agent its own
		// processes instead of failing sandbox-init (blamed on the agent).
		spec.Limits.MaxProcesses += sandboxinit.Tasks
	}
	// In the run root, not the run dir: the run dir is the agent's disk
	// (limits.disk), and an agent that fills it must not silence its own log.
	out, err := newSpooledOutput(a.redactor, a.mcp.token, a.limits.MaxOutputBytes, a.e.opts.RunRoot)
	if err != nil {
		return nil, fail(harnessv1.ReasonRunDirFailed, fmt.Errorf("the agent's output cannot be kept: %w", err))
	}
	a.deferCleanup(out.release)
	out.pace = a.pace
	if a.live != nil {
		out.startLive(a.live)
	}
	defer out.close() // stops the live view's flusher whatever happens
	spec.Stdout, spec.Stderr = out.writer(), out.writer()
	if o := a.e.opts.Observer; o != nil {
		mode := a.runner.Mode()
		spec.Started = func() { o.AgentStarted(a.run, mode, time.Since(a.started)) }
	}
	if len(a.fix.Manifest.Checks) > 0 {
		// The first check's cgroup and network namespace are made while
		// the agent runs (prepareCheck), once its own are made.
		started := spec.Started
		spec.Started = func() {
			if started != nil {
				started()
			}
			a.firstCheck = a.prepareCheck()
		}
	}
	// The model gateway ends the run (a limit reached, a provider that
	// cannot be verified or keeps failing) by killing the agent.
	agentCtx, cancelAgent := context.WithCancel(ctx)
	defer cancelAgent()
	if a.gw != nil {
		go func() {
			select {
			case <-a.gw.stopped:
				cancelAgent()
			case <-agentCtx.Done():
			}
		}()
	}
	done := a.e.graves.sandbox()
	res, runErr := a.runner.Run(agentCtx, spec)
	done()
	out.close()
	noteSetupRetries(ctx, "agent", res)
	r := &ran{agent: res, agentErr: runErr, out: out, stop: stopCauseOf(ctx)}
	if a.gw != nil {
		r.gatewayStop = a.gw.g.Stopped()
		r.refusedProviderTools = a.gw.g.RefusedProviderTools()
		r.providerFailing, r.providerErrors = a.gw.g.ProviderFailing(), a.gw.g.ProviderErrorsHandedOver()
	}
	// A full run dir, looked at when the agent's tree is gone: the agent
	// may have ignored ENOSPC and exited 0.
	if u, ok, err := a.dir.DiskUsage(); err == nil && ok && u.Full {
		r.diskFull = &u
	}
	if a.proxy != nil {
		st := a.proxy.proxy.Stats()
		r.egressStats = &st
	}
	var rootErr *sandbox.RootError
	switch {
	case runErr == nil || r.stop != nil || r.gatewayStop != nil || res.TimedOut:
	case errors.As(runErr, &rootErr):
		// The image's links, before the agent ran: the environment's
		// fault, not the node's sandbox.
		return nil, fail(harnessv1.ReasonEnvironmentUnavailable, fmt.Errorf("the environment image cannot hold the sandbox's mounts: %w", runErr))
	default:
		return nil, fail(harnessv1.ReasonSandboxUnavailable, fmt.Errorf("the sandbox could not run the agent: %w", runErr))
	}
	return r, nil
}

// baseSpec is the sandbox spec every command of the run shares: the
// isolated home and temp dirs, only the allow-listed environment, the run
// root hidden but for this run's own folders.
func (a *attempt) baseSpec(egress harnessv1.Egress) sandbox.Spec {
	e, dir := a.e, a.dir
	hidden := append([]string{e.opts.RunRoot}, e.opts.Hidden...)
	network := sandbox.NetworkNone
	if egress == harnessv1.EgressUnrestricted {
		// The run's own network namespace with a user-mode stack: never
		// the node-agent's, whose loopback holds its metrics, health and
		// the MCP servers of other runs.
		network = sandbox.NetworkUserMode
	}
	xdg := dir.XDG()
	var unreachable []netip.Prefix
	if network == sandbox.NetworkUserMode {
		unreachable = e.opts.Unreachable
	}
	spec := sandbox.Spec{
		Unreachable: unreachable,
		Dir:         dir.Workspace(),
		Env: []string{
			"PATH=" + e.opts.Path,
			"HOME=" + dir.Home(),
			"USER=harnessfacts",
			"LOGNAME=harnessfacts",
			"LANG=C.UTF-8",
			"TERM=dumb",
			"TMPDIR=" + dir.Tmp(),
			"XDG_CONFIG_HOME=" + xdg["XDG_CONFIG_HOME"],
			"XDG_DATA_HOME=" + xdg["XDG_DATA_HOME"],
			"XDG_STATE_HOME=" + xdg["XDG_STATE_HOME"],
			"XDG_CACHE_HOME=" + xdg["XDG_CACHE_HOME"],
			"HARNESSFACTS_RUN=" + dir.Path,
		},
		ReadWrite: []string{dir.Workspace(), dir.Home(), dir.Tmp()},
		ReadOnly:  []string{dir.FixtureDir(), dir.Sockets(), e.opts.InitBinary},
		Hidden:    hidden,
		// Each sandbox's /dev mount point: in the run dir's top level
		// (the node-agent's alone), removed with it, late when another
		// run's sandbox is starting (graveyard).
		DevIn:   dir.Path,
		Network: network,
		UID:     a.uid,
		GID:     a.gid,
	}
	if a.env != nil {
		spec.Root = a.env.overlay.Root
		spec.Env = a.environmentEnv(spec.Env)
	}
	return spec
}

// bridges are what the agent reaches on its sandbox's loopback, each a
// unix socket of the run's that connections are relayed to: the MCP server
// (HTTP), a provider on the node's loopback, the model gateway, and the
// egress proxy, which the agent's HTTPS_PROXY and HTTP_PROXY name.
func bridges(srv *mcpServer, transport harnessv1.MCPTransport, px *egressProxy, bridge *providerBridge, gw *modelGateway) (forwards []sandboxinit.Forward, proxy *sandboxinit.Forward) {
	if transport == harnessv1.MCPTransportHTTP && srv.httpSocket != "" {
		forwards = append(forwards, sandboxinit.Forward{Listen: fmt.Sprintf("127.0.0.1:%d", SandboxMCPPort), Socket: srv.httpSocket})
	}
	if bridge != nil {
		forwards = append(forwards, sandboxinit.Forward{Listen: bridge.listen, Socket: bridge.socket})
	}
	if gw != nil {
		forwards = append(forwards, sandboxinit.Forward{Listen: gatewayListen(), Socket: gw.socket})
	}
	if px != nil {
		proxy = &sandboxinit.Forward{Listen: fmt.Sprintf("127.0.0.1:%d", SandboxEgressPort), Socket: px.socket}
	}
	return forwards, proxy
}

// relayConns bounds the connections each loopback relay carries at once.
// The relay is the node-agent's now, outside the run's cgroup (sandbox-init
// in the sandbox was the run's): every connection it carries holds a
// goroutine, two copies and a connection to the socket behind it in the
// node-agent's memory, and an agent that opened thousands would spend the
// memory every run on the node shares. The socket behind each relay bounds
// what it serves (channels.go) no tighter than this, so the relay never
// holds more than the channel lets through: more connections wait in the
// sandbox's listen backlog, in the kernel. The egress proxy's 64 is the
// most a run's share of it can be.
var relayConns = map[string]int{
	fmt.Sprint(SandboxMCPPort):     httpMCPChannel.MaxConns,
	fmt.Sprint(SandboxGatewayPort): gatewayChannel.MaxConns,
	fmt.Sprint(SandboxEgressPort):  egress.DefaultMaxConns,
}

// loopback has the runner serve the bridges (sandbox.Spec.Loopback): it
// listens on the sandbox's own loopback before the agent starts, and
// relays each connection to its socket from outside, at most relayConns
// at once (a provider's: providerChannel's). No program of ours starts in
// the sandbox before the agent, and the sockets' paths are in no variable
// of the sandbox's.
func loopback(forwards []sandboxinit.Forward, proxy *sandboxinit.Forward) []sandbox.Loopback {
	if proxy != nil {
		forwards = append(forwards, *proxy)
	}
	var lb []sandbox.Loopback
	for _, f := range forwards {
		conns := providerChannel.MaxConns
		if _, port, err := net.SplitHostPort(f.Listen); err == nil && relayConns[port] > 0 {
			conns = relayConns[port]
		}
		lb = append(lb, sandbox.Loopback{Addr: f.Listen, Serve: func(l net.Listener) {
			bl := bounded.NewListener(l, bounded.Limits{MaxConns: conns})
			sandboxinit.Relay(bl, func() (net.Conn, error) { return net.Dial("unix", f.Socket) })
		}})
	}
	return lb
}

// wrap puts sandbox-init in front of the agent when the bridges must be
// made inside the sandbox (AppContainer's, whose loopback the runner
// cannot listen on). The bridges name the run's sockets, so they go to
// sandbox-init in its environment (sandboxinit.ConfigEnv), never on a
// command line, which every user of the node can read.
func (e *Executor) wrap(argv []string, forwards []sandboxinit.Forward, proxy *sandboxinit.Forward) ([]string, []string, error) {
	if len(forwards) == 0 && proxy == nil {
		return argv, nil, nil
	}
	entry, err := sandboxinit.Config{Forwards: forwards, Proxy: proxy}.EnvEntry()
	if err != nil {
		return nil, nil, err
	}
	return append([]string{e.opts.InitBinary, "sandbox-init", "--"}, argv...), []string{entry}, nil
}

// runIDs are the host uid and gid the run's agent runs as: its sockets
// are theirs alone.
func (a *attempt) runIDs() socketOwner {
	// A local run as a user other than root runs as that user: its
	// sockets and files are theirs (chowning them to DefaultUID failed).
	uid, gid := sandbox.EffectiveIDs(a.uid, a.gid)
	return socketOwner{uid: uid, gid: gid}
}

// writeFiles writes the adapter's files below home, 0600, refusing paths
// that leave it.
func writeFiles(home string, files map[string][]byte) error {
	for rel, data := range files {
		p := filepath.Join(home, filepath.FromSlash(rel))
		if !strings.HasPrefix(p, home+string(filepath.Separator)) {
			return fmt.Errorf("adapter file %q leaves the run's home", rel)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// cliVersionLater returns what says the adapter's CLI version once it is
// known. A node-agent knows it from its registration; `harnessfacts run`
// asks the CLI on its first run, which takes a Node.js CLI one to two
// seconds, so it is asked beside the agent's start rather than before it:
// only the receipt and the status, written after the agent, need it.
func (e *Executor) cliVersionLater(ctx context.Context, a adapters.Adapter) func() string {
	if v, ok := e.versions.Load(a.Name()); ok {
		return func() string { return v.(string) }
	}
	known := make(chan string, 1)
	go func() { known <- e.cliVersion(ctx, a) }()
	return sync.OnceValue(func() string { return <-known })
}

// version is the CLI's version, "" when the attempt ended before its agent
// was prepared or the CLI did not say.
func (a *attempt) version() string {
	if a.cliVersion == nil {
		return ""
	}
	return a.cliVersion()
}

// cliVersion is the adapter's CLI version, asked once per node-agent.
func (e *Executor) cliVersion(ctx context.Context, a adapters.Adapter) string {
	if v, ok := e.versions.Load(a.Name()); ok {
		return v.(string)
	}
	v, err := a.Version(ctx)
	if err != nil {
		return ""
	}
	e.versions.Store(a.Name(), v)
	return v
}

// setEnv sets key in env, replacing an entry it has.
func setEnv(env []string, key, value string) []string {
	for i, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			env[i] = key + "=" + value
			return env
		}
	}
	return append(env, key+"="+value)
}

// envValue is key's value in env, else def.
func envValue(env []string, key, def string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return def
}
