//go:build linux

// Package e2e runs HarnessRuns end to end: a real kube-apiserver and etcd,
// the controller and a node-agent in this process, real bubblewrap, and the
// harnessfacts binary built from this tree for what runs inside the sandbox
// (sandbox-init, mcp-stdio) and for `harnessfacts run` and
// `harnessfacts evidence verify`, and harnessfacts-node-agent (the node-agent
// image's entry point) for the tests that start a node-agent process.
package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/controllers"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/runsourcetest"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
	nodeagent "github.com/harnessfacts/harnessfacts/node-agent"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/livelog"
	"github.com/harnessfacts/harnessfacts/test/oci"
)

const (
	leaseNS  = "harnessfacts-system"
	nodeName = "e2e-node"
	// mainNodeLabel marks this process's node-agent, for tests that must
	// not land on a node another test started (and killed).
	mainNodeLabel = "harnessfacts.io/e2e-node"
)

var (
	env    *testenv.Env
	k8s    client.Client
	binary string // the harnessfacts binary built from this tree
	// nodeAgentBinary is harnessfacts-node-agent, built beside it: the
	// node-agent image's entry point, which the tests that start a
	// node-agent process run.
	nodeAgentBinary string
	runRoot         string
	// evidenceKeyFile is this node-agent's receipt signing key.
	evidenceKeyFile string
	// evidenceRegistry is a real OCI registry on loopback, where the
	// controller stores every finished run's evidence (evidenceRepository).
	evidenceRegistry   *oci.Registry
	evidenceRepository string
	// secretPath is the controller's run source, where node-agents read
	// runs' Secret keys and fixture ConfigMaps.
	secretPath *runsourcetest.Path
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
	if _, err := exec.LookPath("bwrap"); err != nil {
		fmt.Fprintln(os.Stderr, "bwrap is not installed: run `make test`, which installs Debian's bubblewrap package")
		return 1
	}
	tmp, err := os.MkdirTemp("", "harnessfacts-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	// The sandboxed agent runs as an unprivileged user: it must be able to
	// reach and execute the binary.
	if err := os.Chmod(tmp, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	binary = filepath.Join(tmp, "harnessfacts")
	nodeAgentBinary = filepath.Join(tmp, "harnessfacts-node-agent")
	// With the sandboxes' init program beside it, as make build and the
	// images install them (executor.InitBinaryBeside finds it).
	build := exec.Command("go", "build", "-o", tmp+"/", "./cmd/harnessfacts", "./cmd/harnessfacts-full", "./cmd/harnessfacts-node-agent", "./cmd/harnessfacts-sandbox-init")
	build.Dir = testenv.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as make build and the images
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building harnessfacts: %v\n%s", err, out)
		return 1
	}
	runRoot = filepath.Join(tmp, "runs")
	evidenceKeyFile = filepath.Join(tmp, "keys", "evidence-key.pem")

	if evidenceRegistry, err = oci.StartRegistry("127.0.0.1"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = evidenceRegistry.Close() }()
	evidenceRepository = evidenceRegistry.Host + "/harnessfacts/evidence"

	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	k8s, err = client.New(env.Config, client.Options{Scheme: env.Scheme})
	if err == nil {
		err = k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNS}})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, err := startStack(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	cancel()
	stop()
	return code
}

