// Package agents runs the real agent CLIs (Claude Code, Codex, Gemini CLI,
// OpenCode, Aider) through the whole path: a real kube-apiserver and etcd,
// the controller and a node-agent in this process, real bubblewrap with
// egress ProviderOnly, and `harnessfacts fake-provider`'s scripted model on
// this machine's loopback. Nothing leaves the machine: every run's egress
// proxy refuses all but the provider, and a test fails on any refused
// connection (so a new phone-home call of a CLI shows at once).
//
// The CLIs come from hack/install-agent-clis.sh (`make test-agents`
// installs them); HARNESSFACTS_AGENT_CLIS names their bin folder.
package agents

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	"github.com/harnessfacts/harnessfacts/internal/fakeprovider"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/runsourcetest"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
	nodeagent "github.com/harnessfacts/harnessfacts/node-agent"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

const (
	leaseNS  = "harnessfacts-system"
	nodeName = "agents-node"
)

var (
	env      *testenv.Env
	k8s      client.Client
	binary   string // the harnessfacts binary built from this tree
	runRoot  string
	cliDir   string // the agent CLIs' bin folder
	provider *fakeprovider.Provider
	// providerURL is the fake provider's root over plain HTTP; a fixture's
	// script is at providerURL + "/s/" + fixture folder name. A run whose
	// model requests go through the model gateway names providerTLSURL, the
	// same provider over TLS with a test certificate that only the
	// node-agent's gateway trusts (providerCAs).
	providerURL    string
	providerTLSURL string
	providerCAs    *x509.CertPool
	// untrustedURL serves the provider with a certificate of its own,
	// signed by no CA the node-agent trusts.
	untrustedURL string
	registry     adapters.Registry
	// nodeKey is the public key the node-agent signs receipts with.
	nodeKey *evidence.PublicKey
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	logOut := io.Discard
	if os.Getenv("HARNESSFACTS_TEST_LOG") != "" {
		logOut = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logOut), zap.UseDevMode(true)))
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }
	if _, err := exec.LookPath("bwrap"); err != nil {
		return fail(fmt.Errorf("bwrap is not installed: run `make test-agents`, which installs Debian's bubblewrap package"))
	}
	cliDir = os.Getenv("HARNESSFACTS_AGENT_CLIS")
	if cliDir == "" {
		cliDir = adapters.InstalledCLIDir()
	}
	if cliDir == "" {
		return fail(fmt.Errorf("the agent CLIs are not installed: run `make test-agents`, which installs them"))
	}
	registry = adapters.New(adapters.Config{CLIDir: cliDir})

	tmp, err := os.MkdirTemp("", "hf-agents-")
	if err != nil {
		return fail(err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	// The sandboxed agent runs as an unprivileged user: it must be able to
	// reach and execute the binary.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fail(err)
	}
	binary = filepath.Join(tmp, "harnessfacts")
	// With the sandboxes' init program beside it, as make build and the
	// images install them (executor.InitBinaryBeside finds it).
	build := exec.Command("go", "build", "-o", tmp+"/", "./cmd/harnessfacts", "./cmd/harnessfacts-full", "./cmd/harnessfacts-sandbox-init")
	build.Dir = testenv.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as make build and the images
	if out, err := build.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("building harnessfacts: %w\n%s", err, out))
	}
	runRoot = filepath.Join(tmp, "runs")
	keyFile := filepath.Join(tmp, "keys", "evidence-key.pem")
	key, err := evidence.LoadOrCreateKey(keyFile)
	if err != nil {
		return fail(err)
	}
	nodeKey = key.Public()
	// Antigravity's CLI is not in the registries: a stand-in plays it.
	standin, err := writeAntigravityStandIn(tmp)
	if err != nil {
		return fail(err)
	}
	registry[harnessv1.AdapterAntigravity] = adapters.NewAntigravity(adapters.Config{CLIDir: standin})

	scripts, err := fakeprovider.LoadFixtureScripts(filepath.Join(testenv.RepoRoot(), "fixtures"))
	if err != nil {
		return fail(err)
	}
	// This suite's own fixtures (testdata/NAME), served like the project's.
	own, err := fakeprovider.LoadFixtureScripts("testdata")
	if err != nil {
		return fail(err)
	}
	maps.Copy(scripts, own)
	plog := io.Discard
	if os.Getenv("HARNESSFACTS_TEST_LOG") != "" {
		plog = os.Stderr
	}
	provider = fakeprovider.New(fakeprovider.Options{Scripts: scripts, Log: plog})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	psrv := &http.Server{Handler: provider, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = psrv.Serve(ln) }()
	defer func() { _ = psrv.Close() }()
	providerURL = "http://" + ln.Addr().String()
	tlsSrv := httptest.NewUnstartedServer(provider)
	tlsSrv.Config.ReadHeaderTimeout = 10 * time.Second
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	providerTLSURL = tlsSrv.URL
	providerCAs = x509.NewCertPool()
	providerCAs.AddCert(tlsSrv.Certificate())
	// The same provider behind a certificate nobody trusts.
	untrusted, err := untrustedTLS(provider)
	if err != nil {
		return fail(err)
	}
	defer untrusted.Close()
	untrustedURL = untrusted.URL

	env, err = testenv.Start()
	if err != nil {
		return fail(err)
	}
	defer func() { _ = env.Stop() }()
	k8s, err = client.New(env.Config, client.Options{Scheme: env.Scheme})
	if err == nil {
		err = k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNS}})
	}
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, err := startStack(ctx, keyFile)
	if err != nil {
		return fail(err)
	}
	code := m.Run()
	cancel()
	stop()
	return code
}

