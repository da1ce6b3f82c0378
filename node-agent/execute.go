package nodeagent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/egress"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/mcp"
	"github.com/harnessfacts/harnessfacts/node-agent/redact"
	"github.com/harnessfacts/harnessfacts/node-agent/sandboxinit"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// SandboxMCPPort is the loopback port inside the sandbox on which
// sandbox-init exposes the run's MCP server. Each sandbox has its own
// network namespace, so every run can use the same port.
const SandboxMCPPort = 7700

// SandboxEgressPort is the loopback port inside the sandbox on which
// sandbox-init exposes the run's egress proxy (egress ProviderOnly).
const SandboxEgressPort = 7701

// maxSocketPath is the longest path a unix socket may have (sun_path is
// 108 bytes with its terminating NUL); longestSocket is the longest socket
// path below a run dir.
const (
	maxSocketPath = 107
	longestSocket = "/sockets/mcp-stdio.sock"
)

// DefaultPath is the PATH of sandboxed commands unless configured.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ExecutorOptions configure a RunExecutor.
type ExecutorOptions struct {
	// Sources reads fixtures and Secret keys.
	Sources Sources
	// RunRoot holds the run dirs (harnessfacts-<run>-<attempt>-<random>).
	RunRoot string
	// Sandbox configures the sandbox runners.
	Sandbox sandbox.Options
	// Hidden are directories masked in the sandbox (node secrets, homes);
	// RunRoot is always hidden, so a run never sees another run.
	Hidden []string
	// Path is the PATH of sandboxed commands (DefaultPath when empty).
	Path string
	// UID and GID are the unprivileged ids the agent runs as.
	UID, GID int
	// InitBinary is the harnessfacts binary, bound read-only into the
	// sandbox for `sandbox-init` and `mcp-stdio` (os.Executable() when empty).
	InitBinary string
	// Adapters are the adapters this node offers.
	Adapters adapters.Registry
	// NodeName is recorded in the receipt.
	NodeName string
}

// RunExecutor is the Executor of the node-agent and of `harnessfacts run`.
type RunExecutor struct {
	opts ExecutorOptions

	// The runners for each isolation policy, chosen once by a preflight at
	// start rather than per run.
	required    sandbox.Runner
	requiredErr error
	fallback    sandbox.Runner

	// versions caches each adapter's CLI version: asking costs a process
	// start (seconds for some CLIs), and the installed CLI does not change
	// under a running node-agent.
	versions    sync.Map // harnessv1.Adapter → string
	fallbackWhy string
}

// NewExecutor checks opts and returns an executor.
func NewExecutor(opts ExecutorOptions) (*RunExecutor, error) {
	if opts.Sources == nil || opts.RunRoot == "" {
		return nil, errors.New("executor: sources and a run root are required")
	}
	root, err := filepath.Abs(opts.RunRoot)
	if err != nil {
		return nil, err
	}
	opts.RunRoot = root
	// The run's unix sockets (MCP, egress proxy, provider bridge) live in
	// its run dir: a root too long for them would fail every run.
	if n := len(root) + 1 + fixture.MaxRunDirNameLen + len(longestSocket); n > maxSocketPath {
		return nil, fmt.Errorf("executor: the run root %s is too long: the runs' unix sockets would have paths of up to %d bytes, over the kernel's %d; choose a root of at most %d characters",
			root, n, maxSocketPath, maxSocketPath-(n-len(root)))
	}
	if opts.Path == "" {
		opts.Path = DefaultPath
	}
	if opts.InitBinary == "" {
		if opts.InitBinary, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("executor: locating the harnessfacts binary: %w", err)
		}
	}
	if opts.Adapters == nil {
		opts.Adapters = adapters.Default()
	}
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, fmt.Errorf("executor: creating the run root: %w", err)
	}
	// The run root is ours: the agent's user must pass through it (it sees
	// only its own run's folders, the rest is hidden in the sandbox).
	if err := os.Chmod(root, 0o711); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	uid, gid := opts.UID, opts.GID
	if uid == 0 {
		uid = sandbox.DefaultUID
	}
	if gid == 0 {
		gid = sandbox.DefaultGID
	}
	for _, p := range []string{root + "/.", opts.InitBinary} {
		if err := checkReachable(p, uid, gid); err != nil {
			return nil, fmt.Errorf("executor: %w", err)
		}
	}
	e := &RunExecutor{opts: opts}
	ctx := context.Background()
	e.required, _, e.requiredErr = sandbox.New(ctx, sandbox.PolicyRequired, opts.Sandbox)
	var avail []sandbox.Availability
	e.fallback, avail, err = sandbox.New(ctx, sandbox.PolicyAllowFallback, opts.Sandbox)
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	var why []string
	for _, av := range avail {
		if !av.Available {
			why = append(why, fmt.Sprintf("%s: %s", av.Mode, av.Reason))
		}
	}
	e.fallbackWhy = strings.Join(why, "; ")
	return e, nil
}