// startStack runs the controller and this node's node-agent, each in its
// own manager, as the two Deployments of a cluster would.
func startStack(ctx context.Context) (func(), error) {
	copts := controllers.ManagerOptions(controllers.ManagerConfig{Scheme: env.Scheme})
	copts.Metrics, copts.HealthProbeBindAddress = metricsserver.Options{BindAddress: "0"}, "0"
	cmgr, err := ctrl.NewManager(env.Config, copts)
	if err != nil {
		return nil, err
	}
	// The operator's signing key Secret the run source is told of when a
	// test switches it on (TestOperatorKeySignsInsteadOfTheNodes): the
	// controller's store gate knows it the way --evidence-signing-key-secret
	// tells both.
	opKey := &types.NamespacedName{Namespace: leaseNS, Name: operatorKeySecret}
	if err := controllers.Setup(ctx, cmgr, controllers.Options{DeadlineGrace: 30 * time.Second, DefaultLeaseDuration: 40 * time.Second, MaxConcurrentReconciles: 16,
		EvidenceRepository: evidenceRepository, EvidenceSigningKeySecret: opKey}, controllers.SuiteOptions{}); err != nil {
		return nil, err
	}
	if secretPath, err = runsourcetest.Add(ctx, cmgr, k8s, leaseNS); err != nil {
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
	// The node-agent's live-output server, as `harnessfacts node-agent`
	// runs it, on loopback.
	hub := livelog.NewHub()
	live, err := livelog.Listen(ctx, hub, livelog.Config{BindAddress: "127.0.0.1:0", AdvertiseHost: "127.0.0.1",
		Reviews: api.Client, CAReader: api.Client, Log: ctrl.Log.WithName("live-output")})
	if err != nil {
		return nil, err
	}
	agent, err := nodeagent.Setup(ctx, api, nodeagent.SetupOptions{
		NodeName: nodeName, LeaseNamespace: leaseNS, LeaseDuration: 8 * time.Second, Slots: 2,
		RunRoot: runRoot, InitBinary: executor.InitBinaryBeside(binary), Adapters: adapters.Default(),
		ExtraLabels: map[string]string{mainNodeLabel: "main"}, Controller: controller,
		Live: hub, LiveEndpoint: &nodeagent.LiveEndpoint{BaseURL: live.BaseURL, CertificateSHA256: live.CertificateSHA256},
		EvidenceKey: evidenceKeyFile,
	})
	if err != nil {
		return nil, err
	}
	errs := make(chan error, 3)
	go func() { errs <- cmgr.Start(ctx) }()
	go func() { errs <- agent.Start(ctx) }()
	go func() { errs <- live.Server.Serve(ctx, live.Listener) }()
	return func() { <-errs; <-errs; <-errs }, nil
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
	deadline := time.Now().Add(2 * time.Minute)
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
		time.Sleep(100 * time.Millisecond)
	}
}

func helloRun(ns string, transport harnessv1.MCPTransport) *harnessv1.HarnessRun {
	return &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "hello-" + strings.ToLower(string(transport)), Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent:   harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"sh", "../fixture/agent.sh"}},
			Fixture: harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "fixture-hello"}},
			MCP:     &harnessv1.MCPSpec{Transport: transport},
		},
	}
}