// startStack runs the controller and this node's node-agent, each in its
// own manager, as the two Deployments of a cluster would.
func startStack(ctx context.Context, keyFile string) (func(), error) {
	copts := controllers.ManagerOptions(controllers.ManagerConfig{Scheme: env.Scheme})
	copts.Metrics, copts.HealthProbeBindAddress = metricsserver.Options{BindAddress: "0"}, "0"
	cmgr, err := ctrl.NewManager(env.Config, copts)
	if err != nil {
		return nil, err
	}
	if err := controllers.Setup(ctx, cmgr, controllers.Options{DeadlineGrace: 30 * time.Second, DefaultLeaseDuration: 40 * time.Second, MaxConcurrentReconciles: 8}, controllers.SuiteOptions{}); err != nil {
		return nil, err
	}
	// The node-agent reads Secret keys and fixtures through the
	// controller's run source, as on a cluster.
	secretPath, err := runsourcetest.Add(ctx, cmgr, k8s, leaseNS)
	if err != nil {
		return nil, err
	}
	controller, err := secretPath.Client(ctx, nodeName)
	if err != nil {
		return nil, err
	}
	api, err := nodeagent.NewAPI(env.Config, nodeName)
	if err != nil {
		return nil, err
	}
	// Two slots: the CLIs are heavy and this machine has two cores.
	agent, err := nodeagent.Setup(ctx, api, nodeagent.SetupOptions{
		NodeName: nodeName, LeaseNamespace: leaseNS, LeaseDuration: 10 * time.Second, Slots: 2,
		RunRoot: runRoot, InitBinary: executor.InitBinaryBeside(binary), Adapters: registry, Controller: controller, ProviderCAs: providerCAs,
		EvidenceKey: keyFile,
	})
	if err != nil {
		return nil, err
	}
	errs := make(chan error, 2)
	go func() { errs <- cmgr.Start(ctx) }()
	go func() { errs <- agent.Start(ctx) }()
	return func() { <-errs; <-errs }, nil
}

// Cred is a planted credential: a Secret key the run selects, delivered as
// Env or File.
type Cred struct {
	Env   string
	File  harnessv1.CredentialFile
	Value string
}

