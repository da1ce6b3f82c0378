package install

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// asUser is a client that acts as an authenticated user (impersonation:
// the API server authorizes and admits each request as that user).
func asUser(t *testing.T, name string, groups ...string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name, Groups: append(groups, "system:authenticated")}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// grant gives user the rules in namespace, through a Role and RoleBinding.
func grant(t *testing.T, namespace, user string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	name := "grant-" + strings.NewReplacer(":", "-", "@", "-").Replace(user)
	if err := k8s.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Rules: rules}); err != nil {
		t.Fatal(err)
	}
	kind := rbacv1.UserKind
	subject := rbacv1.Subject{Kind: kind, APIGroup: rbacv1.GroupName, Name: user}
	if strings.HasPrefix(user, "system:serviceaccount:") {
		parts := strings.Split(user, ":")
		subject = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: parts[2], Name: parts[3]}
	}
	if err := k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{subject},
	}); err != nil {
		t.Fatal(err)
	}
}

// TestRunAuthorUsesOnlyWhatTheyCanRead installs the chart's run-author
// admission policy for real and acts as users with different rights in a
// namespace: one who may create runs and suites but read no Secret and no
// ConfigMap, one who may read everything, one who may read one Secret and one
// ConfigMap by name, and the controller's service account. Each refusal must
// name what the user may not read.
func TestRunAuthorUsesOnlyWhatTheyCanRead(t *testing.T) {
	ctx := context.Background()
	const namespace, release, ns = "author-system", "author", "author-runs"
	m := mustRender(t, release, namespace, "")
	createNamespace(t, namespace)
	createNamespace(t, ns)
	// What this test admits is gone when it ends (envtest deletes no
	// namespace's content): the later tests' controllers and node-agents
	// would bind and run it, in a namespace their RBAC does not cover.
	t.Cleanup(func() { deleteRunsAndSuites(t, ns) })
	policies := m.only("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
	if _, err := runKubectl(policies.yaml(t), "apply", "--server-side", "--field-manager=harnessfacts-install-test", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	// Gone when this test ends: the policy names this release's controller,
	// and later tests run other releases' controllers.
	t.Cleanup(func() {
		for _, o := range policies {
			if o.GetKind() == "ValidatingAdmissionPolicyBinding" {
				_ = k8s.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: o.GetName()}})
			} else {
				_ = k8s.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: o.GetName()}})
			}
		}
	})

	authorRules := rbacv1.PolicyRule{APIGroups: []string{harnessv1.GroupVersion.Group}, Resources: []string{"harnessruns", "harnesssuites"},
		Verbs: []string{"get", "list", "create", "update", "patch"}}
	grant(t, ns, "alice", authorRules) // may create runs, reads no Secret or ConfigMap
	grant(t, ns, "bob", authorRules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, Verbs: []string{"get", "list"}})
	grant(t, ns, "carol", authorRules,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"carols-key"}, Verbs: []string{"get"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"carols-fixture"}, Verbs: []string{"get"}})
	controllerSA := "system:serviceaccount:" + namespace + ":" + release + "-harnessfacts-controller"
	grant(t, ns, controllerSA, authorRules)
	alice, bob, carol := asUser(t, "alice"), asUser(t, "bob"), asUser(t, "carol")
	controller := asUser(t, controllerSA, "system:serviceaccounts", "system:serviceaccounts:"+namespace)

	for _, name := range []string{"team-key", "carols-key"} {
		if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: map[string]string{"key": "v"}}); err != nil {
			t.Fatal(err)
		}
	}

	n := 0
	run := func(credentials []string, fixtureConfigMap string) *harnessv1.HarnessRun {
		n++
		r := &harnessv1.HarnessRun{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("run-%d", n), Namespace: ns},
			Spec: harnessv1.HarnessRunSpec{
				Agent:   harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}},
				Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: hi\n"}}},
			},
		}
		for i, c := range credentials {
			r.Spec.Agent.Credentials = append(r.Spec.Agent.Credentials, harnessv1.Credential{
				SecretKeyRef: harnessv1.SecretKeySelector{Name: c, Key: "key"}, Env: fmt.Sprintf("KEY_%d", i)})
		}
		if fixtureConfigMap != "" {
			r.Spec.Fixture = harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: fixtureConfigMap}}
		}
		return r
	}
	suite := func(credentials []string, names []string) *harnessv1.HarnessSuite {
		n++
		s := &harnessv1.HarnessSuite{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("suite-%d", n), Namespace: ns},
			Spec: harnessv1.HarnessSuiteSpec{
				Agents: []harnessv1.SuiteAgent{
					{Name: "plain", Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}}},
					{Name: "keyed", Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}}},
				},
			},
		}
		for i, c := range credentials {
			s.Spec.Agents[1].Agent.Credentials = append(s.Spec.Agents[1].Agent.Credentials, harnessv1.Credential{
				SecretKeyRef: harnessv1.SecretKeySelector{Name: c, Key: "key"}, Env: fmt.Sprintf("KEY_%d", i)})
		}
		if names != nil {
			s.Spec.Fixtures.Names = names
		} else {
			s.Spec.Fixtures.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"set": "a"}}
		}
		return s
	}
	ownedBySuite := func(r *harnessv1.HarnessRun) *harnessv1.HarnessRun {
		r.OwnerReferences = []metav1.OwnerReference{{APIVersion: harnessv1.GroupVersion.String(), Kind: "HarnessSuite",
			Name: "some-suite", UID: "0c6d1d5e-8a4f-4b9e-9d0f-6f1d2a3b4c5d", Controller: ptr.To(true)}}
		return r
	}

	// The policy takes effect once the API server has loaded it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := alice.Create(ctx, run([]string{"team-key"}, ""), client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "may not get Secret team-key") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run-author policy never refused alice the Secret team-key; last result: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	cases := []struct {
		name string
		do   func() error
		want string // part of the refusal; "" when allowed
	}{
		{"alice creates a run that names no Secret", func() error { return alice.Create(ctx, run(nil, "")) }, ""},
		{"alice creates a run with a Secret", func() error { return alice.Create(ctx, run([]string{"team-key"}, "")) },
			"alice may not get Secret team-key in namespace " + ns + ", so this HarnessRun may not use it"},
		{"alice pulls the run's image with a Secret", func() error {
			r := run(nil, "")
			r.Spec.Environment = &harnessv1.EnvironmentSpec{Image: "registry.example/task@sha256:" + strings.Repeat("a", 64),
				ImagePullSecrets: []harnessv1.LocalObjectReference{{Name: "team-key"}}}
			return alice.Create(ctx, r)
		}, "alice may not get Secret team-key in namespace " + ns + ", so this HarnessRun may not use it"},
		{"alice fetches a git fixture with a Secret", func() error {
			r := run(nil, "")
			r.Spec.Fixture = harnessv1.FixtureSource{Git: &harnessv1.GitFixture{URL: "https://git.example/tasks.git",
				Commit: strings.Repeat("a", 40), SecretRef: &harnessv1.LocalObjectReference{Name: "team-key"}}}
			return alice.Create(ctx, r)
		}, "alice may not get Secret team-key in namespace " + ns + ", so this HarnessRun may not use it"},
		{"alice pulls an OCI fixture with a Secret", func() error {
			r := run(nil, "")
			r.Spec.Fixture = harnessv1.FixtureSource{OCI: &harnessv1.OCIFixture{Ref: "registry.example/fixtures/hello@sha256:" + strings.Repeat("b", 64),
				ImagePullSecrets: []harnessv1.LocalObjectReference{{Name: "team-key"}}}}
			return alice.Create(ctx, r)
		}, "alice may not get Secret team-key in namespace " + ns + ", so this HarnessRun may not use it"},
		{"alice fetches a public git fixture", func() error {
			r := run(nil, "")
			r.Spec.Fixture = harnessv1.FixtureSource{Git: &harnessv1.GitFixture{URL: "https://git.example/tasks.git", Commit: strings.Repeat("a", 40)}}
			return alice.Create(ctx, r)
		}, ""},
		{"carol fetches a git fixture with her Secret", func() error {
			r := run(nil, "")
			r.Spec.Fixture = harnessv1.FixtureSource{Git: &harnessv1.GitFixture{URL: "https://git.example/tasks.git",
				Commit: strings.Repeat("a", 40), SecretRef: &harnessv1.LocalObjectReference{Name: "carols-key"}}}
			return carol.Create(ctx, r)
		}, ""},
		{"carol pulls an OCI fixture with another's Secret", func() error {
			r := run([]string{"carols-key"}, "")
			r.Spec.Fixture = harnessv1.FixtureSource{OCI: &harnessv1.OCIFixture{Ref: "registry.example/fixtures/hello@sha256:" + strings.Repeat("b", 64),
				ImagePullSecrets: []harnessv1.LocalObjectReference{{Name: "team-key"}}}}
			return carol.Create(ctx, r)
		}, "carol may not get Secret team-key in namespace"},
		{"alice names a Secret that does not exist", func() error { return alice.Create(ctx, run([]string{"guessed"}, "")) },
			"alice may not get Secret guessed"},
		{"alice creates a run with a fixture ConfigMap", func() error { return alice.Create(ctx, run(nil, "carols-fixture")) },
			"alice may not get ConfigMap carols-fixture in namespace " + ns + ", so this HarnessRun may not use it as a fixture"},
		{"alice creates a suite with a Secret", func() error { return alice.Create(ctx, suite([]string{"team-key"}, []string{"f"})) },
			"alice may not get Secret team-key in namespace " + ns + ", so this HarnessSuite may not use it"},
		{"alice creates a suite that selects fixtures", func() error { return alice.Create(ctx, suite(nil, nil)) },
			"alice may not list ConfigMaps in namespace " + ns + ", so this HarnessSuite may not select its fixtures by label"},
		{"alice creates a run that names a suite as owner", func() error { return alice.Create(ctx, ownedBySuite(run([]string{"team-key"}, ""))) },
			"alice may not get Secret team-key"},
		{"bob creates a run with a Secret and a fixture", func() error { return bob.Create(ctx, run([]string{"team-key", "carols-key"}, "any")) }, ""},
		{"bob creates a suite that selects fixtures", func() error { return bob.Create(ctx, suite([]string{"team-key"}, nil)) }, ""},
		{"carol uses her Secret and fixture", func() error { return carol.Create(ctx, run([]string{"carols-key"}, "carols-fixture")) }, ""},
		{"carol uses her Secret and another", func() error { return carol.Create(ctx, run([]string{"carols-key", "team-key"}, "")) },
			"carol may not get Secret team-key in namespace"},
		{"carol names another fixture in a suite", func() error {
			return carol.Create(ctx, suite([]string{"carols-key"}, []string{"carols-fixture", "other-fixture"}))
		}, "carol may not get ConfigMap other-fixture in namespace"},
		{"carol names more Secrets than are checked one by one", func() error {
			return carol.Create(ctx, run([]string{"carols-key", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10"}, ""))
		}, "carol may get only some Secrets in namespace " + ns + ", and this HarnessRun names 11 of them: at most 10 are checked one by one"},
		{"the controller creates a suite's run", func() error { return controller.Create(ctx, ownedBySuite(run([]string{"team-key"}, "carols-fixture"))) }, ""},
		{"the controller creates a run no suite owns", func() error { return controller.Create(ctx, run([]string{"team-key"}, "")) },
			"may not get Secret team-key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Error("allowed")
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("refused with %q, want a message containing %q", err, tc.want)
			}
		})
	}

	// Changing what a run or suite names is checked like creating it; an
	// update that leaves the spec alone is not.
	t.Run("alice adds a Secret to bob's suite", func(t *testing.T) {
		s := suite([]string{"team-key"}, []string{"f"})
		if err := bob.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		s.Spec.Agents[0].Agent.Credentials = []harnessv1.Credential{{SecretKeyRef: harnessv1.SecretKeySelector{Name: "carols-key", Key: "key"}, Env: "K"}}
		s.Spec.Revision = intstr.FromString("2")
		if err := alice.Update(ctx, s); err == nil || !strings.Contains(err.Error(), "alice may not get Secret") {
			t.Errorf("alice changing the suite's credentials: %v, want a refusal", err)
		}
		got := &harnessv1.HarnessSuite{}
		if err := alice.Get(ctx, client.ObjectKeyFromObject(s), got); err != nil {
			t.Fatal(err)
		}
		got.Labels = map[string]string{"team": "evals"}
		if err := alice.Update(ctx, got); err != nil {
			t.Errorf("alice labelling the suite (spec unchanged): %v", err)
		}
		// A suite's parallelism and suspend name nothing new.
		got.Spec.Parallelism, got.Spec.Suspend = 3, true
		if err := alice.Update(ctx, got); err != nil {
			t.Errorf("alice suspending the suite: %v", err)
		}
	})

	// Cancelling a run, or setting its TTL, names nothing new: a co-editor
	// who may not read the Secret a run names may still stop it (the
	// policy judged the whole spec again and refused it).
	t.Run("alice cancels bob's run", func(t *testing.T) {
		r := run([]string{"team-key"}, "")
		if err := bob.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		got := &harnessv1.HarnessRun{}
		if err := alice.Get(ctx, client.ObjectKeyFromObject(r), got); err != nil {
			t.Fatal(err)
		}
		got.Spec.Cancel, got.Spec.TTLSecondsAfterFinished = true, ptr.To[int32](60)
		if err := alice.Update(ctx, got); err != nil {
			t.Errorf("alice cancelling bob's run: %v", err)
		}
	})
}

// deleteRunsAndSuites deletes every HarnessRun and HarnessSuite of ns: none
// was bound, so none has a finalizer to wait for.
func deleteRunsAndSuites(t *testing.T, ns string) {
	t.Helper()
	for _, o := range []client.Object{&harnessv1.HarnessRun{}, &harnessv1.HarnessSuite{}} {
		if err := k8s.DeleteAllOf(context.Background(), o, client.InNamespace(ns)); err != nil {
			t.Errorf("deleting the test's %T: %v", o, err)
		}
	}
}
