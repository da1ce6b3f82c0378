//go:build !windows

package runsource_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/kube"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
	"github.com/harnessfacts/harnessfacts/runsource"
)

var (
	env *testenv.Env
	// k8s makes the tests' objects; api is the server's and the tokens'
	// client.
	k8s client.Client
	api *kube.Client
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		var err error
		if env, err = testenv.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = env.Stop() }()
		if k8s, err = client.New(env.Config, client.Options{Scheme: env.Scheme}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if api, err = kube.New(env.Config); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}())
}

const (
	system   = "hf-system"
	agentSA  = "harnessfacts-node-agent"
	devSA    = "dev-node-agent"
	intruder = "intruder"
	team     = "team"
	secret   = "api"
	value    = "sk-9d1c3f0e7b2a4c65"
)

func user(sa string) string { return "system:serviceaccount:" + system + ":" + sa }

// stack is a running Server and the objects the cases use.
type stack struct {
	url string
	ca  []byte
	srv *runsource.Server
}

func mustCreate(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := k8s.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

func startStack(t *testing.T, namespaces []string) *stack {
	t.Helper()
	return startStackWith(t, runsource.Options{Namespaces: namespaces,
		Accounts: runsource.Accounts{Bound: []string{user(agentSA)}, Unbound: map[string]string{user(devSA): "node-c"}}})
}

// startStackWith is startStack with opts, given a self-signed certificate.
func startStackWith(t *testing.T, opts runsource.Options) *stack {
	t.Helper()
	certPEM, keyPEM, err := runsource.SelfSigned("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if opts.TLS, err = runsource.TLSConfig(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	srv, url := startServer(t, opts)
	return &stack{url: url, ca: certPEM, srv: srv}
}

// startServer starts a run source with opts, reading and reviewing through
// the API server, on a loopback port of its own, until the test ends, and
// returns it and its URL.
func startServer(t *testing.T, opts runsource.Options) (*runsource.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.Reader, opts.Listener = api, ln
	if opts.Reviewer == nil {
		opts.Reviewer = api
	}
	srv, err := runsource.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the server stopped with %v", err)
		}
	})
	return srv, "https://" + ln.Addr().String()
}

var (
	setupOnce sync.Once
	nodePods  map[string]*corev1.Pod
)

// objects makes, once for every test, the namespaces, accounts, node-agent pods (one per node, as a
// DaemonSet would; no kubelet runs them here), Secrets and fixtures.
func objects(t *testing.T) map[string]*corev1.Pod {
	t.Helper()
	setupOnce.Do(func() { nodePods = setup(t) })
	if nodePods == nil {
		t.Fatal("the test objects could not be made")
	}
	return nodePods
}

func setup(t *testing.T) map[string]*corev1.Pod {
	t.Helper()
	mustCreate(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: system}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: team}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}},
	)
	for _, sa := range []string{agentSA, devSA, intruder} {
		mustCreate(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: system, Name: sa}})
	}
	pods := map[string]*corev1.Pod{}
	for _, p := range []struct{ name, node, sa string }{
		{"agent-a", "node-a", agentSA}, {"agent-b", "node-b", agentSA}, {"intruder-a", "node-a", intruder},
	} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: system, Name: p.name},
			Spec: corev1.PodSpec{NodeName: p.node, ServiceAccountName: p.sa,
				Containers: []corev1.Container{{Name: "c", Image: "node-agent"}}},
		}
		mustCreate(t, pod)
		pods[p.name] = pod
	}
	for _, ns := range []string{team, "elsewhere"} {
		mustCreate(t,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret}, Data: map[string][]byte{"key": []byte(value)}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unselected"}, Data: map[string][]byte{"key": []byte("not-yours")}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "regcred"}, Data: map[string][]byte{
				runsource.DockerConfigKey: []byte(`{"auths":{"registry.test":{"auth":"dTpw"}}}`), "other": []byte("not-a-pull-key")}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gitcred"}, Type: corev1.SecretTypeBasicAuth, Data: map[string][]byte{
				"username": []byte("x-access-token"), "password": []byte("git-token"), "other": []byte("not-a-git-key")}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fx"}, Data: map[string]string{"fixture.yaml": "prompt: hi\n"}},
		)
	}
	return pods
}

