package executor

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// inlineSources reads only inline fixtures; a test's runs select no Secret.
type inlineSources struct{}

func (inlineSources) Fixture(_ context.Context, run *harnessv1.HarnessRun, lim fixture.Limits) (*fixture.Fixture, error) {
	return fixture.FromInline(run.Spec.Fixture.Inline.Files, lim)
}

func (inlineSources) SecretKey(context.Context, *harnessv1.HarnessRun, harnessv1.SecretKeySelector) ([]byte, error) {
	return nil, errors.New("no Secret here")
}

// rootRunRoot skips a test that needs what the node-agent's executor has
// (root, for per-run uids and cgroups, and bwrap), and returns a run root
// removed after it: short, as the runs' socket paths must be.
func rootRunRoot(t *testing.T, prefix string) string {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not installed: `make test` installs Debian's bubblewrap package")
	}
	if os.Geteuid() != 0 {
		t.Skip("the node-agent's executor runs as root (per-run uids, cgroups)")
	}
	root, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	return root
}

// startedAgents counts the agents an executor started, per run.
type startedAgents struct {
	mu      sync.Mutex
	started map[string]int
	steps   []string
}

func (s *startedAgents) Step(_ *harnessv1.HarnessRun, step string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, step)
}

func (s *startedAgents) AgentStarted(run *harnessv1.HarnessRun, _ sandbox.Mode, _ time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started[run.Name]++
}

// TestPoliciesAreAskedLastBeforeTheAgent: the executor asks the
// HarnessPolicies (Options.PolicyViolations) after everything else is
// ready and before the agent starts. A policy made or tightened since the
// claim refuses the run there, naming the rule, without a verdict, and its
// agent never starts; so does a policy that cannot be read. A run no policy
// refuses runs. Real bwrap.
func TestPoliciesAreAskedLastBeforeTheAgent(t *testing.T) {
	root := rootRunRoot(t, "hf-policy-")
	var mu sync.Mutex
	answer := map[string]func() ([]string, error){
		"tightened": func() ([]string, error) {
			return []string{"HarnessPolicy codex-only rule adapters: adapter exec is not allowed"}, nil
		},
		"unreadable": func() ([]string, error) { return nil, errors.New("the cache is gone") },
		"allowed":    func() ([]string, error) { return nil, nil },
	}
	asked := map[string]bool{}
	obs := &startedAgents{started: map[string]int{}}
	e, err := New(Options{Sources: inlineSources{}, RunRoot: root, InitBinary: "/bin/true", Observer: obs,
		PolicyViolations: func(_ context.Context, run *harnessv1.HarnessRun) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			asked[run.Name] = true
			return answer[run.Name]()
		}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(name string) *Outcome {
		return e.Execute(context.Background(), &harnessv1.HarnessRun{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant", UID: types.UID("uid-" + name)},
			Spec: harnessv1.HarnessRunSpec{
				Agent:   harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}},
				Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: nothing\n"}}},
				Network: harnessv1.NetworkSpec{Egress: harnessv1.EgressNone},
			},
			Status: harnessv1.HarnessRunStatus{Attempt: 1},
		})
	}
	for name, want := range map[string]string{
		"tightened":  "refused by the namespace's HarnessPolicies just before the agent started: HarnessPolicy codex-only rule adapters: adapter exec is not allowed",
		"unreadable": "could not be read before the agent started, so the run is refused: the cache is gone",
	} {
		st := run(name).Status
		if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonPolicyViolation || st.Verdict != "" || !strings.Contains(st.Message, want) {
			t.Errorf("%s: %s %s %q (verdict %q), want Failed PolicyViolation saying %q and no verdict", name, st.Phase, st.Reason, st.Message, st.Verdict, want)
		}
	}
	if st := run("allowed").Status; st.Verdict != harnessv1.VerdictPass {
		t.Errorf("a run no policy refuses: %s %s %s: %s", st.Phase, st.Verdict, st.Reason, st.Message)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for name, n := range map[string]int{"tightened": 0, "unreadable": 0, "allowed": 1} {
		if !asked[name] || obs.started[name] != n {
			t.Errorf("%s: policies asked %v, agent started %d times; want asked and %d", name, asked[name], obs.started[name], n)
		}
	}
	// A run dir may wait for sandboxes starting beside it (graveyard);
	// Close takes what waits.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("left in the run root: %v", entries)
	}
}

// secretSources is inlineSources whose Secrets all hold one key.
type secretSources struct{ inlineSources }

func (secretSources) SecretKey(context.Context, *harnessv1.HarnessRun, harnessv1.SecretKeySelector) ([]byte, error) {
	return []byte("sk-ant-api03-policy-test-0123456789"), nil
}

