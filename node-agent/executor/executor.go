// Package executor carries out one attempt of a HarnessRun on this machine,
// from the fixture to the evidence, and writes nothing to the API server: it
// returns an Outcome, which the node-agent's daemon (package nodeagent) or
// `harnessfacts run` (package localrun) persists.
//
// Each step of an attempt has its file, in the order Execute takes them:
// fixture.go, rundir.go (the layout itself is fixture/rundir.go's),
// credentials.go, mcp.go, egress.go and provider.go, agent.go, checks.go,
// artifacts.go, verdict.go and evidence.go.
package executor

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/trustedpath"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/egress"
	"github.com/harnessfacts/harnessfacts/node-agent/envimage"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/fixturesource"
	"github.com/harnessfacts/harnessfacts/node-agent/gateway"
	"github.com/harnessfacts/harnessfacts/node-agent/redact"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// DefaultPath is the PATH of sandboxed commands unless configured.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Options configure an Executor.
type Options struct {
	// Sources reads fixtures and Secret keys.
	Sources Sources
	// RunRoot holds the run dirs (harnessfacts-<random>).
	RunRoot string
	// Sandbox configures the sandbox runners.
	Sandbox sandbox.Options
	// Hidden are directories masked in the sandbox (node secrets, homes);
	// RunRoot is always hidden, so a run never sees another run.
	Hidden []string
	// Path is the PATH of sandboxed commands (DefaultPath when empty).
	Path string
	// UID and GID are the unprivileged ids the agent runs as when IDs is
	// nil (0: the sandbox's default, or the caller's own uid when it is not
	// root).
	UID, GID int
	// IDs, when set, gives each attempt its own id of a range as uid and
	// gid for as long as it runs, so concurrent runs never share a uid.
	IDs sandbox.IDs
	// InitBinary is the program bound read-only into the sandbox for
	// `sandbox-init` and `mcp-stdio`: harnessfacts-sandbox-init or the
	// harnessfacts binary (when empty, InitBinaryBeside(os.Executable())).
	InitBinary string
	// Slots is how many runs execute at once (the node-agent's --slots;
	// 0 is 1): each run's model gateway may hold its share of the node's
	// request bodies, so that the node's runs together never wait on one
	// another's (gatewayBodiesPerRun).
	Slots int
	// Adapters are the adapters this node offers.
	Adapters adapters.Registry
	// NodeName is recorded in the receipt.
	NodeName string
	// SigningKey, when set, signs every receipt (a DSSE envelope of an
	// in-toto statement in the evidence); without it the evidence is
	// hashed but unsigned.
	SigningKey *evidence.Key
	// Image is the node-agent's container image, for the receipt (the
	// chart passes its pod spec's image; empty outside a pod).
	Image string
	// RefuseFallback refuses the plain fallback on this node whatever a run
	// asks: a run with isolation.policy AllowFallback runs sandboxed, or
	// fails with SandboxUnavailable when no sandbox works here.
	RefuseFallback bool
	// NoLoopbackProviders refuses a spec.agent.providerURL on the
	// executor's own loopback: in a pod that loopback is the node-agent's,
	// where its own servers and any sidecar (a service mesh's admin API)
	// listen, and a run author's loopback providerURL reached them from
	// the sandbox (--loopback-providers=false, the chart's default).
	NoLoopbackProviders bool
	// Unreachable are addresses an Unrestricted run's sandbox never
	// reaches: the node-agent's own upstream services that bound their
	// clients by address (the controller's run source), since the
	// sandbox's connections leave from the node-agent's own address and
	// would use up its share.
	Unreachable []netip.Prefix
	// ProviderCAs verify model providers' certificates in each run's model
	// gateway; nil is the system's roots.
	ProviderCAs *x509.CertPool
	// GatewayLimits, when set, gives a run's model gateway limits (the
	// HarnessPolicies over its namespace, as they are when the run starts).
	GatewayLimits func(ctx context.Context, run *harnessv1.HarnessRun) (harnessv1.GatewayLimits, error)
	// Pricing, when set, gives the price table of a run's namespace (the
	// first HarnessPolicy over it by name with one) and that policy's name;
	// nil when none has one. The run's usage is priced with it when the run
	// ends, before its receipt is sealed.
	Pricing func(ctx context.Context, run *harnessv1.HarnessRun) (*harnessv1.PolicyPricing, string, error)
	// ClusterCIDRs are the cluster's Pod and Service ranges: egress
	// ProviderOnly refuses them like every other inside address
	// (--cluster-cidrs).
	ClusterCIDRs []netip.Prefix
	// NodeAddrs are the node's own addresses (--node-ips, the downward
	// API's status.hostIPs in the chart): egress ProviderOnly refuses them,
	// public or not, like every other inside address. The addresses of
	// the executor's own network namespace are added at each run (a local
	// run's machine, a node-agent on the host's network).
	NodeAddrs []netip.Addr
	// InsideAllowedBy says, in egress's refusals of an inside address,
	// where a name is allowed inside; "" is a HarnessPolicy's
	// network.insideHosts (`harnessfacts run` names its --inside-host).
	InsideAllowedBy string
	// InsideHosts are names every ProviderOnly run of this executor may
	// reach at inside addresses, besides those its status.insideHosts
	// carries from the namespace's HarnessPolicies (`harnessfacts run
	// --inside-host`; the node-agent sets none).
	InsideHosts []string
	// Resolver resolves the names the egress proxy dials; nil is the
	// system's. Tests give their own.
	Resolver egress.Resolver
	// LimitsSettled, when set, is told the attempt's limits as soon as they
	// are settled (the fixture read, no HarnessPolicy ceiling broken),
	// before the agent starts. The node-agent records them in status (once
	// the attempt has lasted a moment), so that the controller's deadline
	// follows the episode the fixture set, and the checks (how many, each
	// within limits.probeSeconds) that come after it. A failure is the
	// callee's to report; the attempt goes on.
	LimitsSettled func(ctx context.Context, run *harnessv1.HarnessRun, limits harnessv1.ResolvedLimits, checks int32)
	// PolicyViolations, when set, are the rules of the HarnessPolicies over
	// the run's namespace, as they are now, that the run breaks: asked
	// last before the agent starts, so that a policy made or tightened
	// since the claim still refuses it (reason PolicyViolation). An error
	// refuses the run too.
	PolicyViolations func(ctx context.Context, run *harnessv1.HarnessRun) ([]string, error)
	// Observer, when set, hears of each attempt's steps and of its agent's
	// start.
	Observer Observer
	// Live, when set, receives each attempt's agent output, redacted, as it
	// is produced.
	Live LiveOutput
	// Images is the node's cache of environment images; when nil, the
	// first run that names an image makes one in RunRoot/.images bounded
	// by ImageCacheBytes (0: envimage.DefaultMaxBytes). A node that never
	// runs one has no such folder.
	Images          *envimage.Cache
	ImageCacheBytes int64
	// Fixtures is the node's cache of git and OCI fixtures; when nil, the
	// first run that names one makes one in RunRoot/.fixtures bounded by
	// FixtureCacheBytes (0: fixturesource.DefaultCacheBytes), which
	// reaches the sources with FixtureSourceCAs (nil: the system's roots).
	Fixtures          *fixturesource.Cache
	FixtureCacheBytes int64
	FixtureSourceCAs  *x509.CertPool
	// FixtureLimits bound each git or OCI fixture (zero:
	// fixturesource.DefaultLimits); a node-agent with a memory bound
	// passes fixturesource.LimitsFor it.
	FixtureLimits fixture.Limits
	// Preflight, when set, gives the sandbox preflight's verdicts for
	// these options instead of sandbox.Preflight (harnessfacts run: the
	// one its init began, package prestart).
	Preflight func(sandbox.Options) []sandbox.Availability
	// CleanBehind has Execute return once the outcome is known and clean
	// up (the run dir and the credential copies in it removed, the run's
	// servers stopped, its ids given back) while its caller writes the
	// evidence; the caller must call Outcome.WaitCleaned before it counts
	// the attempt's slot free. The node-agent's claimed → done is shorter
	// by the cleanup (a millisecond or two), and nothing of the run
	// outlives its terminal status.
	CleanBehind bool
}