// boundRun makes a run of ns selecting Secret api, key key, with fixture
// ConfigMap fx, and gives it the status of a claimed attempt on node.
func boundRun(t *testing.T, ns, name, node string, phase harnessv1.RunPhase) *harnessv1.HarnessRun {
	t.Helper()
	run := hftesting.MakeHarnessRun(name, ns).Obj()
	run.Spec.Agent.Credentials = []harnessv1.Credential{{SecretKeyRef: harnessv1.SecretKeySelector{Name: secret, Key: "key"}, Env: "OPENAI_API_KEY"}}
	run.Spec.Fixture = harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "fx"}}
	mustCreate(t, run)
	setStatus(t, run, node, phase, 1)
	return run
}

func setStatus(t *testing.T, run *harnessv1.HarnessRun, node string, phase harnessv1.RunPhase, attempt int32) {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(run), run); err != nil {
		t.Fatal(err)
	}
	run.Status.NodeName, run.Status.Phase, run.Status.Attempt = node, phase, attempt
	if phase.Terminal() {
		run.Status.Verdict, run.Status.Reason = harnessv1.VerdictPass, "Succeeded"
	}
	if err := k8s.Status().Update(ctx, run); err != nil {
		t.Fatal(err)
	}
}

func ref(run *harnessv1.HarnessRun) runsource.RunRef {
	return runsource.RunRef{Namespace: run.Namespace, Name: run.Name, UID: run.UID, Attempt: run.Status.Attempt}
}

func podToken(pod *corev1.Pod, audience string) *runsource.RequestedToken {
	return &runsource.RequestedToken{Client: api, ServiceAccount: types.NamespacedName{Namespace: system, Name: pod.Spec.ServiceAccountName},
		Audience: audience, Bound: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}
}

func unboundToken(sa string) *runsource.RequestedToken {
	return &runsource.RequestedToken{Client: api, ServiceAccount: types.NamespacedName{Namespace: system, Name: sa}}
}

func (s *stack) client(t *testing.T, tokens runsource.TokenSource) *runsource.Client {
	t.Helper()
	c, err := runsource.NewClient(s.url, s.ca, tokens)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// refused checks err is the controller's refusal with status code and a
// message containing want.
func refused(t *testing.T, err error, code int, want string) {
	t.Helper()
	var re *runsource.RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("got %v, want a refusal (%d) saying %q", err, code, want)
	}
	if re.Status != code || !strings.Contains(re.Message, want) {
		t.Errorf("refusal %d %q, want %d saying %q", re.Status, re.Message, code, want)
	}
}