func newNamespace(t *testing.T, name string) string {
	t.Helper()
	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestHelloPassesWithEvidence(t *testing.T) {
	ns := newNamespace(t, "e2e-hello")
	fixtureConfigMap(t, ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	run := helloRun(ns, harnessv1.MCPTransportHTTP)
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	got := waitTerminal(t, client.ObjectKeyFromObject(run))
	st := got.Status
	if st.Phase != harnessv1.RunSucceeded || st.Verdict != harnessv1.VerdictPass {
		t.Fatalf("phase %s verdict %s: %s\nagent output:\n%s", st.Phase, st.Verdict, st.Message, tailOf(st))
	}
	if st.NodeName != nodeName || st.Sandbox == nil || st.Sandbox.Mode != "bwrap" {
		t.Errorf("ran on %q in %+v, want %s in bwrap", st.NodeName, st.Sandbox, nodeName)
	}
	if st.MCP == nil || !st.MCP.TokenSeen || st.MCP.Calls < 1 {
		t.Errorf("MCP status %+v: want the token issued and seen", st.MCP)
	}
	if len(st.Artifacts) != 2 {
		t.Fatalf("artifacts %+v, want greeting.txt and token.txt", st.Artifacts)
	}
	for _, a := range st.Artifacts {
		if a.Rejected != "" || len(a.SHA256) != 64 || a.Size == 0 {
			t.Errorf("artifact %+v: want collected with a digest", a)
		}
	}
	if len(st.Checks) != 2 || !st.Checks[0].Passed || !st.Checks[1].Passed {
		t.Errorf("checks %+v, want both passed", st.Checks)
	}
	if st.Evidence == nil || !strings.HasPrefix(st.Evidence.Digest, "sha256:") || st.Evidence.ConfigMapName == "" {
		t.Fatalf("evidence %+v", st.Evidence)
	}

	// The evidence verifies against what is stored, through the CLI a user has.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "evidence", "verify", "--kubeconfig", kubeconfig, "-n", ns, run.Name).CombinedOutput()
	if err != nil {
		t.Fatalf("harnessfacts evidence verify: %v\n%s", err, out)
	}

	// Events tell the story: Succeeded (and, before it, Running when the
	// attempt lasted over a second: TestFixtureLimitsApplyWhenTheRunSetsNone
	// sees one).
	events := eventsv1.EventList{Items: testenv.FinishedRunEvents(t, k8s, got)}
	var reasons []string
	for _, e := range events.Items {
		if e.Regarding.Name == run.Name {
			reasons = append(reasons, e.Reason)
		}
	}
	if !contains(reasons, "Succeeded") {
		t.Errorf("events %v, want Succeeded among them", reasons)
	}

	// Nothing of the run is left on the node.
	waitNoRunDirs(t)
}

func TestHelloOverStdio(t *testing.T) {
	ns := newNamespace(t, "e2e-stdio")
	fixtureConfigMap(t, ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	run := helloRun(ns, harnessv1.MCPTransportStdio)
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	st := waitTerminal(t, client.ObjectKeyFromObject(run)).Status
	if st.Verdict != harnessv1.VerdictPass || st.MCP == nil || !st.MCP.TokenSeen || st.MCP.Transport != harnessv1.MCPTransportStdio {
		t.Fatalf("verdict %s, MCP %+v: %s\n%s", st.Verdict, st.MCP, st.Message, tailOf(st))
	}
}

// openDir is a temporary folder the sandbox's unprivileged user can pass
// through, as a node's run root must be.
func openDir(t testing.TB) string {
	t.Helper()
	return openDirIn(t, "")
}

// openDirIn is openDir below parent ("": the temporary folder).
func openDirIn(t testing.TB, parent string) string {
	t.Helper()
	d, err := os.MkdirTemp(parent, "harnessfacts-e2e-")
	if err == nil {
		err = os.Chmod(d, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func TestLocalRunWithoutACluster(t *testing.T) {
	evidence := filepath.Join(t.TempDir(), "evidence")
	runs := filepath.Join(openDir(t), "runs")
	cmd := exec.Command(binary, "run", "-f", filepath.Join(testenv.RepoRoot(), "fixtures", "hello", "run.yaml"),
		"--evidence", evidence, "--run-root", runs)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("harnessfacts run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	for _, want := range []string{"phase: Succeeded", "verdict: Pass", "tokenSeen: true", "digest: sha256:"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the printed status lacks %q:\n%s", want, stdout.String())
		}
	}
	out, err := exec.Command(binary, "evidence", "verify", evidence).CombinedOutput()
	if err != nil {
		t.Fatalf("harnessfacts evidence verify %s: %v\n%s", evidence, err, out)
	}
	if entries, _ := os.ReadDir(runs); len(entries) != 0 {
		t.Errorf("run dirs left behind in %s: %v", runs, entries)
	}
}

func TestLocalRunRefusesAnUnreachableRunRoot(t *testing.T) {
	// 0700: the agent's user cannot pass through (short: t.TempDir's paths
	// are too long for a run root's unix sockets).
	closed, err := os.MkdirTemp("", "hf-closed-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(closed) })
	out, err := exec.Command(binary, "run", "-f", filepath.Join(testenv.RepoRoot(), "fixtures", "hello", "run.yaml"),
		"--run-root", filepath.Join(closed, "runs")).CombinedOutput()
	// The uid is the local runs' range's first (the root of the range is
	// checked once, for all of its ids).
	if err == nil || !strings.Contains(string(out), "is not searchable by uid 60128") || !strings.Contains(string(out), "chmod o+x") {
		t.Fatalf("got %v:\n%s\nwant a refusal that says how to fix it", err, out)
	}
}

func TestLocalRunRefusesAnInvalidRunLikeTheAPIServer(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "run.yaml")
	spec := "apiVersion: harnessfacts.io/v1alpha1\nkind: HarnessRun\nmetadata: {name: bad}\n" +
		"spec:\n  agent: {adapter: codex, command: [codex]}\n  fixture: {configMapRef: {name: x}}\n  limits: {episodeSeconds: 10, probeSeconds: 60}\n"
	if err := os.WriteFile(bad, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "run", "-f", bad).CombinedOutput()
	for _, want := range []string{"agent.command is only allowed with agent.adapter exec", "limits.probeSeconds must not be longer than limits.episodeSeconds"} {
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("got %v:\n%s\nwant a refusal saying %q", err, out, want)
		}
	}
}

func tailOf(st harnessv1.HarnessRunStatus) string {
	if st.Agent == nil {
		return "(no agent status)"
	}
	return st.Agent.OutputTail
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func waitNoRunDirs(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		entries, _ := os.ReadDir(runRoot)
		// The node's cache of git and OCI fixtures outlives runs on
		// purpose (once a sources test made it); it is not a run's.
		entries = slices.DeleteFunc(entries, func(e os.DirEntry) bool { return e.Name() == executor.FixtureCacheDir })
		if len(entries) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Fatalf("run dirs left behind: %v", names)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestBadFixtureEndsTheRunWithAReason(t *testing.T) {
	ns := newNamespace(t, "e2e-badfixture")
	// A file name longer than a file system allows, which only an archive
	// can carry (a ConfigMap key has at most 253 characters): found when
	// the fixture is read, not as ENAMETOOLONG when the run dir is made
	// (a message naming the node's run root).
	var longName bytes.Buffer
	tw := tar.NewWriter(&longName)
	for name, body := range map[string]string{"fixture.yaml": "prompt: p\n", "workspace/" + strings.Repeat("L", 300): "x"} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		data   map[string]string
		binary map[string][]byte
		want   string
	}{
		"no-manifest":   {data: map[string]string{"workspace__a.txt": "x"}, want: "fixture.yaml"},
		"invalid-yaml":  {data: map[string]string{"fixture.yaml": "prompt: [unclosed"}, want: "fixture.yaml"},
		"unknown-field": {data: map[string]string{"fixture.yaml": "prompt: p\ncolour: red\n"}, want: "unknown field"},
		"escape":        {data: map[string]string{"fixture.yaml": "prompt: p\n", "workspace______etc__passwd": "x"}, want: "workspace"},
		"long-name":     {binary: map[string][]byte{"fixture.tar": longName.Bytes()}, want: "300 bytes long, more than the 255"},
	}
	for name, tc := range cases {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fixture-" + name, Namespace: ns}, Data: tc.data, BinaryData: tc.binary}
		if err := k8s.Create(context.Background(), cm); err != nil {
			t.Fatal(err)
		}
		run := &harnessv1.HarnessRun{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: harnessv1.HarnessRunSpec{
				Agent:   harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}},
				Fixture: harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: cm.Name}},
			},
		}
		if err := k8s.Create(context.Background(), run); err != nil {
			t.Fatal(err)
		}
		st := waitTerminal(t, client.ObjectKeyFromObject(run)).Status
		if st.Phase != harnessv1.RunFailed || st.FailureClass != harnessv1.FailureInfrastructure || st.Reason != harnessv1.ReasonBadFixture ||
			!strings.Contains(st.Message, tc.want) {
			t.Errorf("%s: %s/%s/%s %q, want Failed/Infrastructure/BadFixture naming %q", name, st.Phase, st.FailureClass, st.Reason, st.Message, tc.want)
		}
	}
	waitNoRunDirs(t)
}