// Executor carries out attempts, for the node-agent and `harnessfacts run`.
type Executor struct {
	opts Options

	// The runners for each isolation policy, chosen once by a preflight at
	// start rather than per run; avail is that preflight's verdicts. New
	// starts the preflight; they are set when ready is closed (waitChoice).
	ready       chan struct{}
	avail       []sandbox.Availability
	required    sandbox.Runner
	requiredErr error
	fallback    sandbox.Runner
	fallbackErr error
	fallbackWhy string
	// initInterp is opts.InitBinary's dynamic loader, "" when it is static.
	initInterp string
	// graves removes finished runs' dirs.
	graves graveyard

	// versions caches each adapter's CLI version: asking costs a process
	// start (seconds for some CLIs), and the installed CLI does not change
	// under a running node-agent.
	versions sync.Map // harnessv1.Adapter → string
	// digests caches CLI binaries' sha256 (cliBinary).
	digests sync.Map
	// masked are the node's folders every sandbox covers (sandboxMasks,
	// links resolved): a CLI's file there is digested only in a CLI
	// folder bound over them.
	masked []string
	// hidden and maskedForms are what allMayRead refuses, found once
	// (nodeHidden).
	hiddenOnce          sync.Once
	hidden, maskedForms []string

	// gatewayBodies bounds the request bodies every run's model gateway
	// holds at once (nodeGatewayBodies).
	gatewayBodies gateway.NodeBodies
	// egressConns bounds every run's egress proxy connections together.
	egressConns egress.NodeConns

	// overlayErr is why no check may have an overlay of its own on this
	// node (fixture.RunDir.ProbeOverlay, in the first run dir, before its
	// agent ran), nil when they can.
	overlayOnce sync.Once
	overlayErr  error

	imagesOnce sync.Once
	images     *envimage.Cache
	imagesErr  error

	fixturesOnce sync.Once
	fixtures     *fixturesource.Cache
}