// TestServedOnlyToTheBoundNodeWhileActive is the Secret path against a real
// API server: real service accounts, tokens bound to node-agent pods, the
// API server's TokenReview, runs with real status.
func TestServedOnlyToTheBoundNodeWhileActive(t *testing.T) {
	ctx := context.Background()
	pods := objects(t)
	s := startStack(t, nil)
	onA := s.client(t, podToken(pods["agent-a"], ""))
	onB := s.client(t, podToken(pods["agent-b"], ""))

	run := boundRun(t, team, "on-a", "node-a", harnessv1.RunRunning)

	t.Run("the bound node gets the selected key and the fixture", func(t *testing.T) {
		v, err := onA.SecretKey(ctx, ref(run), secret, "key")
		if err != nil || string(v) != value {
			t.Fatalf("SecretKey = %q, %v; want the value", v, err)
		}
		fx, err := onA.Fixture(ctx, ref(run))
		if err != nil || fx.Data["fixture.yaml"] != "prompt: hi\n" {
			t.Fatalf("Fixture = %+v, %v", fx, err)
		}
	})
	t.Run("another node's node-agent is refused", func(t *testing.T) {
		_, err := onB.SecretKey(ctx, ref(run), secret, "key")
		refused(t, err, 403, `bound to node "node-a", not to node node-b`)
		_, err = onB.Fixture(ctx, ref(run))
		refused(t, err, 403, "not to node node-b")
	})
	t.Run("a Secret the run does not select is refused", func(t *testing.T) {
		_, err := onA.SecretKey(ctx, ref(run), "unselected", "key")
		refused(t, err, 403, "does not select Secret unselected key key")
	})
	t.Run("an image pull secret: only its .dockerconfigjson, only for a run that names it", func(t *testing.T) {
		r := hftesting.MakeHarnessRun("pulls", team).Obj()
		r.Spec.Fixture = harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "fx"}}
		r.Spec.Environment = &harnessv1.EnvironmentSpec{Image: "registry.test/env@sha256:" + strings.Repeat("0", 64),
			ImagePullSecrets: []harnessv1.LocalObjectReference{{Name: "regcred"}}}
		mustCreate(t, r)
		setStatus(t, r, "node-a", harnessv1.RunRunning, 1)
		if v, err := onA.SecretKey(ctx, ref(r), "regcred", runsource.DockerConfigKey); err != nil || !strings.Contains(string(v), "registry.test") {
			t.Fatalf("SecretKey(regcred) = %q, %v; want the pull secret", v, err)
		}
		_, err := onA.SecretKey(ctx, ref(r), "regcred", "other")
		refused(t, err, 403, "does not select Secret regcred key other")
		// A run without that pull secret cannot read it.
		_, err = onA.SecretKey(ctx, ref(run), "regcred", runsource.DockerConfigKey)
		refused(t, err, 403, "does not select Secret regcred key .dockerconfigjson")
	})
	t.Run("git credentials and an OCI fixture's pull secret: only their keys, only for a run that names them", func(t *testing.T) {
		g := hftesting.MakeHarnessRun("gitfixture", team).Obj()
		g.Spec.Fixture = harnessv1.FixtureSource{Git: &harnessv1.GitFixture{URL: "https://git.test/tasks.git",
			Commit: strings.Repeat("a", 40), SecretRef: &harnessv1.LocalObjectReference{Name: "gitcred"}}}
		mustCreate(t, g)
		setStatus(t, g, "node-a", harnessv1.RunRunning, 1)
		for key, want := range map[string]string{"username": "x-access-token", "password": "git-token"} {
			if v, err := onA.SecretKey(ctx, ref(g), "gitcred", key); err != nil || string(v) != want {
				t.Fatalf("SecretKey(gitcred, %s) = %q, %v", key, v, err)
			}
		}
		_, err := onA.SecretKey(ctx, ref(g), "gitcred", "other")
		refused(t, err, 403, "does not select Secret gitcred key other")
		_, err = onA.SecretKey(ctx, ref(g), "regcred", runsource.DockerConfigKey)
		refused(t, err, 403, "does not select Secret regcred")
		_, err = onA.SecretKey(ctx, ref(run), "gitcred", "password")
		refused(t, err, 403, "does not select Secret gitcred key password")

		o := hftesting.MakeHarnessRun("ocifixture", team).Obj()
		o.Spec.Fixture = harnessv1.FixtureSource{OCI: &harnessv1.OCIFixture{Ref: "registry.test/fx@sha256:" + strings.Repeat("0", 64),
			ImagePullSecrets: []harnessv1.LocalObjectReference{{Name: "regcred"}}}}
		mustCreate(t, o)
		setStatus(t, o, "node-a", harnessv1.RunRunning, 1)
		if v, err := onA.SecretKey(ctx, ref(o), "regcred", runsource.DockerConfigKey); err != nil || !strings.Contains(string(v), "registry.test") {
			t.Fatalf("SecretKey(regcred) for an OCI fixture = %q, %v", v, err)
		}
		_, err = onA.SecretKey(ctx, ref(o), "gitcred", "password")
		refused(t, err, 403, "does not select Secret gitcred")
		_, err = onA.Fixture(ctx, ref(o))
		refused(t, err, 403, "names no fixture ConfigMap")
	})
	t.Run("a stale uid or attempt is refused", func(t *testing.T) {
		r := ref(run)
		r.UID = "0a4e0f8e-0000-4000-8000-000000000000"
		_, err := onA.SecretKey(ctx, r, secret, "key")
		refused(t, err, 403, "deleted and made again")
		r = ref(run)
		r.Attempt = 2
		_, err = onA.SecretKey(ctx, r, secret, "key")
		refused(t, err, 403, "at attempt 1, not 2")
	})
	t.Run("a token for another audience is refused", func(t *testing.T) {
		c := s.client(t, podToken(pods["agent-a"], "https://kubernetes.default.svc"))
		_, err := c.SecretKey(ctx, ref(run), secret, "key")
		refused(t, err, 401, "did not authenticate the token for audience "+runsource.Audience)
	})
	t.Run("a pod on the node with another account is refused", func(t *testing.T) {
		c := s.client(t, podToken(pods["intruder-a"], ""))
		_, err := c.SecretKey(ctx, ref(run), secret, "key")
		refused(t, err, 403, user(intruder)+" is not a node-agent account")
	})
	t.Run("a node-agent token bound to no pod is refused", func(t *testing.T) {
		c := s.client(t, unboundToken(agentSA))
		_, err := c.SecretKey(ctx, ref(run), secret, "key")
		refused(t, err, 403, "carries no node claim")
	})
	t.Run("no token", func(t *testing.T) {
		c := s.client(t, emptyToken{})
		_, err := c.SecretKey(ctx, ref(run), secret, "key")
		refused(t, err, 401, "no bearer token")
	})
	t.Run("a server with another certificate is not trusted", func(t *testing.T) {
		other, _, err := runsource.SelfSigned("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		c, err := runsource.NewClient(s.url, other, podToken(pods["agent-a"], ""))
		if err != nil {
			t.Fatal(err)
		}
		if _, err = c.SecretKey(ctx, ref(run), secret, "key"); err == nil || !strings.Contains(err.Error(), "not trusted") {
			t.Fatalf("got %v, want the certificate refused", err)
		}
	})
	t.Run("the token cannot read the Secret from the API server either", func(t *testing.T) {
		// The token's audience is the controller's: the API server itself
		// does not accept it, whatever RBAC the account has.
		tok, err := podToken(pods["agent-a"], "").Token(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cfg := rest.AnonymousClientConfig(env.Config)
		cfg.BearerToken = tok
		c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		if err == nil {
			err = c.Get(ctx, types.NamespacedName{Namespace: team, Name: secret}, &corev1.Secret{})
		}
		if !apierrors.IsUnauthorized(err) && (err == nil || !strings.Contains(err.Error(), "provide credentials")) {
			t.Fatalf("the API server answered %v to the node-agent's controller token, want Unauthorized", err)
		}
	})

	t.Run("a claimed run, not yet claimed, then finished", func(t *testing.T) {
		r := boundRun(t, team, "lifecycle", "node-a", harnessv1.RunScheduled)
		_, err := onA.SecretKey(ctx, ref(r), secret, "key")
		refused(t, err, 403, "is Scheduled: only a claimed (Running) run is served")
		setStatus(t, r, "node-a", harnessv1.RunRunning, 1)
		if _, err := onA.SecretKey(ctx, ref(r), secret, "key"); err != nil {
			t.Fatalf("the claimed run: %v", err)
		}
		setStatus(t, r, "node-a", harnessv1.RunSucceeded, 1)
		_, err = onA.SecretKey(ctx, ref(r), secret, "key")
		refused(t, err, 403, "has finished (Succeeded)")
		_, err = onA.Fixture(ctx, ref(r))
		refused(t, err, 403, "has finished (Succeeded)")
	})
	t.Run("a ConfigMap owned by a run is not a fixture", func(t *testing.T) {
		// A ConfigMap a node-agent may write: owned by a run (evidence).
		ev := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "planted-fx",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: harnessv1.GroupVersion.String(), Kind: "HarnessRun", Name: run.Name, UID: run.UID}}},
			Data: map[string]string{"fixture.yaml": "prompt: planted\n"}}
		mustCreate(t, ev)
		other := hftesting.MakeHarnessRun("uses-planted", team).Obj()
		other.Spec.Fixture = harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "planted-fx"}}
		mustCreate(t, other)
		setStatus(t, other, "node-a", harnessv1.RunRunning, 1)
		_, err := onA.Fixture(ctx, ref(other))
		refused(t, err, 403, "is owned by HarnessRun on-a (evidence), not a fixture")
	})
	t.Run("a run that names no fixture ConfigMap", func(t *testing.T) {
		r := hftesting.MakeHarnessRun("inline", team).Obj()
		mustCreate(t, r)
		setStatus(t, r, "node-a", harnessv1.RunRunning, 1)
		_, err := onA.Fixture(ctx, ref(r))
		refused(t, err, 403, "names no fixture ConfigMap")
	})
}