// TestCredentialLongerThanAnEnvironmentString: Linux takes at most 128 KiB
// for one string of a program's environment ("NAME=value" and its NUL). A
// credential at that bound reaches the agent whole; one byte more is refused
// with a reason before the sandbox starts. Before, bwrap could not start
// sandbox-init (E2BIG) and the run ended "the agent exited with code 1",
// the agent's failure.
func TestCredentialLongerThanAnEnvironmentString(t *testing.T) {
	ns := newNamespace(t, "e2e-longcred")
	const env = "LONG_KEY"
	most := 128<<10 - len(env) - 2
	if err := k8s.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "keys", Namespace: ns},
		Data: map[string][]byte{"most": bytes.Repeat([]byte("k"), most), "over": bytes.Repeat([]byte("k"), most+1)}}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"most", "over"} {
		run := &harnessv1.HarnessRun{
			ObjectMeta: metav1.ObjectMeta{Name: key, Namespace: ns},
			Spec: harnessv1.HarnessRunSpec{
				Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"sh", "-c", `echo "length=${#LONG_KEY}"`},
					Credentials: []harnessv1.Credential{{SecretKeyRef: harnessv1.SecretKeySelector{Name: "keys", Key: key}, Env: env}}},
				Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: go\n"}}},
			},
		}
		if err := k8s.Create(context.Background(), run); err != nil {
			t.Fatal(err)
		}
		st := waitTerminal(t, client.ObjectKeyFromObject(run)).Status
		switch key {
		case "most":
			if st.Verdict != harnessv1.VerdictPass || !strings.Contains(tailOf(st), fmt.Sprintf("length=%d", most)) {
				t.Errorf("a credential of %d bytes: %s/%s %q, output %q", most, st.Verdict, st.Reason, st.Message, tailOf(st))
			}
		case "over":
			if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonCredentialsUnavailable ||
				!strings.Contains(st.Message, fmt.Sprintf("credential keys/over is %d bytes, more than the environment variable LONG_KEY can carry (%d bytes", most+1, most)) {
				t.Errorf("a credential of %d bytes: %s/%s %q", most+1, st.Phase, st.Reason, st.Message)
			}
		}
	}
	waitNoRunDirs(t)
}