// FixtureCacheDir is the fixture cache's folder in the run root.
const FixtureCacheDir = ".fixtures"

// fixtureCache is the node's cache of git and OCI fixtures, made on first
// use, in the run root, which every sandbox hides.
func (e *Executor) fixtureCache() *fixturesource.Cache {
	e.fixturesOnce.Do(func() {
		e.fixtures = e.opts.Fixtures
		if e.fixtures == nil {
			e.fixtures = fixturesource.NewCache(filepath.Join(e.opts.RunRoot, FixtureCacheDir), e.opts.FixtureCacheBytes,
				fixturesource.Options{RootCAs: e.opts.FixtureSourceCAs, Limits: e.opts.FixtureLimits})
		}
	})
	return e.fixtures
}

// imageCache is the node's image cache, made on first use.
func (e *Executor) imageCache() (*envimage.Cache, error) {
	e.imagesOnce.Do(func() {
		if e.opts.Images != nil {
			e.images = e.opts.Images
			return
		}
		// In the run root, which every sandbox hides; 0700, the node-agent's.
		e.images, e.imagesErr = envimage.NewCache(filepath.Join(e.opts.RunRoot, ".images"), e.opts.ImageCacheBytes)
	})
	return e.images, e.imagesErr
}

// InitBinaryName is the small program an agent's stdio MCP server is, and
// an AppContainer sandbox starts first
// (cmd/harnessfacts-sandbox-init): the harnessfacts binary's `sandbox-init`
// and `mcp-stdio` without its 100 MB and its package initialisation, which
// cost tens of milliseconds at each sandboxed agent start.
const InitBinaryName = "harnessfacts-sandbox-init"