// TestUnboundAccountSpeaksForItsNode: a node-agent outside a pod
// (`harnessfacts dev`) has an account of its own that the controller maps to
// one node.
func TestUnboundAccountSpeaksForItsNode(t *testing.T) {
	ctx := context.Background()
	objects(t)
	s := startStack(t, nil)
	dev := s.client(t, unboundToken(devSA))
	onC := boundRun(t, team, "on-c", "node-c", harnessv1.RunRunning)
	onA := boundRun(t, team, "on-a-2", "node-a", harnessv1.RunRunning)
	if v, err := dev.SecretKey(ctx, ref(onC), secret, "key"); err != nil || string(v) != value {
		t.Fatalf("the dev account on its node: %q, %v", v, err)
	}
	_, err := dev.SecretKey(ctx, ref(onA), secret, "key")
	refused(t, err, 403, "not to node node-c")
}

// TestNamespaces: a controller scoped to some namespaces says so.
func TestNamespaces(t *testing.T) {
	ctx := context.Background()
	pods := objects(t)
	s := startStack(t, []string{team})
	onA := s.client(t, podToken(pods["agent-a"], ""))
	r := boundRun(t, "elsewhere", "outside", "node-a", harnessv1.RunRunning)
	_, err := onA.SecretKey(ctx, ref(r), secret, "key")
	refused(t, err, 403, "namespace elsewhere is not one of the run namespaces this controller serves (team)")
}