// TestModelLimitsRefuseRunsWithoutTheGateway: a policy's model limits
// (gateway.maxTokensPerRun and maxRequestsPerRun, a spend budget) hold only
// for the requests the model gateway carries. A run whose credentials would
// reach the agent without it (here the exec adapter, which no gateway
// serves) is refused under such a policy, naming the rules, before its
// agent starts; a run without credentials, or under no such policy, runs.
// Real bwrap.
func TestModelLimitsRefuseRunsWithoutTheGateway(t *testing.T) {
	root := rootRunRoot(t, "hf-limits-")
	limits := map[string]harnessv1.GatewayLimits{
		"tokens": {MaxTokens: 1000, Sources: []string{"HarnessPolicy p gateway.maxTokensPerRun"}},
		"budget": {Budgets: []string{"HarnessPolicy p spend.namespaceTokens"}},
	}
	obs := &startedAgents{started: map[string]int{}}
	e, err := New(Options{Sources: secretSources{}, RunRoot: root, InitBinary: "/bin/true", Observer: obs,
		GatewayLimits: func(_ context.Context, run *harnessv1.HarnessRun) (harnessv1.GatewayLimits, error) {
			return limits[run.Labels["limits"]], nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(name, lim string, creds bool) harnessv1.HarnessRunStatus {
		r := &harnessv1.HarnessRun{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant", UID: types.UID("uid-" + name), Labels: map[string]string{"limits": lim}},
			Spec: harnessv1.HarnessRunSpec{
				Agent:   harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}},
				Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: nothing\n"}}},
				Network: harnessv1.NetworkSpec{Egress: harnessv1.EgressProviderOnly},
			},
			Status: harnessv1.HarnessRunStatus{Attempt: 1},
		}
		if creds {
			r.Spec.Agent.Credentials = []harnessv1.Credential{{SecretKeyRef: harnessv1.SecretKeySelector{Name: "keys", Key: "anthropic"}, Env: "MY_KEY"}}
		}
		return e.Execute(context.Background(), r).Status
	}
	for name, want := range map[string]string{"tokens": "HarnessPolicy p gateway.maxTokensPerRun limit model use", "budget": "HarnessPolicy p spend.namespaceTokens limit model use"} {
		st := run("refused-"+name, name, true)
		if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonPolicyViolation || st.Verdict != "" || !strings.Contains(st.Message, want) {
			t.Errorf("%s: %s %s %q (verdict %q), want Failed PolicyViolation saying %q", name, st.Phase, st.Reason, st.Message, st.Verdict, want)
		}
	}
	if st := run("no-credentials", "tokens", false); st.Verdict != harnessv1.VerdictPass {
		t.Errorf("a run without credentials under a token limit: %s %s %s: %s", st.Phase, st.Verdict, st.Reason, st.Message)
	}
	if st := run("no-limits", "", true); st.Verdict != harnessv1.VerdictPass {
		t.Errorf("a run with credentials under no limit: %s %s %s: %s", st.Phase, st.Verdict, st.Reason, st.Message)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for name, n := range map[string]int{"refused-tokens": 0, "refused-budget": 0, "no-credentials": 1, "no-limits": 1} {
		if obs.started[name] != n {
			t.Errorf("%s: agent started %d times, want %d", name, obs.started[name], n)
		}
	}
}

// TestModelLimitRefusal: under model limits, a run through the gateway is
// refused when a credential other than the gateway's key reaches the agent
// and the run may reach hosts of its own (a second model key, its
// provider); a run without allowHosts, or whose only credentials are the
// gateway's key and its scope, is not.
func TestModelLimitRefusal(t *testing.T) {
	lim := harnessv1.GatewayLimits{MaxTokens: 1000, Sources: []string{"HarnessPolicy p gateway.maxTokensPerRun"}}
	key := adapters.Credential{Env: "ANTHROPIC_API_KEY", Value: []byte(adapters.GatewayPlaceholder)}
	spare := adapters.Credential{Env: "SPARE_KEY", Value: []byte("sk-ant-api03-spare")}
	scope := adapters.Credential{Env: "OPENAI_PROJECT", Value: []byte("proj_1")}
	route := func(creds ...adapters.Credential) *adapters.ModelRoute {
		return &adapters.ModelRoute{Credentials: creds}
	}
	for name, c := range map[string]struct {
		lim   harnessv1.GatewayLimits
		route *adapters.ModelRoute
		creds []adapters.Credential
		hosts []string
		want  string
	}{
		"no gateway, a key":                 {lim, nil, []adapters.Credential{spare}, nil, "would reach the agent without it"},
		"no gateway, no credentials":        {lim, nil, nil, nil, ""},
		"gateway, a second key, own hosts":  {lim, route(key, spare), nil, []string{"api.anthropic.com"}, "(SPARE_KEY) while it may reach hosts of its own"},
		"gateway, a second key, no hosts":   {lim, route(key, spare), nil, nil, ""},
		"gateway, its key and scope, hosts": {lim, route(key, scope), nil, []string{"mirror.example.com"}, ""},
		"no limits":                         {harnessv1.GatewayLimits{}, route(key, spare), nil, []string{"api.anthropic.com"}, ""},
	} {
		got := modelLimitRefusal(c.lim, c.route, c.creds, c.hosts, "")
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", name, got, c.want)
		}
	}
}

// nulSources is inlineSources whose Secrets hold a value with a NUL, as a
// binary Secret (or a hostile one: "x\x00--share-net") does.
type nulSources struct{ inlineSources }

func (nulSources) SecretKey(context.Context, *harnessv1.HarnessRun, harnessv1.SecretKeySelector) ([]byte, error) {
	return []byte("sk-ant-api03-nul\x00--share-net"), nil
}

// TestCredentialWithANulIsRefused: an environment variable cannot carry a
// NUL, and in bwrap's NUL-separated options the rest of the value was an
// option of its own (a review put the agent on the node's network so). A
// credential delivered as a variable that holds one is refused with
// CredentialsUnavailable, naming the key, before the agent starts. Real
// bwrap.
func TestCredentialWithANulIsRefused(t *testing.T) {
	root := rootRunRoot(t, "hf-nul-")
	obs := &startedAgents{started: map[string]int{}}
	e, err := New(Options{Sources: nulSources{}, RunRoot: root, InitBinary: "/bin/true", Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }()
	run := func(name string, c harnessv1.Credential, command string) harnessv1.HarnessRunStatus {
		r := &harnessv1.HarnessRun{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant", UID: types.UID("uid-" + name)},
			Spec: harnessv1.HarnessRunSpec{
				Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"sh", "-c", command},
					Credentials: []harnessv1.Credential{c}},
				Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: nothing\n"}}},
				Network: harnessv1.NetworkSpec{Egress: harnessv1.EgressNone},
			},
			Status: harnessv1.HarnessRunStatus{Attempt: 1},
		}
		return e.Execute(context.Background(), r).Status
	}
	ref := harnessv1.SecretKeySelector{Name: "keys", Key: "bin"}
	st := run("env", harnessv1.Credential{SecretKeyRef: ref, Env: "MY_KEY"}, "true")
	if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonCredentialsUnavailable || !strings.Contains(st.Message, "keys/bin holds a NUL byte") {
		t.Errorf("a NUL in a variable's credential: %s %s %q", st.Phase, st.Reason, st.Message)
	}
	if strings.Contains(st.Message, "share-net") {
		t.Errorf("the message repeats the value: %q", st.Message)
	}
	obs.mu.Lock()
	if n := obs.started["env"]; n != 0 {
		t.Errorf("the agent started %d times", n)
	}
	obs.mu.Unlock()
}