// RemoveAbandoned removes the run dirs of earlier processes (their owner
// lock is not held), and only those.
func (e *RunExecutor) RemoveAbandoned() ([]string, error) {
	return fixture.RemoveAbandoned(e.opts.RunRoot)
}

// attempt is the state of one execution.
type attempt struct {
	run      *harnessv1.HarnessRun
	limits   harnessv1.Limits
	manifest *fixture.Manifest
	dir      *fixture.RunDir
	redactor *redact.Redactor
}

// Execute runs one attempt: fixture → run dir → credentials → MCP →
// sandboxed agent → checks → artifacts → evidence. It always removes the run
// dir and the credential copies in it before it returns.
func (e *RunExecutor) Execute(ctx context.Context, run *harnessv1.HarnessRun) *Result {
	a := &attempt{run: run, limits: run.Spec.Limits}
	start := time.Now()
	receipt := &receiptInput{Started: start.UTC()}
	out := e.execute(ctx, a, receipt)
	if out.Status.Phase == "" {
		out.Status.Phase = harnessv1.RunFailed
	}
	return out
}

func (e *RunExecutor) execute(ctx context.Context, a *attempt, receipt *receiptInput) *Result {
	logger := log.FromContext(ctx)
	run := a.run
	fix, err := e.opts.Sources.Fixture(ctx, run, fixture.Limits{})
	if err != nil {
		return infraFailure(harnessv1.ReasonBadFixture, "the fixture cannot be used: "+err.Error())
	}
	a.manifest = fix.Manifest
	a.limits = effectiveLimits(run.Spec.Limits, fix.Manifest.Limits)

	dir, err := fix.Materialize(e.opts.RunRoot, run.Name, run.Status.Attempt)
	if err != nil {
		return infraFailure(harnessv1.ReasonBadFixture, "the fixture cannot be copied into a run dir: "+err.Error())
	}
	a.dir = dir
	defer func() {
		if err := dir.Remove(); err != nil {
			logger.Error(err, "removing the run dir failed; the next start removes it", "dir", dir.Path)
		}
	}()

	creds, err := e.readCredentials(ctx, run)
	if err != nil {
		return infraFailure(harnessv1.ReasonCredentialsUnavailable, err.Error())
	}

	runner, why, err := e.runner(ctx, run.Spec.Isolation.Policy)
	if err != nil {
		return infraFailure(harnessv1.ReasonSandboxUnavailable, err.Error())
	}

	layout, err := makeLayout(dir)
	if err != nil {
		return infraFailure(harnessv1.ReasonRunDirFailed, err.Error())
	}

	transport := fix.Manifest.Transport()
	if run.Spec.MCP != nil {
		transport = run.Spec.MCP.Transport
	}
	srv, err := e.startMCP(ctx, layout, transport, int64(a.limits.MaxDecisions))
	if err != nil {
		return infraFailure(harnessv1.ReasonMCPServerFailed, "the MCP token server could not start: "+err.Error())
	}
	defer srv.stop()

	// One redactor for everything the run stores or shows: the credential
	// values in all their forms and gitleaks' token rules, never the MCP
	// token, whose presence is the proof.
	var secrets []string
	for _, c := range creds {
		secrets = append(secrets, string(c.Value))
	}
	if a.redactor, err = redact.New(redact.Options{Secrets: secrets, Keep: []string{srv.token}}); err != nil {
		return infraFailure(harnessv1.ReasonRedactionFailed, "the redactor could not be built: "+err.Error())
	}

	adapter, err := e.opts.Adapters.Get(run.Spec.Agent.Adapter)
	if err != nil {
		return infraFailure(harnessv1.ReasonAdapterUnavailable, err.Error())
	}
	prompt := fix.Manifest.Prompt
	if run.Spec.Fixture.Prompt != "" {
		prompt = run.Spec.Fixture.Prompt
	}
	// The egress proxy, for ProviderOnly in a sandbox with its own network.
	// A plain child shares the node's network: a proxy would restrict only
	// the tools that honour HTTPS_PROXY, so it gets none (condition Sandboxed
	// says the run was not isolated).
	egressMode := effectiveEgress(run.Spec.Network.Egress)
	useProxy := egressMode == harnessv1.EgressProviderOnly && runner.Mode() != sandbox.ModePlain
	var proxyURL string
	if useProxy {
		proxyURL = fmt.Sprintf("http://127.0.0.1:%d", SandboxEgressPort)
	}
	inv, err := adapter.Prepare(adapters.Input{
		Agent: run.Spec.Agent, Prompt: prompt, Workspace: dir.Workspace(), Home: layout.home,
		MCP: srv.endpoint, MaxDecisions: a.limits.MaxDecisions, Credentials: creds, ProxyURL: proxyURL,
	})
	if err != nil {
		return infraFailure(harnessv1.ReasonAdapterFailed, "the adapter could not prepare the run: "+err.Error())
	}
	var px *egressProxy
	if useProxy {
		allow, err := allowList(run, inv)
		if err != nil {
			return infraFailure(harnessv1.ReasonEgressProxyFailed, "the egress allow list cannot be built: "+err.Error())
		}
		if px, err = startEgress(layout, allow); err != nil {
			return infraFailure(harnessv1.ReasonEgressProxyFailed, "the egress proxy could not start: "+err.Error())
		}
		defer px.stop()
		logger.V(1).Info("egress proxy", "allowed", allow.Entries())
	}
	// A provider on the node's loopback (harnessfacts fake-provider, a local
	// model server) is bridged to the same address in the sandbox's own
	// loopback, so the CLI uses the URL the run names.
	var bridge *providerBridge
	if useProxy {
		if bridge, err = startProviderBridge(layout, run.Spec.Agent.ProviderURL); err != nil {
			return infraFailure(harnessv1.ReasonEgressProxyFailed, "the provider on this node's loopback cannot be bridged into the sandbox: "+err.Error())
		}
		if bridge != nil {
			defer bridge.stop()
		}
	}
	if err := writeFiles(layout.home, inv.Files); err != nil {
		return infraFailure(harnessv1.ReasonAdapterFailed, "writing the adapter's config files: "+err.Error())
	}
	cliVersion := e.cliVersion(ctx, adapter)

	// The agent.
	spec := e.baseSpec(layout, dir, egressMode)
	spec.Argv = e.wrap(inv.Argv, srv, transport, px, bridge)
	spec.Env = append(spec.Env, inv.Env...)
	spec.ReadOnly = append(spec.ReadOnly, inv.ReadOnly...)
	if len(inv.PathDirs) > 0 {
		spec.Env = setEnv(spec.Env, "PATH", strings.Join(inv.PathDirs, ":")+":"+e.opts.Path)
	}
	spec.Limits = sandbox.Limits{
		MemoryBytes:  a.limits.Memory.Value(),
		MaxProcesses: int64(a.limits.MaxProcesses),
		Timeout:      time.Duration(a.limits.EpisodeSeconds) * time.Second,
	}
	out := newOutput(a.redactor, srv.token, a.limits.MaxOutputBytes)
	spec.Stdout, spec.Stderr = out.writer(), out.writer()
	agentRes, runErr := runner.Run(ctx, spec)
	out.close()
	var egressStats *egress.Stats
	if px != nil {
		st := px.proxy.Stats()
		egressStats = &st
	}
	stopCause := stopCauseOf(ctx)
	if runErr != nil && stopCause == nil && !agentRes.TimedOut {
		return infraFailure(harnessv1.ReasonSandboxUnavailable, "the sandbox could not run the agent: "+runErr.Error())
	}

	// Checks, without network, only when the agent ran to its end.
	var checks []harnessv1.CheckResult
	if stopCause == nil && !agentRes.TimedOut {
		checks = e.runChecks(ctx, runner, layout, dir, a)
	}

	arts, artifactData := e.collectArtifacts(dir, fix.Manifest.Artifacts, a)
	summary := srv.summary()
	tokenSeen := srv.token != "" && (out.tokenSeen() || tokenIn(srv.token, artifactData))
	var activity adapters.Activity
	if r, ok := adapter.(adapters.ActivityReader); ok {
		activity = r.Activity(out.bytes())
	}
	return e.verdict(a, verdictInput{
		receipt: receipt, runner: runner, fallbackWhy: why, agent: agentRes, agentErr: runErr, stop: stopCause,
		out: out, checks: checks, artifacts: arts, artifactData: artifactData, transport: transport,
		mcp: summary, tokenSeen: tokenSeen, inv: inv, cliVersion: cliVersion, fixtureDigest: fix.Digest,
		egress: egressMode, egressStats: egressStats, activity: activity,
	})
}