type emptyToken struct{}

func (emptyToken) Token(context.Context) (string, error) { return "", nil }

// TestServerName: a controller reached at an address its certificate does
// not name is trusted only for the name given.
func TestServerName(t *testing.T) {
	ctx := context.Background()
	pods := objects(t)
	certPEM, keyPEM, err := runsource.SelfSigned("harnessfacts-run-source.hf-system.svc")
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := runsource.TLSConfig(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	_, url := startServer(t, runsource.Options{TLS: tlsCfg, Accounts: runsource.Accounts{Bound: []string{user(agentSA)}}})
	run := boundRun(t, team, "by-name", "node-a", harnessv1.RunRunning)
	byIP, err := runsource.NewClient(url, certPEM, podToken(pods["agent-a"], ""))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := byIP.SecretKey(ctx, ref(run), secret, "key"); err == nil || !strings.Contains(err.Error(), "not trusted") {
		t.Fatalf("a certificate without the address: %v, want it not trusted", err)
	}
	byName, err := runsource.NewClientWithServerName(url, "harnessfacts-run-source.hf-system.svc", certPEM, podToken(pods["agent-a"], ""))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := byName.SecretKey(ctx, ref(run), secret, "key"); err != nil || string(v) != value {
		t.Fatalf("with the server name: %q, %v", v, err)
	}
}

// staticToken is a bearer token given as is.
type staticToken string

func (s staticToken) Token(context.Context) (string, error) { return string(s), nil }

// TestSigningKeyNoneCostsNoAPIRequest: without an operator key the answer
// ("none") is given to anyone without a TokenReview or a read of the run
// (a token the API server would refuse gets it); with a key configured,
// the same caller is refused, and the bound node's node-agent gets it
// while its run is active.
func TestSigningKeyNoneCostsNoAPIRequest(t *testing.T) {
	ctx := context.Background()
	pods := objects(t)
	s := startStack(t, nil)
	bogus := s.client(t, staticToken("not-a-token"))
	nobody := runsource.RunRef{Namespace: team, Name: "no-such-run", UID: "no-such-uid", Attempt: 1}
	if pem, err := bogus.SigningKey(ctx, nobody); err != nil || len(pem) != 0 {
		t.Fatalf("without a key: %q, %v; want an empty answer", pem, err)
	}

	keySecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: system, Name: "operator-key"},
		Data: map[string][]byte{runsource.SigningKeyDataKey: []byte("a PEM key")}}
	mustCreate(t, keySecret)
	s.srv.SetSigningKeySecret(&types.NamespacedName{Namespace: system, Name: keySecret.Name})
	_, err := bogus.SigningKey(ctx, nobody)
	refused(t, err, 401, "did not authenticate")
	run := boundRun(t, team, "signs-on-a", "node-a", harnessv1.RunRunning)
	if pem, err := s.client(t, podToken(pods["agent-a"], "")).SigningKey(ctx, ref(run)); err != nil || string(pem) != "a PEM key" {
		t.Fatalf("with a key, the bound node's node-agent: %q, %v", pem, err)
	}
}