// TestCredentialsAreRedactedEverywhere plants a credential and has the agent
// print it raw, byte by byte, base64-encoded and JSON-escaped, and write it
// into an artifact; none of it may reach status, Events or the evidence.
func TestCredentialsAreRedactedEverywhere(t *testing.T) {
	ns := newNamespace(t, "e2e-redact")
	const secret = `sk-plant3d-"cred"-Zq81xV0pLmN7` // quotes make the JSON-escaped form differ
	if err := k8s.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "keys", Namespace: ns},
		Data: map[string][]byte{"api": []byte(secret)}}); err != nil {
		t.Fatal(err)
	}
	script := `set -eu
printf 'raw: %s\n' "$PLANTED_KEY"
printf '%s' "$PLANTED_KEY" | while IFS= read -r -n1 c 2>/dev/null || [ -n "${c:-}" ]; do printf '%s' "$c"; c=; done
i=0; while [ $i -lt ${#PLANTED_KEY} ]; do printf '%s' "$(printf '%s' "$PLANTED_KEY" | cut -c$((i+1)))"; i=$((i+1)); done; echo
printf 'b64: %s\n' "$(printf '%s' "$PLANTED_KEY" | base64 -w0)"
printf 'json: {"key":"%s"}\n' "$(printf '%s' "$PLANTED_KEY" | sed 's/"/\\"/g')"
printf '%s\n' "$PLANTED_KEY" > leak.txt
exit 3`
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "leaky", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"bash", "-c", script},
				Credentials: []harnessv1.Credential{{SecretKeyRef: harnessv1.SecretKeySelector{Name: "keys", Key: "api"}, Env: "PLANTED_KEY"}}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
				"fixture.yaml": "prompt: leak it\nartifacts: [leak.txt]\n"}}},
		},
	}
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	got := waitTerminal(t, client.ObjectKeyFromObject(run))
	if got.Status.Agent == nil || got.Status.Agent.ExitCode == nil || *got.Status.Agent.ExitCode != 3 {
		t.Fatalf("the agent did not run as scripted: %+v %s", got.Status.Agent, got.Status.Message)
	}
	if !strings.Contains(got.Status.Agent.OutputTail, "[REDACTED") {
		t.Errorf("the output tail shows no redaction:\n%s", got.Status.Agent.OutputTail)
	}

	forms := []string{secret, base64Std(secret), strings.ReplaceAll(secret, `"`, `\"`), "sk-plant3d"}
	var haystacks []string
	statusYAML, _ := yamlOf(got.Status)
	haystacks = append(haystacks, statusYAML)
	events := eventsv1.EventList{Items: testenv.FinishedRunEvents(t, k8s, got)}
	for _, e := range events.Items {
		haystacks = append(haystacks, e.Note)
	}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: got.Status.Evidence.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	for _, v := range cm.Data {
		haystacks = append(haystacks, v)
	}
	for _, v := range cm.BinaryData {
		haystacks = append(haystacks, string(v))
	}
	for _, h := range haystacks {
		for _, f := range forms {
			if strings.Contains(h, f) {
				t.Errorf("the credential (as %q) reached status, an Event or the evidence:\n%s", f, h)
			}
		}
	}
	// The redacted log still says what happened around the secret.
	if !strings.Contains(cm.Data["output.log"], "raw: [REDACTED") || !strings.Contains(cm.Data["output.log"], "b64: [REDACTED") {
		t.Errorf("output.log:\n%s", cm.Data["output.log"])
	}
	waitNoRunDirs(t)
}