// layout is the run dir's folders besides the fixture's.
type layout struct {
	home, tmp, sockets string
}

func makeLayout(dir *fixture.RunDir) (layout, error) {
	l := layout{home: dir.Join("home"), tmp: dir.Join("tmp"), sockets: dir.Join("sockets")}
	for _, d := range []string{l.home, l.tmp, l.sockets,
		filepath.Join(l.home, ".config"), filepath.Join(l.home, ".local", "share"),
		filepath.Join(l.home, ".local", "state"), filepath.Join(l.home, ".cache")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return l, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	// The unprivileged agent must reach the sockets, not change them.
	if err := os.Chmod(l.sockets, 0o755); err != nil {
		return l, err
	}
	return l, os.Chmod(dir.Path, 0o711)
}

// baseSpec is the sandbox spec every command of the run shares: the
// isolated home and temp dirs, only the allow-listed environment, the run
// root hidden but for this run's own folders.
func (e *RunExecutor) baseSpec(l layout, dir *fixture.RunDir, egress harnessv1.Egress) sandbox.Spec {
	hidden := append([]string{e.opts.RunRoot}, e.opts.Hidden...)
	network := sandbox.NetworkNone
	if egress == harnessv1.EgressUnrestricted {
		network = sandbox.NetworkShared
	}
	return sandbox.Spec{
		Dir: dir.Workspace(),
		Env: []string{
			"PATH=" + e.opts.Path,
			"HOME=" + l.home,
			"USER=harnessfacts",
			"LOGNAME=harnessfacts",
			"LANG=C.UTF-8",
			"TERM=dumb",
			"TMPDIR=" + l.tmp,
			"XDG_CONFIG_HOME=" + filepath.Join(l.home, ".config"),
			"XDG_DATA_HOME=" + filepath.Join(l.home, ".local", "share"),
			"XDG_STATE_HOME=" + filepath.Join(l.home, ".local", "state"),
			"XDG_CACHE_HOME=" + filepath.Join(l.home, ".cache"),
			"HARNESSFACTS_RUN=" + dir.Path,
		},
		ReadWrite: []string{dir.Workspace(), l.home, l.tmp},
		ReadOnly:  []string{dir.FixtureDir(), l.sockets, e.opts.InitBinary},
		Hidden:    hidden,
		Network:   network,
		UID:       e.opts.UID,
		GID:       e.opts.GID,
	}
}

// wrap puts sandbox-init in front of the agent when the MCP server or the
// egress proxy must be bridged into the sandbox's own loopback.
func (e *RunExecutor) wrap(argv []string, srv *mcpServer, transport harnessv1.MCPTransport, px *egressProxy, bridge *providerBridge) []string {
	var flags []string
	if transport == harnessv1.MCPTransportHTTP && srv.httpSocket != "" {
		flags = append(flags, "--forward", fmt.Sprintf("127.0.0.1:%d=unix:%s", SandboxMCPPort, srv.httpSocket))
	}
	if bridge != nil {
		flags = append(flags, "--forward", bridge.listen+"=unix:"+bridge.socket)
	}
	if px != nil {
		flags = append(flags, "--egress-proxy", fmt.Sprintf("127.0.0.1:%d=unix:%s", SandboxEgressPort, px.socket))
	}
	if len(flags) == 0 {
		return argv
	}
	w := append([]string{e.opts.InitBinary, "sandbox-init"}, flags...)
	return append(append(w, "--"), argv...)
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
func allowList(run *harnessv1.HarnessRun, inv *adapters.Invocation) (*egress.AllowList, error) {
	allow, err := egress.NewAllowList(inv.ProviderHosts...)
	if err != nil {
		return nil, fmt.Errorf("the adapter's provider hosts: %w", err)
	}
	for _, h := range run.Spec.Network.AllowHosts {
		if err := allow.Add(h); err != nil {
			return nil, fmt.Errorf("spec.network.allowHosts: %w", err)
		}
	}
	if u := run.Spec.Agent.ProviderURL; u != "" {
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

func startEgress(l layout, allow *egress.AllowList) (*egressProxy, error) {
	px := &egressProxy{proxy: egress.New(egress.Options{Allow: allow}), socket: filepath.Join(l.sockets, "egress.sock"), done: make(chan struct{})}
	ln, err := listenUnix(px.socket)
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

// runner picks the sandbox for the run's isolation policy; why says why a
// fallback was taken.
func (e *RunExecutor) runner(_ context.Context, policy harnessv1.IsolationPolicy) (sandbox.Runner, string, error) {
	if policy != harnessv1.IsolationAllowFallback {
		if e.requiredErr != nil {
			return nil, "", fmt.Errorf("no sandbox works on this node and the run's isolation policy is Required: %w", e.requiredErr)
		}
		return e.required, "", nil
	}
	if e.fallback.Mode() == sandbox.ModePlain {
		return e.fallback, e.fallbackWhy, nil
	}
	return e.fallback, "", nil
}

func (e *RunExecutor) readCredentials(ctx context.Context, run *harnessv1.HarnessRun) ([]adapters.Credential, error) {
	var out []adapters.Credential
	for _, c := range run.Spec.Agent.Credentials {
		v, err := e.opts.Sources.SecretKey(ctx, run.Namespace, c.SecretKeyRef)
		if err != nil {
			return nil, fmt.Errorf("credential %s/%s: %w", c.SecretKeyRef.Name, c.SecretKeyRef.Key, err)
		}
		if len(v) == 0 {
			return nil, fmt.Errorf("credential %s/%s is empty", c.SecretKeyRef.Name, c.SecretKeyRef.Key)
		}
		out = append(out, adapters.Credential{Env: c.Env, File: c.File, Value: v})
	}
	return out, nil
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

// mcpServer is the run's MCP token server as the executor runs it.
type mcpServer struct {
	token      string
	endpoint   adapters.MCPEndpoint
	httpSocket string
	http       *mcp.Server
	receipts   *mcp.Receipts
	listeners  []net.Listener
	stopped    chan struct{}
	cancel     context.CancelFunc
}

// startMCP starts the token server for transport. HTTP: the server listens
// on 127.0.0.1 outside the sandbox and a unix socket in the run dir relays
// to it; sandbox-init bridges 127.0.0.1:SandboxMCPPort inside the sandbox to
// that socket. Stdio: the node-agent serves MCP on a unix socket, and the
// agent's stdio server is `harnessfacts mcp-stdio`, a pipe to that socket,
// so the token is never in a file the agent could read.
func (e *RunExecutor) startMCP(ctx context.Context, l layout, transport harnessv1.MCPTransport, maxCalls int64) (*mcpServer, error) {
	s := &mcpServer{endpoint: adapters.MCPEndpoint{Transport: transport, Server: "harnessfacts", Tool: "get_token"}, stopped: make(chan struct{})}
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	switch transport {
	case harnessv1.MCPTransportHTTP:
		srv, err := mcp.StartHTTP(mcp.Options{MaxCalls: maxCalls, ExtraPorts: []int{SandboxMCPPort}})
		if err != nil {
			return nil, err
		}
		s.http, s.token, s.receipts = srv, srv.Token, srv.Receipts
		u := strings.TrimPrefix(srv.URL, "http://")
		hostPort, path, _ := strings.Cut(u, "/")
		s.httpSocket = filepath.Join(l.sockets, "mcp-http.sock")
		ln, err := listenUnix(s.httpSocket)
		if err != nil {
			_ = srv.Shutdown(ctx)
			return nil, err
		}
		s.listeners = append(s.listeners, ln)
		go sandboxinit.Relay(ln, func() (net.Conn, error) { return net.Dial("tcp", hostPort) })
		s.endpoint.URL = fmt.Sprintf("http://127.0.0.1:%d/%s", SandboxMCPPort, path)
	case harnessv1.MCPTransportStdio:
		token, err := mcp.NewToken()
		if err != nil {
			return nil, err
		}
		s.token = token
		s.receipts = mcp.NewReceipts(harnessv1.MCPTransportStdio, maxCalls)
		sock := filepath.Join(l.sockets, "mcp-stdio.sock")
		ln, err := listenUnix(sock)
		if err != nil {
			return nil, err
		}
		s.listeners = append(s.listeners, ln)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer func() { _ = c.Close() }()
					_ = mcp.ServeStdio(ctx, c, c, token, s.receipts)
				}()
			}
		}()
		s.endpoint.Command = []string{e.opts.InitBinary, "mcp-stdio", "--socket", sock}
	}
	return s, nil
}

func listenUnix(path string) (net.Listener, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	// The agent runs as another user; connecting needs write permission.
	if err := os.Chmod(path, 0o666); err != nil {
		_ = ln.Close()
		return nil, err
	}
	return ln, nil
}

func (s *mcpServer) summary() mcp.Summary {
	if s.receipts == nil {
		return mcp.Summary{}
	}
	return s.receipts.Summary()
}

func (s *mcpServer) stop() {
	s.cancel()
	for _, l := range s.listeners {
		_ = l.Close()
	}
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.http.Shutdown(ctx)
	}
}

// stopCauseOf returns the StopCause of a cancelled execution.
func stopCauseOf(ctx context.Context) *StopCause {
	var sc *StopCause
	if errors.As(context.Cause(ctx), &sc) {
		return sc
	}
	if ctx.Err() != nil {
		return &StopCause{Reason: harnessv1.ReasonStopped, Message: "the node-agent stopped the run: " + ctx.Err().Error()}
	}
	return nil
}

func infraFailure(reason, message string) *Result {
	return &Result{Status: harnessv1.HarnessRunStatus{
		Phase: harnessv1.RunFailed, Verdict: harnessv1.VerdictError,
		FailureClass: harnessv1.FailureInfrastructure, Reason: reason, Message: message,
	}}
}

// effectiveLimits fills the run's unset limits from the fixture's, then
// from the API's defaults (a run read from a file was never defaulted by an
// API server).
func effectiveLimits(run harnessv1.Limits, fix *harnessv1.Limits) harnessv1.Limits {
	l := run
	if fix != nil {
		if l.EpisodeSeconds == 0 {
			l.EpisodeSeconds = fix.EpisodeSeconds
		}
		if l.ProbeSeconds == 0 {
			l.ProbeSeconds = fix.ProbeSeconds
		}
		if l.Memory == nil {
			l.Memory = fix.Memory
		}
		if l.MaxDecisions == 0 {
			l.MaxDecisions = fix.MaxDecisions
		}
		if l.MaxProcesses == 0 {
			l.MaxProcesses = fix.MaxProcesses
		}
		if l.MaxOutputBytes == 0 {
			l.MaxOutputBytes = fix.MaxOutputBytes
		}
		if l.MaxArtifactBytes == 0 {
			l.MaxArtifactBytes = fix.MaxArtifactBytes
		}
	}
	return DefaultLimits(l)
}

// setCondition sets a condition in a status being built.
func setCondition(st *harnessv1.HarnessRunStatus, typ string, ok bool, reason, message string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message})
}

// digest is "sha256:<hex>" of data.
func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// SpecDigest is the digest of the run's spec as canonical JSON.
func SpecDigest(spec harnessv1.HarnessRunSpec) string {
	b, _ := json.Marshal(spec) // struct fields marshal in a fixed order
	return digest(b)
}

func tokenIn(token string, data map[string][]byte) bool {
	for _, d := range data {
		if bytes.Contains(d, []byte(token)) {
			return true
		}
	}
	return false
}