// TestCertFilesAreReloaded: a server given certificate files (a mounted
// Secret) serves the renewed certificate once the files change, without a
// restart.
func TestCertFilesAreReloaded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	issue := func() []byte {
		t.Helper()
		certPEM, keyPEM, err := runsource.SelfSigned("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		return certPEM
	}
	first := issue()
	_, url := startServer(t, runsource.Options{CertFile: certFile, KeyFile: keyFile, Accounts: runsource.Accounts{Bound: []string{user(agentSA)}}})
	// The signing key's "none" costs no API request: it shows whom the
	// node-agent's client trusts.
	nobody := runsource.RunRef{Namespace: team, Name: "no-such-run", UID: "no-such-uid", Attempt: 1}
	ask := func(ca []byte) error {
		c, err := runsource.NewClient(url, ca, staticToken("not-a-token"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.SigningKey(ctx, nobody)
		return err
	}
	if err := ask(first); err != nil {
		t.Fatalf("trusting the files' certificate: %v", err)
	}
	second := issue()
	if err := ask(second); err != nil {
		t.Fatalf("trusting the renewed certificate: %v", err)
	}
	if err := ask(first); err == nil || !strings.Contains(err.Error(), "not trusted") {
		t.Fatalf("trusting only the replaced certificate: %v, want it not trusted", err)
	}
}

// countingReviewer is the API server, counting the TokenReviews asked.
type countingReviewer struct{ n *atomic.Int32 }

func (c countingReviewer) Create(ctx context.Context, obj kube.Object) error {
	c.n.Add(1)
	return api.Create(ctx, obj)
}

// A token the API server refused is refused from memory for a minute:
// made-up tokens, one per request, had the run source ask the API server a
// thousand TokenReviews a second (as the controller's account).
func TestRefusedTokenIsNotReviewedAgain(t *testing.T) {
	var reviews atomic.Int32
	s := startStackWith(t, runsource.Options{Reviewer: countingReviewer{&reviews}, Accounts: runsource.Accounts{Bound: []string{user(agentSA)}}})
	bogus := s.client(t, staticToken("made-up"))
	nobody := runsource.RunRef{Namespace: team, Name: "no-such-run", UID: "no-such-uid", Attempt: 1}
	for range 3 {
		_, err := bogus.Fixture(context.Background(), nobody)
		refused(t, err, 401, "did not authenticate")
	}
	if n := reviews.Load(); n != 1 {
		t.Errorf("%d TokenReviews for one refused token asked three times, want 1", n)
	}
}