// InitBinaryBeside returns InitBinaryName in exe's folder when a regular
// executable file is there (how the images and `make build` install it),
// else exe itself: the harnessfacts binary has the same commands, only
// slower to start (a `go install` of one command, a test binary).
func InitBinaryBeside(exe string) string {
	name := InitBinaryName
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	p := filepath.Join(filepath.Dir(exe), name)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && (runtime.GOOS == "windows" || fi.Mode().Perm()&0o111 != 0) {
		return p
	}
	return exe
}

// New checks opts and returns an executor.
func New(opts Options) (*Executor, error) {
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
	if err := fixture.CheckRoot(root); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	if opts.Path == "" {
		opts.Path = DefaultPath
	}
	if opts.InitBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("executor: locating the harnessfacts binary: %w", err)
		}
		opts.InitBinary = InitBinaryBeside(exe)
	}
	if opts.Adapters == nil {
		opts.Adapters = adapters.Default()
	}
	// The run root holds every run's folders and credential copies, which
	// this process changes by path: a link another user left where its
	// path leads (harnessfacts run's default is /tmp/harnessfacts-runs) had
	// it make the link's target 0711 and run there. Judged before anything
	// is made in it, and again once it is whole.
	if err := trustedpath.Check(root, "the run root"); err != nil {
		return nil, fmt.Errorf("executor: the run root: %w; choose another (--run-root)", err)
	}
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, fmt.Errorf("executor: creating the run root: %w", err)
	}
	if err := trustedpath.Check(root, "the run root"); err != nil {
		return nil, fmt.Errorf("executor: the run root: %w; choose another (--run-root)", err)
	}
	// The run root is ours: the agent's user must pass through it (it sees
	// only its own run's folders, the rest is hidden in the sandbox).
	if err := os.Chmod(root, 0o711); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	uid, gid := opts.UID, opts.GID
	if opts.IDs != nil {
		uid, gid = opts.IDs.Range().First, opts.IDs.Range().First
	}
	uid, gid = sandbox.EffectiveIDs(uid, gid)
	// The run dirs are root's children: root itself must be searchable.
	for _, p := range []string{filepath.Join(root, "run"), opts.InitBinary} {
		if err := sandbox.Reachable(p, uid, gid); err != nil {
			return nil, fmt.Errorf("executor: %w", err)
		}
	}
	e := &Executor{opts: opts, masked: sandboxMasks(), gatewayBodies: gateway.NewNodeBodies(nodeGatewayBodies), egressConns: egress.NewNodeConns(egress.DefaultNodeConns),
		initInterp: elfInterpreter(opts.InitBinary), ready: make(chan struct{})}
	// One preflight (a sandbox start) serves both policies and the
	// HarnessNode's modes: it used to run once for each, two sandboxes
	// before every local run's first. It runs on while New's caller goes
	// on: what needs its verdict waits for it (Ready, SandboxModes, an
	// attempt's choice of sandbox), and a local run validates its run and
	// takes its first steps (its fixture, its run dir) meanwhile.
	go func() {
		defer close(e.ready)
		if opts.Preflight != nil {
			e.avail = opts.Preflight(opts.Sandbox)
		} else {
			e.avail = sandbox.Preflight(context.Background(), opts.Sandbox)
		}
		e.required, e.requiredErr = sandbox.Choose(sandbox.PolicyRequired, opts.Sandbox, e.avail)
		e.fallback, e.fallbackErr = sandbox.Choose(sandbox.PolicyAllowFallback, opts.Sandbox, e.avail)
		var why []string
		for _, av := range e.avail {
			if !av.Available {
				why = append(why, fmt.Sprintf("%s: %s", av.Mode, av.Reason))
			}
		}
		e.fallbackWhy = strings.Join(why, "; ")
	}()
	return e, nil
}