// Case is one agent run.
type Case struct {
	// Name names the run and its namespace (unique per test).
	Name    string
	Adapter harnessv1.Adapter
	// Fixture is a folder of fixtures/ with a provider-script.yaml.
	Fixture   string
	Transport harnessv1.MCPTransport
	Model     string
	ExtraArgs []string
	Creds     []Cred
	// MaxDecisions, when set, is the run's limits.maxDecisions.
	MaxDecisions int32
	// ProviderURL, when set, replaces the fake provider's.
	ProviderURL string
	// FixtureDir, when set, is the fixture's folder instead of
	// fixtures/<Fixture> (whose provider script still applies).
	FixtureDir string
	// Environment, when set, is the run's spec.environment.image.
	Environment string
	// Command is the exec adapter's command.
	Command []string
}

// throughGateway says whether the run's model requests go through the
// model gateway: an adapter with a model key it knows, and no login file.
func throughGateway(c Case) bool {
	var creds []adapters.Credential
	for _, cr := range c.Creds {
		creds = append(creds, adapters.Credential{Env: cr.Env, File: cr.File, Value: []byte(cr.Value)})
	}
	r, _ := adapters.GatewayRoute(harnessv1.AgentSpec{Adapter: c.Adapter, ProviderURL: providerTLSURL}, creds)
	return r != nil
}

// Outcome is what a run left behind, for the tests' assertions.
type Outcome struct {
	Run *harnessv1.HarnessRun
	// Evidence is the evidence ConfigMap's data, EvidenceBinary its
	// binaryData.
	Evidence       map[string]string
	EvidenceBinary map[string][]byte
	// Events are the messages and reasons of the run's Events.
	Events []string
	// Requests are the fake provider's records of this run's requests.
	Requests []fakeprovider.Record
	// Processes are the command lines and environments of every process
	// seen on the machine while the run was active, joined.
	Processes []string
	// Leaks say where a planted credential was seen in the sandbox while
	// the run was active: the environment or an open file of a process in
	// a run's cgroup, or a file of a run dir's home, workspace or temp dir.
	Leaks []string
	// Gateway: the run's model requests went through the model gateway.
	Gateway bool
}

// Unselected is a credential value every run's namespace also holds, in a
// Secret the run does not select: it must reach nothing.
const Unselected = "hf-unselected-9cbd27a1f04e6e35"

