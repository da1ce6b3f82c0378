package install

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// TestHarnessPolicyRefusesWhatItForbids installs the chart's HarnessPolicy
// admission policy for real, creates HarnessPolicies that select namespaces
// by label, and checks each rule: what breaks it is refused with a message
// naming the policy and the rule, what keeps it is admitted, and a
// namespace the policy does not select is not governed by it.
func TestHarnessPolicyRefusesWhatItForbids(t *testing.T) {
	ctx := context.Background()
	const namespace, release = "hpol-system", "hpol"
	m := mustRender(t, release, namespace, "")
	policies := m.only("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
	if _, err := runKubectl(policies.yaml(t), "apply", "--server-side", "--field-manager=harnessfacts-install-test", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, o := range policies {
			if o.GetKind() == "ValidatingAdmissionPolicyBinding" {
				_ = k8s.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: o.GetName()}})
			} else {
				_ = k8s.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: o.GetName()}})
			}
		}
	})
	labelled := func(name string, labels map[string]string) string {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
			t.Fatal(err)
		}
		return name
	}
	governed := labelled("hpol-team-a", map[string]string{"hpol-test/team": "a"})
	prod := labelled("hpol-prod", map[string]string{"hpol-test/env": "prod"})
	free := labelled("hpol-free", map[string]string{"hpol-test/team": "b"})
	for _, ns := range []string{governed, prod, free} {
		t.Cleanup(func() { deleteRunsAndSuites(t, ns) })
	}

	strict := &harnessv1.HarnessPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "hpol-strict"},
		Spec: harnessv1.HarnessPolicySpec{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"hpol-test/team": "a"}},
			Isolation:         &harnessv1.PolicyIsolation{ForbidFallback: true},
			Network: &harnessv1.PolicyNetwork{ForbidUnrestricted: true, ForbidProviderTools: true, AllowedHosts: []string{"gateway.example.com", "mirror.example.com:8443"},
				AllowedSources: []string{"git.example.com", "registry.example.com:5000", "docker.io"}},
			Limits: &harnessv1.PolicyLimits{MaxMemory: ptr.To(resource.MustParse("4Gi")), MaxEpisodeSeconds: ptr.To[int32](600),
				MaxOutputBytes: ptr.To[int64](1 << 20), MaxDecisions: ptr.To[int32](100), MaxDisk: ptr.To(resource.MustParse("2Gi")),
				MaxProbeSeconds: ptr.To[int32](60), MaxProcesses: ptr.To[int32](512), MaxArtifactBytes: ptr.To[int64](1 << 16)},
			Adapters:             []harnessv1.Adapter{harnessv1.AdapterExec, harnessv1.AdapterCodex},
			RequiredNodeSelector: map[string]string{"pool": "agents"},
		},
	}
	// A second policy with a matchExpressions selector.
	prodOnly := &harnessv1.HarnessPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "hpol-prod"},
		Spec: harnessv1.HarnessPolicySpec{
			NamespaceSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "hpol-test/env", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod", "staging"}}}},
			Isolation: &harnessv1.PolicyIsolation{ForbidFallback: true},
		},
	}
	for _, p := range []*harnessv1.HarnessPolicy{strict, prodOnly} {
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, p) })
	}

	n := 0
	// good keeps every rule of strict; each case breaks one.
	good := func(ns string, change func(*harnessv1.HarnessRun)) *harnessv1.HarnessRun {
		n++
		r := &harnessv1.HarnessRun{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("run-%d", n), Namespace: ns},
			Spec: harnessv1.HarnessRunSpec{
				Agent:        harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}, ProviderURL: "https://gateway.example.com/v1"},
				Fixture:      harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: hi\n"}}},
				Network:      harnessv1.NetworkSpec{Egress: harnessv1.EgressProviderOnly, AllowHosts: []string{"mirror.example.com:8443", "gateway.example.com:444"}},
				Isolation:    harnessv1.IsolationSpec{Policy: harnessv1.IsolationRequired},
				NodeSelector: map[string]string{"pool": "agents", "zone": "z1"},
				Limits: harnessv1.Limits{Memory: ptr.To(resource.MustParse("4Gi")), EpisodeSeconds: 600, ProbeSeconds: 60,
					MaxOutputBytes: 1 << 20, MaxDecisions: 100, Disk: ptr.To(resource.MustParse("2Gi")), MaxProcesses: 512, MaxArtifactBytes: 1 << 16},
			},
		}
		if change != nil {
			change(r)
		}
		return r
	}
	suite := func(ns string, change func(*harnessv1.HarnessSuite)) *harnessv1.HarnessSuite {
		n++
		s := &harnessv1.HarnessSuite{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("suite-%d", n), Namespace: ns},
			Spec: harnessv1.HarnessSuiteSpec{
				Agents:   []harnessv1.SuiteAgent{{Name: "a", Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}}}},
				Fixtures: harnessv1.SuiteFixtures{Names: []string{"f"}},
				Template: harnessv1.SuiteRunTemplate{NodeSelector: map[string]string{"pool": "agents"},
					Limits: &harnessv1.Limits{EpisodeSeconds: 60, ProbeSeconds: 60, MaxOutputBytes: 1 << 20, MaxDecisions: 10, Memory: ptr.To(resource.MustParse("1Gi"))}},
			},
		}
		if change != nil {
			change(s)
		}
		return s
	}

	// The policies take effect once the API server has loaded them.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := k8s.Create(ctx, good(governed, func(r *harnessv1.HarnessRun) { r.Spec.Isolation.Policy = harnessv1.IsolationAllowFallback }), client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "isolation.forbidFallback") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the HarnessPolicy admission policy never refused a fallback run; last result: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	const rule = "HarnessPolicy hpol-strict rule "
	cases := []struct {
		name string
		obj  client.Object
		want string // part of the refusal; "" when admitted
	}{
		{"a run that keeps every rule", good(governed, nil), ""},
		{"fallback", good(governed, func(r *harnessv1.HarnessRun) { r.Spec.Isolation.Policy = harnessv1.IsolationAllowFallback }),
			rule + "isolation.forbidFallback: isolation.policy AllowFallback is not allowed in namespace " + governed},
		{"unrestricted egress", good(governed, func(r *harnessv1.HarnessRun) { r.Spec.Network.Egress = harnessv1.EgressUnrestricted }),
			rule + "network.forbidUnrestricted"},
		{"provider tools", good(governed, func(r *harnessv1.HarnessRun) { r.Spec.Network.ProviderTools = harnessv1.ProviderToolsAllowed }),
			rule + "network.forbidProviderTools: network.providerTools Allowed is not allowed in namespace " + governed},
		{"provider tools refused", good(governed, func(r *harnessv1.HarnessRun) { r.Spec.Network.ProviderTools = harnessv1.ProviderToolsRefused }), ""},
		{"a host outside the list", good(governed, func(r *harnessv1.HarnessRun) {
			r.Spec.Network.AllowHosts = []string{"gateway.example.com", "evil.example.net:443"}
		}), rule + "network.allowedHosts: network.allowHosts evil.example.net:443 not in gateway.example.com, mirror.example.com:8443"},
		{"a listed host on another port than listed", good(governed, func(r *harnessv1.HarnessRun) {
			r.Spec.Network.AllowHosts = []string{"mirror.example.com:443"}
		}), rule + "network.allowedHosts: network.allowHosts mirror.example.com:443"},
		{"a provider URL outside the list", good(governed, func(r *harnessv1.HarnessRun) { r.Spec.Agent.ProviderURL = "http://10.0.0.7:8080/v1" }),
			rule + "network.allowedHosts: agent.providerURL http://10.0.0.7:8080/v1 has a host not in"},
		{"a provider URL on the listed port", good(governed, func(r *harnessv1.HarnessRun) { r.Spec.Agent.ProviderURL = "https://mirror.example.com:8443/v1" }), ""},
		{"sources the policy lists", good(governed, func(r *harnessv1.HarnessRun) {
			r.Spec.Fixture = harnessv1.FixtureSource{Git: &harnessv1.GitFixture{URL: "https://git.example.com:8443/org/tasks.git", Commit: strings.Repeat("a", 40)}}
			r.Spec.Environment = &harnessv1.EnvironmentSpec{Image: "ubuntu@sha256:" + strings.Repeat("a", 64)}
		}), ""},
		{"an OCI fixture from a registry not listed", good(governed, func(r *harnessv1.HarnessRun) {
			r.Spec.Fixture = harnessv1.FixtureSource{OCI: &harnessv1.OCIFixture{Ref: "127.0.0.1:18089/internal/admin@sha256:" + strings.Repeat("0", 64)}}
		}), rule + "network.allowedSources: fixture.oci.ref names 127.0.0.1:18089, not in git.example.com, registry.example.com:5000, docker.io"},
		{"a git server not listed", good(governed, func(r *harnessv1.HarnessRun) {
			r.Spec.Fixture = harnessv1.FixtureSource{Git: &harnessv1.GitFixture{URL: "http://10.0.0.7/x.git", Commit: strings.Repeat("a", 40)}}
		}), rule + "network.allowedSources: fixture.git.url names 10.0.0.7, not in"},
		{"an environment image on another port of a listed registry", good(governed, func(r *harnessv1.HarnessRun) {
			r.Spec.Environment = &harnessv1.EnvironmentSpec{Image: "registry.example.com:5001/img@sha256:" + strings.Repeat("a", 64)}
		}), rule + "network.allowedSources: environment.image names registry.example.com:5001, not in"},
		{"an adapter not allowed", good(governed, func(r *harnessv1.HarnessRun) {
			r.Spec.Agent = harnessv1.AgentSpec{Adapter: harnessv1.AdapterGemini}
		}), rule + "adapters: adapter gemini is not allowed in namespace " + governed + " (allowed: exec, codex)"},
		{"no required node selector", good(governed, func(r *harnessv1.HarnessRun) { r.Spec.NodeSelector = map[string]string{"zone": "z1"} }),
			rule + "requiredNodeSelector: nodeSelector must include pool=agents"},
		{"another value of the required node selector", good(governed, func(r *harnessv1.HarnessRun) { r.Spec.NodeSelector = map[string]string{"pool": "gpu"} }),
			rule + "requiredNodeSelector"},
		{"memory above the ceiling", good(governed, func(r *harnessv1.HarnessRun) { r.Spec.Limits.Memory = ptr.To(resource.MustParse("4097Mi")) }),
			rule + "limits.maxMemory: limits.memory 4097Mi is above the ceiling 4Gi"},
		{"episode above the ceiling", good(governed, func(r *harnessv1.HarnessRun) { r.Spec.Limits.EpisodeSeconds = 601 }),
			rule + "limits.maxEpisodeSeconds: limits.episodeSeconds 601 is above the ceiling 600"},
		{"output above the ceiling", good(governed, func(r *harnessv1.HarnessRun) { r.Spec.Limits.MaxOutputBytes = 1<<20 + 1 }),
			rule + "limits.maxOutputBytes: limits.maxOutputBytes 1048577 is above the ceiling 1048576"},
		{"decisions above the ceiling", good(governed, func(r *harnessv1.HarnessRun) { r.Spec.Limits.MaxDecisions = 101 }),
			rule + "limits.maxDecisions: limits.maxDecisions 101 is above the ceiling 100"},
		{"disk above the ceiling", good(governed, func(r *harnessv1.HarnessRun) { r.Spec.Limits.Disk = ptr.To(resource.MustParse("3Gi")) }),
			rule + "limits.maxDisk: limits.disk 3Gi is above the ceiling 2Gi"},
		{"checks' time above the ceiling", good(governed, func(r *harnessv1.HarnessRun) { r.Spec.Limits.ProbeSeconds = 61 }),
			rule + "limits.maxProbeSeconds: limits.probeSeconds 61 is above the ceiling 60"},
		{"processes above the ceiling", good(governed, func(r *harnessv1.HarnessRun) { r.Spec.Limits.MaxProcesses = 513 }),
			rule + "limits.maxProcesses: limits.maxProcesses 513 is above the ceiling 512"},
		{"artifacts above the ceiling", good(governed, func(r *harnessv1.HarnessRun) { r.Spec.Limits.MaxArtifactBytes = 1<<16 + 1 }),
			rule + "limits.maxArtifactBytes: limits.maxArtifactBytes 65537 is above the ceiling 65536"},
		{"a suite above the processes ceiling", suite(governed, func(s *harnessv1.HarnessSuite) { s.Spec.Template.Limits.MaxProcesses = 4096 }),
			rule + "limits.maxProcesses"},
		{"a suite that keeps every rule", suite(governed, nil), ""},
		{"a suite whose template falls back", suite(governed, func(s *harnessv1.HarnessSuite) {
			s.Spec.Template.Isolation = &harnessv1.IsolationSpec{Policy: harnessv1.IsolationAllowFallback}
		}), rule + "isolation.forbidFallback"},
		{"a suite whose template allows provider tools", suite(governed, func(s *harnessv1.HarnessSuite) {
			s.Spec.Template.Network = &harnessv1.NetworkSpec{ProviderTools: harnessv1.ProviderToolsAllowed}
		}), rule + "network.forbidProviderTools"},
		{"a suite with an adapter not allowed", suite(governed, func(s *harnessv1.HarnessSuite) {
			s.Spec.Agents = append(s.Spec.Agents, harnessv1.SuiteAgent{Name: "b", Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterAider}})
		}), rule + "adapters: adapter aider is not allowed"},
		{"a suite above the memory ceiling", suite(governed, func(s *harnessv1.HarnessSuite) { s.Spec.Template.Limits.Memory = ptr.To(resource.MustParse("5Gi")) }),
			rule + "limits.maxMemory"},
		{"a namespace no policy selects", good(free, func(r *harnessv1.HarnessRun) {
			r.Spec.Isolation.Policy = harnessv1.IsolationAllowFallback
			r.Spec.Network.Egress = harnessv1.EgressUnrestricted
			r.Spec.Agent = harnessv1.AgentSpec{Adapter: harnessv1.AdapterGemini}
		}), ""},
		{"fallback where matchExpressions selects", good(prod, func(r *harnessv1.HarnessRun) { r.Spec.Isolation.Policy = harnessv1.IsolationAllowFallback }),
			"HarnessPolicy hpol-prod rule isolation.forbidFallback"},
		{"the prod policy's other rules are unset", good(prod, func(r *harnessv1.HarnessRun) { r.Spec.Network.Egress = harnessv1.EgressUnrestricted }), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := k8s.Create(ctx, tc.obj)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Error("admitted")
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("refused with %q, want a message containing %q", err, tc.want)
			}
		})
	}
	// A policy tightened after a run was admitted: the run, which breaks
	// it now, can still be cancelled (and its TTL set), since that names
	// nothing a rule looks at; a suite's new matrix is judged again.
	t.Run("cancel after the policy was tightened", func(t *testing.T) {
		r := good(governed, nil)
		s := suite(governed, nil)
		for _, o := range []client.Object{r, s} {
			if err := k8s.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		tightened := &harnessv1.HarnessPolicy{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: "hpol-strict"}, tightened); err != nil {
			t.Fatal(err)
		}
		tightened.Spec.Adapters = []harnessv1.Adapter{harnessv1.AdapterCodex}
		if err := k8s.Update(ctx, tightened); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := k8s.Get(ctx, client.ObjectKey{Name: "hpol-strict"}, tightened); err == nil {
				tightened.Spec.Adapters = []harnessv1.Adapter{harnessv1.AdapterExec, harnessv1.AdapterCodex}
				_ = k8s.Update(ctx, tightened)
			}
		}()
		// Until the API server has the tightened policy, a new exec run
		// is still admitted.
		deadline := time.Now().Add(30 * time.Second)
		for err := k8s.Create(ctx, good(governed, nil), client.DryRunAll); err == nil; err = k8s.Create(ctx, good(governed, nil), client.DryRunAll) {
			if time.Now().After(deadline) {
				t.Fatal("the tightened policy never refused an exec run")
			}
			time.Sleep(200 * time.Millisecond)
		}
		got := &harnessv1.HarnessRun{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(r), got); err != nil {
			t.Fatal(err)
		}
		got.Spec.Cancel, got.Spec.TTLSecondsAfterFinished = true, ptr.To[int32](60)
		if err := k8s.Update(ctx, got); err != nil {
			t.Errorf("cancelling a run the tightened policy would refuse: %v", err)
		}
		gs := &harnessv1.HarnessSuite{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(s), gs); err != nil {
			t.Fatal(err)
		}
		gs.Spec.Suspend = true
		if err := k8s.Update(ctx, gs); err != nil {
			t.Errorf("suspending a suite the tightened policy would refuse: %v", err)
		}
		gs.Spec.Agents[0].Agent.Command = []string{"false"}
		gs.Spec.Revision = intstr.FromString("2")
		if err := k8s.Update(ctx, gs); err == nil || !strings.Contains(err.Error(), "adapters: adapter exec is not allowed") {
			t.Errorf("a suite's new matrix under the tightened policy: %v, want the adapters rule", err)
		}
	})
}