// TestFixtureImageIsJudgedByThePolicies: a fixture.yaml that names its own
// environment image (the run author's, like the run) is judged by the
// namespace's HarnessPolicies as if the run named it, before anything is
// fetched: an image from a registry network.allowedSources does not list
// refuses the run, and the registry is never dialled.
func TestFixtureImageIsJudgedByThePolicies(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dialled atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			_ = c.Close()
		}
	}()
	policy := &harnessv1.HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "sources"},
		Spec: harnessv1.HarnessPolicySpec{Network: &harnessv1.PolicyNetwork{AllowedSources: []string{"registry.example.com"}}}}
	e, err := New(Options{Sources: inlineSources{}, RunRoot: rootRunRoot(t, "hf-fixture-image-"), InitBinary: "/bin/true",
		PolicyViolations: func(_ context.Context, run *harnessv1.HarnessRun) ([]string, error) {
			var out []string
			for _, v := range policy.Violations(&run.Spec) {
				out = append(out, v.String())
			}
			return out, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	image := ln.Addr().String() + "/evil/img@sha256:" + strings.Repeat("a", 64)
	st := e.Execute(context.Background(), &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "fixture-image", Namespace: "tenant", UID: "uid-fixture-image"},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
				"fixture.yaml": "prompt: nothing\nenvironment:\n  image: " + image + "\n"}}},
		},
		Status: harnessv1.HarnessRunStatus{Attempt: 1},
	}).Status
	if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonPolicyViolation ||
		!strings.Contains(st.Message, "the fixture's environment image") || !strings.Contains(st.Message, "network.allowedSources") {
		t.Errorf("%s %s %q: want Failed PolicyViolation naming the fixture's image and network.allowedSources", st.Phase, st.Reason, st.Message)
	}
	if n := dialled.Load(); n != 0 {
		t.Errorf("the registry the policy does not list was dialled %d times", n)
	}
}