// Run runs c to its end and gathers its traces.
func Run(t *testing.T, c Case) *Outcome {
	t.Helper()
	ctx := context.Background()
	ns := "agents-" + c.Name
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	fixtureFolder := c.FixtureDir
	if fixtureFolder == "" {
		fixtureFolder = fixtureDir(c.Fixture)
	}
	fixtureConfigMap(t, ns, "fixture-"+c.Fixture, fixtureFolder)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns}, StringData: map[string]string{}}
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns},
		StringData: map[string]string{"OPENAI_API_KEY": Unselected, "ANTHROPIC_API_KEY": Unselected, "GEMINI_API_KEY": Unselected}}
	var creds []harnessv1.Credential
	for i, cr := range c.Creds {
		key := fmt.Sprintf("k%d", i)
		secret.StringData[key] = cr.Value
		creds = append(creds, harnessv1.Credential{
			SecretKeyRef: harnessv1.SecretKeySelector{Name: "creds", Key: key},
			Env:          cr.Env, File: cr.File,
		})
	}
	for _, s := range []*corev1.Secret{secret, other} {
		if err := k8s.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	gw := throughGateway(c)
	purl := providerURL
	if gw {
		purl = providerTLSURL
	}
	purl += "/s/" + c.Fixture
	if c.ProviderURL != "" {
		purl = c.ProviderURL
	}
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: c.Adapter, Model: c.Model, ExtraArgs: c.ExtraArgs,
				ProviderURL: purl, Credentials: creds},
			Fixture: harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "fixture-" + c.Fixture}},
			Network: harnessv1.NetworkSpec{Egress: harnessv1.EgressProviderOnly},
		},
	}
	if c.Transport != "" {
		run.Spec.MCP = &harnessv1.MCPSpec{Transport: c.Transport}
	}
	if c.MaxDecisions != 0 {
		run.Spec.Limits.MaxDecisions = c.MaxDecisions
	}
	if c.Environment != "" {
		run.Spec.Environment = &harnessv1.EnvironmentSpec{Image: c.Environment}
	}
	if len(c.Command) > 0 {
		run.Spec.Agent.Command = c.Command
	}
	before := len(provider.Requests())
	var planted []string
	for _, cr := range c.Creds {
		planted = append(planted, cr.Value)
	}
	watch := watchProcesses(planted)
	if err := k8s.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	got := waitTerminal(t, client.ObjectKeyFromObject(run))
	out := &Outcome{Run: got, Gateway: gw}
	out.Processes, out.Leaks = watch()
	requireCommandLinesClean(t, c, out)
	for _, r := range provider.Requests()[before:] {
		if r.Script == c.Fixture {
			out.Requests = append(out.Requests, r)
		}
	}
	if got.Status.Evidence != nil && got.Status.Evidence.ConfigMapName != "" {
		cm := &corev1.ConfigMap{}
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: got.Status.Evidence.ConfigMapName}, cm); err != nil {
			t.Fatal(err)
		}
		out.Evidence = cm.Data
		out.EvidenceBinary = cm.BinaryData
	}
	for _, e := range testenv.FinishedRunEvents(t, k8s, got) {
		out.Events = append(out.Events, e.Reason+": "+e.Note)
	}
	t.Logf("%s: phase %s verdict %s reason %s: %s", c.Name, got.Status.Phase, got.Status.Verdict, got.Status.Reason, got.Status.Message)
	return out
}

// RequirePass fails the test unless the run passed in bwrap with its
// artifacts collected.
func RequirePass(t *testing.T, o *Outcome) {
	t.Helper()
	st := o.Run.Status
	if st.Phase != harnessv1.RunSucceeded || st.Verdict != harnessv1.VerdictPass {
		t.Fatalf("phase %s verdict %s reason %s: %s\nprovider saw:\n%s\nagent output:\n%s",
			st.Phase, st.Verdict, st.Reason, st.Message, requests(o), tailOf(st))
	}
	if st.Sandbox == nil || st.Sandbox.Mode != "bwrap" {
		t.Errorf("sandbox %+v, want bwrap", st.Sandbox)
	}
	// Every CLI passes with the hardening on, as a node runs it: the
	// seccomp filter and the run dir on a tmpfs of limits.disk.
	if st.Sandbox == nil || !strings.Contains(st.Sandbox.Seccomp, "@sha256:") {
		t.Errorf("status.sandbox.seccomp does not name the filter: %+v", st.Sandbox)
	}
	if st.Limits == nil || st.Limits.Disk == nil || st.Limits.Disk.IsZero() {
		t.Errorf("status.limits has no disk limit: %+v", st.Limits)
	}
	if st.Evidence == nil || !strings.HasPrefix(st.Evidence.Digest, "sha256:") {
		t.Errorf("evidence %+v", st.Evidence)
	}
}

// RequireToken fails the test unless the agent called get_token over
// transport and the token reached its artifacts.
func RequireToken(t *testing.T, o *Outcome, transport harnessv1.MCPTransport) {
	t.Helper()
	m := o.Run.Status.MCP
	if m == nil || m.Transport != transport || m.Calls < 1 || !m.TokenSeen {
		t.Errorf("MCP status %+v, want get_token called over %s and the token seen", m, transport)
	}
}

// RequireArtifact fails the test unless the run collected path with the
// digest of want.
func RequireArtifact(t *testing.T, o *Outcome, path, want string) {
	t.Helper()
	for _, a := range o.Run.Status.Artifacts {
		if a.Path == path {
			if a.Rejected != "" || a.SHA256 != sha256Hex(want) {
				t.Errorf("artifact %+v, want %q (sha256 %s)", a, want, sha256Hex(want))
			}
			return
		}
	}
	t.Errorf("artifact %s not collected: %+v", path, o.Run.Status.Artifacts)
}