func base64Std(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func yamlOf(v any) (string, error) {
	b, err := yaml.Marshal(v)
	return string(b), err
}

// TestNodeAgentKilledMidRun kills a node-agent (a real process) while its
// agent runs, starts another on the same node, and expects a terminal
// status, no surviving agent process and no run dir left.
func TestNodeAgentKilledMidRun(t *testing.T) {
	ns := newNamespace(t, "e2e-kill")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	runs := filepath.Join(openDir(t), "runs")
	// Registered first, so it runs after the node-agents are killed: a
	// HarnessNode whose Lease is still fresh would take later tests' runs
	// and then lose them.
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &harnessv1.HarnessNode{ObjectMeta: metav1.ObjectMeta{Name: "kill-node"}})
	})
	controllerFlags, err := secretPath.Flags(context.Background(), "kill-node", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	start := func() *exec.Cmd {
		cmd := exec.Command(nodeAgentBinary, append([]string{"node-agent", "--kubeconfig", kubeconfig, "--node-name", "kill-node",
			"--lease-namespace", leaseNS, "--lease-duration", "8s", "--slots", "1", "--run-root", runs,
			"--node-labels", "harnessfacts.io/e2e=kill", "--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--protect-kernel-defaults"}, controllerFlags...)...)
		var logs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("node-agent logs:\n%s", logs.String())
			}
		})
		return cmd
	}
	first := start()

	const marker = "harnessfacts-e2e-kill-marker"
	run := &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "killed", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec,
				Command: []string{"sh", "-c", "sleep 300; : " + marker}},
			Fixture:      harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: wait\n"}}},
			NodeSelector: map[string]string{"harnessfacts.io/e2e": "kill"},
		},
	}
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(run)
	deadline := time.Now().Add(time.Minute)
	for {
		got := &harnessv1.HarnessRun{}
		if err := k8s.Get(context.Background(), key, got); err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase == harnessv1.RunRunning && len(processesWith(marker)) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run never started its agent: %+v", got.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if out, err := exec.Command("ps", "-eo", "pid,ppid,user,cmd").CombinedOutput(); err == nil {
		t.Logf("before the kill:\n%s", grepLines(string(out), marker))
	}
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	// bwrap --die-with-parent normally takes the agent down with its
	// node-agent; a node-agent killed while a sandbox was being set up can
	// leave one behind. Plant such a leftover, deterministically: a process
	// working in an abandoned run dir. The next node-agent must kill it.
	abandoned := filepath.Join(runs, "harnessfacts-gone-1-000000000000")
	if err := os.MkdirAll(abandoned, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(abandoned, fixture.LockFileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	leftover := exec.Command("sh", "-c", "sleep 300; : "+marker)
	leftover.Dir = abandoned
	leftover.Env = []string{"HARNESSFACTS_RUN=" + abandoned}
	if err := leftover.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = leftover.Wait() }()

	start() // the DaemonSet restarts the node-agent
	st := waitTerminal(t, key).Status
	if pids := processesWith(marker); len(pids) > 0 {
		t.Errorf("processes of the killed node-agent's runs survived its restart: %v", pids)
	}
	if st.Phase != harnessv1.RunFailed || st.FailureClass != harnessv1.FailureInfrastructure || st.Reason != harnessv1.ReasonNodeAgentRestarted {
		t.Errorf("status %s/%s/%s %q, want Failed/Infrastructure/NodeAgentRestarted", st.Phase, st.FailureClass, st.Reason, st.Message)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		entries, _ := os.ReadDir(runs)
		if len(entries) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed attempt's run dir is left: %v", entries)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processesWith lists the pids whose command line contains s.
func processesWith(s string) []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(s)) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// `harnessfacts run` begins its sandbox preflight from its init (package
// prestart), before its flags are read: a run refused for them, or for its
// run file, leaves nothing of that preflight (its run dir, its /dev) in the
// temporary folder.
func TestLocalRunRefusedEarlyLeavesNoPreflight(t *testing.T) {
	base := openDir(t)
	tmp := filepath.Join(base, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	hello := filepath.Join(testenv.RepoRoot(), "fixtures", "hello", "run.yaml")
	runs := filepath.Join(base, "runs") // the run root, which is kept, elsewhere
	for _, args := range [][]string{
		{"run", "-f", hello, "--run-root", runs, "--no-such-flag"},
		{"run", "-f", filepath.Join(base, "missing.yaml"), "--run-root", runs},
		{"run", "--run-root", runs},
	} {
		for range 3 {
			cmd := exec.Command(binary, args...)
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
			if out, err := cmd.CombinedOutput(); err == nil {
				t.Fatalf("%v: not refused:\n%s", args, out)
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Fatalf("%v left %v in its TMPDIR", args, left)
			}
		}
	}
}