// Ready waits for New's sandbox preflight, and fails when no runner could
// be made from its verdicts (not even the plain fallback's).
func (e *Executor) Ready() error {
	if err := e.waitChoice(context.Background()); err != nil {
		return err
	}
	if e.fallbackErr != nil {
		return fmt.Errorf("executor: %w", e.fallbackErr)
	}
	return nil
}

// waitChoice waits for the preflight's verdicts (an Executor made without
// New has them already).
func (e *Executor) waitChoice(ctx context.Context) error {
	if e.ready == nil {
		return nil
	}
	select {
	case <-e.ready:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Close waits for the preflight (no sandbox of it outlives the executor)
// and removes the run dirs still waiting for removal (graveyard). Runs
// may not start after it.
func (e *Executor) Close() error {
	_ = e.waitChoice(context.Background())
	e.graves.close()
	return nil
}

// RemoveLeftovers removes what a killed earlier process left under the run
// root: its runs' processes, the sandbox's own leftovers (Windows
// AppContainer profiles and grants), then the run dirs whose owner lock
// nobody holds, and nothing else. Call it once, before the first attempt.
func (e *Executor) RemoveLeftovers(ctx context.Context) error {
	logger := log.FromContext(ctx)
	n, err := killLeftovers(e.opts.RunRoot)
	if err != nil {
		return fmt.Errorf("killing what earlier runs left running: %w", err)
	}
	if n > 0 {
		logger.Info("killed processes an earlier node-agent's runs left running", "count", n)
	}

	recovered, err := sandbox.RecoverAbandoned(e.opts.Sandbox, e.opts.RunRoot)
	if err != nil {
		return fmt.Errorf("recovering abandoned sandboxes: %w", err)
	}
	for _, r := range recovered {
		logger.Info("removed what an earlier node-agent's sandbox left behind", "what", r)
	}
	removed, err := e.RemoveAbandoned()
	if err != nil {
		return fmt.Errorf("removing abandoned run dirs: %w", err)
	}
	for _, d := range removed {
		logger.Info("removed a run dir an earlier node-agent left behind", "dir", d)
	}
	return nil
}

// attempt is the state of one attempt, filled step by step.
type attempt struct {
	// noRoomForChecks: the verifier part could not be written for lack
	// of room (ENOSPC, EDQUOT) in the run dir the agent filled.
	noRoomForChecks bool
	// firstCheck is the first check's cgroup and network namespace, made
	// while the agent runs (prepareCheck).
	firstCheck *preparedCheck

	e       *Executor
	run     *harnessv1.HarnessRun
	started time.Time
	// limits are the attempt's limits, every one set; resolved says where
	// each came from (nil until the fixture is read).
	limits   harnessv1.Limits
	resolved *harnessv1.ResolvedLimits

	fix *fixture.Fixture
	// fixtureSource says where a git or OCI fixture came from (status
	// and receipt); nil for the other sources.
	fixtureSource *harnessv1.FixtureSourceStatus
	dir           *fixture.RunDir
	// solutionDir is the fixture's solution folder in the run dir, set for
	// an oracle's run only (adapter oracle).
	solutionDir string
	creds       []adapters.Credential
	runner      sandbox.Runner
	// fallbackWhy says why the plain fallback was taken ("" when not).
	fallbackWhy string
	transport   harnessv1.MCPTransport
	mcp         *mcpServer
	redactor    *redact.Redactor
	adapter     adapters.Adapter
	inv         *adapters.Invocation
	egress      harnessv1.Egress
	proxy       *egressProxy
	// inside is what the run's egress may reach of the inside; the proxy,
	// the provider relay and the model gateway all dial through it.
	inside *egress.Inside
	bridge *providerBridge
	// route is how the run's model requests go through the model gateway
	// (nil when they do not); gw serves them.
	route *adapters.ModelRoute
	gw    *modelGateway
	// gatewayLimits are the policies' limits for the gateway.
	gatewayLimits harnessv1.GatewayLimits
	// pace holds the redaction of the agent's output to a share of a core;
	// checksPace that of its checks, together (the agent's debt is not
	// theirs).
	pace, checksPace *pace
	// cliVersion says the CLI's version for the receipt once it is known:
	// asked beside the agent's start (see cliVersionLater), nil before the
	// agent's files are written. Read it with version().
	cliVersion func() string
	// prompt is the task given to the agent (the trajectory's first step).
	prompt string
	// usageNote says why the run's usage has no estimated cost, when a
	// price table was meant to give one.
	usageNote string
	// cliPath and cliDigest pin the CLI binary that ran.
	cliPath, cliDigest string
	// uid and gid the attempt's commands run as.
	uid, gid int
	// diskNote says why limits.disk was not enforced ("" when it was).
	diskNote string
	// fixtureNote says what of the fixture's git config was dropped
	// before the agent ran ("" when nothing was).
	fixtureNote string
	// env is the run's environment image and overlay; nil without one.
	env *environment

	// live receives the agent's redacted output as it is produced; nil
	// without Options.Live.
	live io.WriteCloser

	// cleanups run in reverse order when the attempt ends.
	cleanups []func()
}

// Execute carries out one attempt: fixture → run dir → credentials → MCP →
// egress → sandboxed agent → checks → artifacts → verdict and evidence. It
// always removes the run dir and the credential copies in it: before it
// returns, or with Options.CleanBehind by the time Outcome.WaitCleaned
// returns. When the run must stop, ctx is cancelled with a *StopCause; the
// agent's process tree is killed and the Outcome still says what is known.
func (e *Executor) Execute(ctx context.Context, run *harnessv1.HarnessRun) *Outcome {
	// An earlier node-agent that was still dying when this one started
	// held its run dirs then (RemoveLeftovers skipped them); they are free
	// now. Run dirs this process holds stay, as does any dir just made.
	if removed, err := e.RemoveAbandoned(); err != nil {
		log.FromContext(ctx).Error(err, "removing abandoned run dirs")
	} else {
		for _, d := range removed {
			log.FromContext(ctx).Info("removed a run dir an earlier node-agent left behind", "dir", d)
		}
	}
	// Until the fixture is read, the limits are resolved without it.
	a := &attempt{e: e, run: run, started: time.Now().UTC(), pace: newPace(), checksPace: newPace(),
		limits: harnessv1.ResolveLimits(run.Spec.Limits, nil, nil).Limits}
	// A panicking step leaves no outcome to hand the cleanup to: the
	// cleanup runs here, as the panic goes on.
	behind := false
	defer func() {
		if !behind {
			a.cleanup()
		}
	}()
	if e.opts.Live != nil {
		// Open from the start, so a follower may wait for the first byte;
		// closed last, after the agent's output was flushed into it.
		a.live = e.opts.Live.Open(run)
		a.deferCleanup(func() { _ = a.live.Close() })
	}
	out := a.do(ctx)
	out.Status.FixtureSource = a.fixtureSource
	if out.Status.Phase == "" {
		out.Status.Phase = harnessv1.RunFailed
	}
	if r := a.resolved; r != nil {
		out.Status.Limits = r.Limits.DeepCopy()
		if a.fix != nil {
			out.Status.PlannedChecks = int32(len(a.fix.Manifest.Checks))
		}
		out.Status.LimitSources = r.Sources
	}
	if e.opts.CleanBehind {
		cleaned := make(chan struct{})
		out.Cleaned, behind = cleaned, true
		go func() {
			defer close(cleaned)
			// Nothing waits for a panic here: it would end the node-agent
			// with every run on it.
			defer func() {
				if p := recover(); p != nil {
					log.FromContext(ctx).Error(fmt.Errorf("%v", p), "an attempt's cleanup panicked; the next start removes what it left")
				}
			}()
			a.cleanup()
		}()
	}
	return out
}

// do takes the steps in order; a step that fails ends the attempt as an
// infrastructure failure with the step's reason, unless the attempt was
// stopped (cancelled, deleted, the node-agent's end): then the stop is why,
// whatever the step it interrupted said.
func (a *attempt) do(ctx context.Context) *Outcome {
	steps := []struct {
		name string // for an Observer; "" continues the step before
		do   func(context.Context) error
	}{
		{StepFixture, a.readFixture},
		{"", a.refuseLoopbackProvider},
		{StepRunDir, a.takeID},
		{"", a.makeRunDir},
		{StepCredentials, a.readCredentials},
		{"", a.chooseSandbox},
		{StepEnvironment, a.prepareEnvironment},
		{StepMCP, a.startMCP},
		{"", a.buildRedactor},
		{"", a.prepareAgent},
		{StepEgress, a.startEgress},
		{"", a.writeAgentFiles},
		{"", a.recheckPolicies},
	}
	for _, st := range steps {
		if sc := stopCauseOf(ctx); sc != nil {
			return stoppedBeforeAgent(sc)
		}
		if st.name != "" {
			a.step(st.name)
		}
		if err := st.do(ctx); err != nil {
			// A cancel that came while the step read the fixture or a
			// Secret from the API made that read fail: the run was
			// cancelled, not given a bad fixture.
			if sc := stopCauseOf(ctx); sc != nil {
				return stoppedBeforeAgent(sc)
			}
			return failed(err)
		}
	}
	a.step(StepAgent)
	res, err := a.runAgent(ctx)
	if err != nil {
		return failed(err)
	}
	// The artifacts are read and hashed as the agent left them, before
	// the checks: a check that runs the workspace's code (a test runner,
	// a formatter) may change the files, and the receipt must not sign,
	// beside the checks' results, files other than the ones they judged.
	a.step(StepArtifacts)
	var artifactsSeen bool
	res.artifacts, artifactsSeen = a.collectArtifacts()
	if res.stop == nil && !res.agent.TimedOut && res.gatewayStop == nil {
		a.step(StepChecks)
		res.checks = a.runChecks(ctx)
		if a.noRoomForChecks && res.diskFull == nil {
			if u, ok, err := a.dir.DiskUsage(); err == nil && ok {
				res.diskFull, res.noRoomForChecks = &u, true
			}
		}
		// Stopped while the checks ran: they were cut short and judge
		// nothing; the run was stopped, it did not fail its checks.
		if sc := stopCauseOf(ctx); sc != nil {
			res.stop, res.stoppedInChecks = sc, true
		}
	}
	res.mcp = a.mcp.summary()
	res.tokenSeen = a.mcp.token != "" && (res.out.tokenSeen() || artifactsSeen)
	// The log is read back (up to maxActivityLog, tens of MiB) only for an
	// adapter that parses it: an exec agent's huge output is never held.
	var log []byte
	_, acts := a.adapter.(adapters.ActivityReader)
	_, counts := a.adapter.(adapters.UsageReader)
	_, traj := a.adapter.(adapters.TrajectoryReader)
	if acts || traj || counts && a.gw == nil {
		log = res.out.activityLog()
	}
	if r, ok := a.adapter.(adapters.ActivityReader); ok {
		res.activity = r.Activity(log)
	}
	res.usage = a.usageStatus(ctx, log)
	res.trajectory = a.trajectory(log, res.usage)
	return a.verdict(res)
}

// deferCleanup registers f to run when the attempt ends, after those registered
// later.
func (a *attempt) deferCleanup(f func()) { a.cleanups = append(a.cleanups, f) }

func (a *attempt) cleanup() {
	for i := len(a.cleanups) - 1; i >= 0; i-- {
		a.cleanups[i]()
	}
}

// takeID gives the attempt its uid and gid: its own id of the pool, given
// back only when the attempt's cleanups have run (the run dir is removed,
// every process of it is gone), or the configured ids.
func (a *attempt) takeID(ctx context.Context) error {
	if a.e.opts.IDs == nil {
		a.uid, a.gid = a.e.opts.UID, a.e.opts.GID
		return nil
	}
	id, release, err := a.e.opts.IDs.Acquire()
	if err != nil {
		return fail(harnessv1.ReasonSandboxUnavailable, fmt.Errorf("no uid for the run: %w (give the node-agent a --run-uids range of at least --slots ids)", err))
	}
	a.uid, a.gid = id, id
	a.deferCleanup(func() { // registered first: runs last
		if a.runner != nil && a.runner.Mode() == sandbox.ModePlain {
			// The plain fallback bounds no process tree: what left the
			// group (setsid) and the run dir (cd /, env -i) still runs as
			// the run's uid, and would run as the next run's, beside its
			// agent and credential copies. The id is the run's alone.
			if n, err := sandbox.KillUIDs(sandbox.IDRange{First: id, Count: 1}); err != nil || n > 0 {
				log.FromContext(ctx).Info("killed what the plain run left running as its uid", "uid", id, "count", n, "error", err)
			}
		}
		release()
	})
	return nil
}

// recheckPolicies refuses the run, last before its agent starts, when it
// breaks a HarnessPolicy over its namespace as the policies are now.
func (a *attempt) recheckPolicies(ctx context.Context) error {
	check := a.e.opts.PolicyViolations
	if check == nil {
		return nil
	}
	violations, err := check(ctx, a.run)
	if err != nil {
		return fail(harnessv1.ReasonPolicyViolation, fmt.Errorf("the namespace's HarnessPolicies could not be read before the agent started, so the run is refused: %w", err))
	}
	if len(violations) > 0 {
		return fail(harnessv1.ReasonPolicyViolation, fmt.Errorf("refused by the namespace's HarnessPolicies just before the agent started: %s", strings.Join(violations, "; ")))
	}
	return nil
}

// chooseSandbox picks the sandbox for the run's isolation policy, and says
// why when the plain fallback was taken.
func (a *attempt) chooseSandbox(ctx context.Context) error {
	e := a.e
	if err := e.waitChoice(ctx); err != nil {
		return err
	}
	if e.fallbackErr != nil {
		return fail(harnessv1.ReasonSandboxUnavailable, fmt.Errorf("no runner could be made from the sandbox preflight's verdicts: %w", e.fallbackErr))
	}
	if a.run.Spec.Isolation.Policy != harnessv1.IsolationAllowFallback || e.opts.RefuseFallback {
		if e.requiredErr != nil {
			if a.run.Spec.Isolation.Policy == harnessv1.IsolationAllowFallback {
				return fail(harnessv1.ReasonSandboxUnavailable, fmt.Errorf("no sandbox works on this node, and this node refuses the plain fallback whatever a run asks (--refuse-fallback): %w", e.requiredErr))
			}
			return fail(harnessv1.ReasonSandboxUnavailable, fmt.Errorf("no sandbox works on this node and the run's isolation policy is Required: %w", e.requiredErr))
		}
		a.runner = e.required
		return nil
	}
	a.runner = e.fallback
	if e.fallback.Mode() == sandbox.ModePlain {
		a.fallbackWhy = e.fallbackWhy
	}
	return nil
}

// RemoveAbandoned removes the run dirs of earlier processes (their owner
// lock is not held), and only those: what `harnessfacts run` may do while
// other local runs share its run root.
func (e *Executor) RemoveAbandoned() ([]string, error) {
	return fixture.RemoveAbandoned(e.opts.RunRoot)
}

// RemoveAbandonedCgroups removes the empty run cgroups that earlier
// processes left, those whose maker is gone and those of an earlier
// version made more than a minute ago, never a live process's: what
// `harnessfacts run` may do while other local runs share the cgroup parent
// (a node-agent removes those of an earlier version at once, at its start,
// RemoveLeftovers).
func (e *Executor) RemoveAbandonedCgroups() ([]string, error) {
	return sandbox.RemoveAbandonedCgroups(e.opts.Sandbox, time.Minute)
}