// RequireClean fails the test when a planted value shows anywhere a user or
// another process could read it: any command line on the machine, status,
// Events, evidence; when the unselected credential reached any process; and
// when the run's egress proxy refused any connection (a CLI tried to leave
// the machine).
func RequireClean(t *testing.T, o *Outcome, planted ...string) {
	t.Helper()
	status, err := json.Marshal(o.Run.Status)
	if err != nil {
		t.Fatal(err)
	}
	evidence, _ := json.Marshal(o.Evidence)
	for _, v := range append(planted, Unselected) {
		for where, text := range map[string]string{
			"status": string(status), "events": strings.Join(o.Events, "\n"), "evidence": string(evidence),
		} {
			if strings.Contains(text, v) {
				t.Errorf("planted value %q appears in the run's %s", v, where)
			}
		}
		for _, p := range o.Processes {
			cmdline, environ, _ := strings.Cut(p, ProcSep)
			if strings.Contains(cmdline, v) {
				t.Errorf("planted value %q appears on a command line: %q", v, cmdline)
			}
			if v == Unselected && strings.Contains(environ, v) {
				t.Errorf("the unselected credential reached a process: %q", cmdline)
			}
		}
	}
	for _, r := range o.Requests {
		if r.KeySHA256 == fakeprovider.KeyDigest(Unselected) {
			t.Errorf("the unselected credential reached the provider: %+v", r)
		}
	}
	if n := o.Run.Status.Network; n == nil || n.Denied != 0 {
		t.Errorf("network %+v: want egress ProviderOnly with no connection refused", n)
	}
}

// requireCommandLinesClean fails the test when a command line seen during
// the run (any host user can read /proc/PID/cmdline) carried one of the
// run's socket paths or the fixture's prompt. Antigravity's documented form
// takes the prompt only as -p PROMPT: its status note says so instead.
func requireCommandLinesClean(t *testing.T, c Case, o *Outcome) {
	t.Helper()
	dir := c.FixtureDir
	if dir == "" {
		dir = fixtureDir(c.Fixture)
	}
	fix, err := fixture.FromDir(dir, fixture.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	prompt := strings.TrimSpace(fix.Manifest.Prompt)
	if len(prompt) > 40 {
		prompt = prompt[:40]
	}
	var seenRun bool
	for _, p := range o.Processes {
		cmdline, _, _ := strings.Cut(p, ProcSep)
		shown := strings.ReplaceAll(cmdline, "\x00", " ")
		if strings.Contains(cmdline, runRoot+"/") {
			seenRun = true
		}
		if strings.Contains(cmdline, runRoot+"/") && strings.Contains(cmdline, "/sockets/") {
			t.Errorf("a run's socket path is on a command line: %q", shown)
		}
		if c.Adapter != harnessv1.AdapterAntigravity && strings.Contains(cmdline, prompt) {
			t.Errorf("the prompt is on a command line: %q", shown)
		}
	}
	if !seenRun && c.Adapter != harnessv1.AdapterAntigravity {
		t.Logf("no command line named the run root: the sampling may have missed the agent")
	}
}

// RequireKeyArrived fails the test unless a request to the provider carried
// value as its credential.
func RequireKeyArrived(t *testing.T, o *Outcome, value string) {
	t.Helper()
	for _, r := range o.Requests {
		if r.KeySHA256 == fakeprovider.KeyDigest(value) {
			return
		}
	}
	t.Errorf("no provider request carried the selected credential:\n%s", requests(o))
}

func requests(o *Outcome) string {
	var b strings.Builder
	for _, r := range o.Requests {
		fmt.Fprintf(&b, "  %s %s status=%d model=%s results=%d action=%s tool=%s auth=%s tools=%v err=%s\n",
			r.Method, r.Path, r.Status, r.Model, r.Results, r.Action, r.Tool, r.AuthHeader, r.Tools, r.Error)
	}
	return b.String()
}

// ProcSep separates a process's command line from its environment in
// Outcome.Processes.
const ProcSep = "\n\x01environ\x01\n"

// watchProcesses samples every process's command line and environment
// until the returned function is called, which returns what it saw, one
// entry per distinct process as cmdline + ProcSep + environ (each NUL-separated, as in /proc),
// and where a planted value was seen in a sandbox (see Outcome.Leaks).
func watchProcesses(planted []string) func() ([]string, []string) {
	var (
		mu    sync.Mutex
		seen  = map[string]bool{}
		leaks = map[string]bool{}
		done  = make(chan struct{})
		wg    sync.WaitGroup
	)
	leak := func(where string, b []byte) {
		for _, v := range planted {
			if v != "" && strings.Contains(string(b), v) {
				mu.Lock()
				leaks[where] = true
				mu.Unlock()
			}
		}
	}
	// scanRuns reads, in every process of a run's cgroup, its environment
	// and its open regular files, and every file of the run dirs' home,
	// workspace and temp dir.
	scanRuns := func() {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			if e.Name()[0] < '0' || e.Name()[0] > '9' {
				continue
			}
			cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
			if !strings.Contains(string(cg), "/run-") {
				continue
			}
			environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			leak("the environment of a sandboxed process", environ)
			fds, _ := os.ReadDir(filepath.Join("/proc", e.Name(), "fd"))
			for _, fd := range fds {
				target, err := os.Readlink(filepath.Join("/proc", e.Name(), "fd", fd.Name()))
				if err != nil || !strings.HasPrefix(target, "/") {
					continue
				}
				if fi, err := os.Stat(target); err == nil && fi.Mode().IsRegular() && fi.Size() < 8<<20 {
					b, _ := os.ReadFile(target)
					leak("the open file "+target+" of a sandboxed process", b)
				}
			}
		}
		dirs, _ := filepath.Glob(filepath.Join(runRoot, "harnessfacts-*"))
		for _, d := range dirs {
			for _, sub := range []string{fixture.RunHomeDir, fixture.RunWorkspaceDir, fixture.RunTmpDir} {
				_ = filepath.WalkDir(filepath.Join(d, sub), func(p string, de os.DirEntry, err error) error {
					if err != nil || !de.Type().IsRegular() {
						return nil
					}
					if fi, err := de.Info(); err == nil && fi.Size() < 8<<20 {
						b, _ := os.ReadFile(p)
						leak("the run's file "+strings.TrimPrefix(p, d+"/"), b)
					}
					return nil
				})
			}
		}
	}
	sample := func() {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			if e.Name()[0] < '0' || e.Name()[0] > '9' {
				continue
			}
			cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err != nil || len(cmd) == 0 {
				continue
			}
			environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			key := string(cmd) + ProcSep + string(environ)
			mu.Lock()
			seen[key] = true
			mu.Unlock()
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			sample()
			if len(planted) > 0 && n%10 == 0 {
				scanRuns()
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() ([]string, []string) {
		close(done)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		out := make([]string, 0, len(seen))
		for k := range seen {
			out = append(out, k)
		}
		var where []string
		for k := range leaks {
			where = append(where, k)
		}
		return out, where
	}
}

// fixtureConfigMap makes the ConfigMap kustomize's configMapGenerator would
// make from a fixture folder.
func fixtureConfigMap(t *testing.T, ns, name, dir string) {
	t.Helper()
	cm, err := hftesting.FixtureConfigMap(ns, name, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
}

func waitTerminal(t *testing.T, key types.NamespacedName) *harnessv1.HarnessRun {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	run := &harnessv1.HarnessRun{}
	for {
		if err := k8s.Get(context.Background(), key, run); err != nil {
			t.Fatal(err)
		}
		if run.Status.Phase.Terminal() {
			return run
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s did not finish: %+v", key, run.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func tailOf(st harnessv1.HarnessRunStatus) string {
	if st.Agent == nil {
		return "(no agent status)"
	}
	return st.Agent.OutputTail
}

// RequireUsage fails the test unless status.usage is what fake-provider
// reported to the requests that carried key: counted by the model gateway
// where the run went through it, else read from the CLI's own output. A
// run through the gateway must also have kept key out of the sandbox: no
// process's environment or open file and no file of a run dir held it
// while the run was active. A run not through it says why in its notes.
func RequireUsage(t *testing.T, o *Outcome, key string) {
	t.Helper()
	var want harnessv1.UsageStatus
	var n int64
	for _, r := range o.Requests {
		if r.KeySHA256 != fakeprovider.KeyDigest(key) {
			continue
		}
		n++
		want.InputTokens += r.Usage.Input
		want.OutputTokens += r.Usage.Output
		want.CacheReadTokens += r.Usage.CacheRead
		want.CacheWriteTokens += r.Usage.CacheWrite
	}
	u := o.Run.Status.Usage
	if u == nil || n == 0 || want.TotalTokens() == 0 {
		t.Fatalf("usage %+v, %d requests with the key", u, n)
	}
	wantSource := harnessv1.UsageFromAgentOutput
	if o.Gateway {
		wantSource = harnessv1.UsageFromGateway
		if u.Requests < n {
			t.Errorf("the gateway counted %d requests, the provider served %d with the run's key", u.Requests, n)
		}
		// Every answer carried its figures: a CLI that does not ask a
		// stream for them (Aider) has the gateway ask.
		if u.UncountedResponses != 0 {
			t.Errorf("the gateway could not count %d of the provider's answers", u.UncountedResponses)
		}
	}
	got := harnessv1.UsageStatus{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens}
	if u.Source != wantSource || !reflect.DeepEqual(got, want) {
		t.Errorf("usage %+v, want source %s and the provider's figures %+v", u, wantSource, want)
	}
	requireModels(t, o, key)
	// The signed receipt carries the same usage (the model asked for and
	// those that answered among it).
	var receipt evidence.Receipt
	if err := json.Unmarshal([]byte(o.Evidence[evidence.ReceiptName]), &receipt); err != nil || receipt.Usage == nil || !reflect.DeepEqual(*receipt.Usage, *u) {
		t.Errorf("the receipt's usage %+v (%v), status.usage %+v", receipt.Usage, err, u)
	}
	if !o.Gateway {
		if ag := o.Run.Status.Agent; ag == nil || !strings.Contains(strings.Join(ag.Notes, "\n"), "model gateway is off") {
			t.Errorf("a run outside the model gateway does not say so in its notes: %+v", ag)
		}
		// The key was delivered into the sandbox: the scan that must
		// find nothing in a gateway run must find it here, or it is blind.
		if len(o.Leaks) == 0 {
			t.Error("the sandbox scan did not see the credential this run delivered into the sandbox")
		}
		return
	}
	for _, l := range o.Leaks {
		t.Errorf("the run's key was in the sandbox: %s", l)
	}
	for _, p := range o.Processes {
		cmdline, environ, _ := strings.Cut(p, ProcSep)
		if strings.Contains(environ, key) {
			t.Errorf("the run's key is in the environment of %q", strings.ReplaceAll(cmdline, "\x00", " "))
		}
	}
}

// fixtureDir is the folder of fixture name: this suite's testdata/NAME, else
// the project's fixtures/NAME.
func fixtureDir(name string) string {
	if dir, err := filepath.Abs(filepath.Join("testdata", name)); err == nil {
		if _, err := os.Stat(filepath.Join(dir, "fixture.yaml")); err == nil {
			return dir
		}
	}
	return filepath.Join(testenv.RepoRoot(), "fixtures", name)
}

// untrustedTLS serves h over TLS on loopback with a fresh self-signed
// certificate for 127.0.0.1.
func untrustedTLS(h http.Handler) (*httptest.Server, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	return srv, nil
}
