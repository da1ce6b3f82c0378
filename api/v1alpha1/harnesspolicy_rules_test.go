package v1alpha1

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestPolicyViolations(t *testing.T) {
	p := &HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "strict"}, Spec: HarnessPolicySpec{
		Isolation: &PolicyIsolation{ForbidFallback: true},
		Network: &PolicyNetwork{ForbidUnrestricted: true, ForbidProviderTools: true, AllowedHosts: []string{"gw.example.com", "mirror.example.com:8443"},
			AllowedSources: []string{"git.example.com", "registry.example.com:5000", "docker.io"}},
		Limits: &PolicyLimits{MaxMemory: ptr.To(resource.MustParse("4Gi")), MaxDisk: ptr.To(resource.MustParse("2Gi")),
			MaxEpisodeSeconds: ptr.To[int32](600), MaxOutputBytes: ptr.To[int64](1 << 20), MaxDecisions: ptr.To[int32](100),
			MaxProbeSeconds: ptr.To[int32](60), MaxProcesses: ptr.To[int32](512), MaxArtifactBytes: ptr.To[int64](1 << 16)},
		Adapters:             []Adapter{AdapterExec, AdapterCodex},
		RequiredNodeSelector: map[string]string{"pool": "agents", "tier": "b"},
	}}
	good := func(change func(*HarnessRunSpec)) *HarnessRunSpec {
		s := &HarnessRunSpec{
			Agent:        AgentSpec{Adapter: AdapterExec, ProviderURL: "https://gw.example.com/v1"},
			Network:      NetworkSpec{Egress: EgressProviderOnly, AllowHosts: []string{"gw.example.com:444", "mirror.example.com:8443"}},
			Isolation:    IsolationSpec{Policy: IsolationRequired},
			NodeSelector: map[string]string{"pool": "agents", "tier": "b", "zone": "z"},
			Limits: Limits{Memory: ptr.To(resource.MustParse("4Gi")), Disk: ptr.To(resource.MustParse("2Gi")),
				EpisodeSeconds: 600, MaxOutputBytes: 1 << 20, MaxDecisions: 100},
		}
		if change != nil {
			change(s)
		}
		return s
	}
	cases := map[string]struct {
		spec *HarnessRunSpec
		want []string
	}{
		"keeps every rule":                 {good(nil), nil},
		"unset limits are not judged here": {good(func(s *HarnessRunSpec) { s.Limits = Limits{} }), nil},
		"fallback": {good(func(s *HarnessRunSpec) { s.Isolation.Policy = IsolationAllowFallback }),
			[]string{"HarnessPolicy strict rule isolation.forbidFallback: isolation.policy AllowFallback is not allowed: agents run sandboxed or not at all"}},
		"unrestricted": {good(func(s *HarnessRunSpec) { s.Network.Egress = EgressUnrestricted }),
			[]string{"HarnessPolicy strict rule network.forbidUnrestricted: network.egress Unrestricted is not allowed"}},
		"provider tools": {good(func(s *HarnessRunSpec) { s.Network.ProviderTools = ProviderToolsAllowed }),
			[]string{"HarnessPolicy strict rule network.forbidProviderTools: network.providerTools Allowed is not allowed: no provider reaches the network for an agent"}},
		"provider tools refused": {good(func(s *HarnessRunSpec) { s.Network.ProviderTools = ProviderToolsRefused }), nil},
		"hosts": {good(func(s *HarnessRunSpec) {
			s.Network.AllowHosts = []string{"evil.example.net", "mirror.example.com:443"}
			s.Agent.ProviderURL = "http://mirror.example.com/v1"
		}), []string{
			"HarnessPolicy strict rule network.allowedHosts: network.allowHosts evil.example.net, mirror.example.com:443 not in gw.example.com, mirror.example.com:8443",
			"HarnessPolicy strict rule network.allowedHosts: agent.providerURL http://mirror.example.com/v1 has a host not in gw.example.com, mirror.example.com:8443",
		}},
		"sources listed": {good(func(s *HarnessRunSpec) {
			s.Fixture = FixtureSource{Git: &GitFixture{URL: "https://git.example.com:8443/org/tasks.git"}}
			s.Environment = &EnvironmentSpec{Image: "ubuntu@sha256:" + strings.Repeat("a", 64)}
		}), nil},
		"sources outside the list": {good(func(s *HarnessRunSpec) {
			s.Fixture = FixtureSource{OCI: &OCIFixture{Ref: "127.0.0.1:18089/internal/admin@sha256:" + strings.Repeat("0", 64)}}
			s.Environment = &EnvironmentSpec{Image: "registry.example.com:5001/img@sha256:" + strings.Repeat("a", 64)}
		}), []string{
			"HarnessPolicy strict rule network.allowedSources: fixture.oci.ref names 127.0.0.1:18089, not in git.example.com, registry.example.com:5000, docker.io",
			"HarnessPolicy strict rule network.allowedSources: environment.image names registry.example.com:5001, not in git.example.com, registry.example.com:5000, docker.io",
		}},
		"a git server outside the list": {good(func(s *HarnessRunSpec) {
			s.Fixture = FixtureSource{Git: &GitFixture{URL: "http://10.0.0.7/x.git"}}
		}), []string{"HarnessPolicy strict rule network.allowedSources: fixture.git.url names 10.0.0.7, not in git.example.com, registry.example.com:5000, docker.io"}},
		"provider on the listed port": {good(func(s *HarnessRunSpec) { s.Agent.ProviderURL = "https://mirror.example.com:8443/" }), nil},
		"adapter": {good(func(s *HarnessRunSpec) { s.Agent.Adapter = AdapterGemini }),
			[]string{"HarnessPolicy strict rule adapters: adapter gemini is not allowed (allowed: exec, codex)"}},
		"node selector": {good(func(s *HarnessRunSpec) { s.NodeSelector = map[string]string{"pool": "gpu"} }),
			[]string{"HarnessPolicy strict rule requiredNodeSelector: nodeSelector must include pool=agents, tier=b"}},
		"every ceiling": {good(func(s *HarnessRunSpec) {
			s.Limits = Limits{Memory: ptr.To(resource.MustParse("5Gi")), Disk: ptr.To(resource.MustParse("3Gi")),
				EpisodeSeconds: 601, MaxOutputBytes: 1<<20 + 1, MaxDecisions: 101, ProbeSeconds: 61, MaxProcesses: 513, MaxArtifactBytes: 1<<16 + 1}
		}), []string{
			"HarnessPolicy strict rule limits.maxMemory: limits.memory 5Gi is above the ceiling 4Gi",
			"HarnessPolicy strict rule limits.maxDisk: limits.disk 3Gi is above the ceiling 2Gi",
			"HarnessPolicy strict rule limits.maxEpisodeSeconds: limits.episodeSeconds 601 is above the ceiling 600",
			"HarnessPolicy strict rule limits.maxOutputBytes: limits.maxOutputBytes 1048577 is above the ceiling 1048576",
			"HarnessPolicy strict rule limits.maxDecisions: limits.maxDecisions 101 is above the ceiling 100",
			"HarnessPolicy strict rule limits.maxProbeSeconds: limits.probeSeconds 61 is above the ceiling 60",
			"HarnessPolicy strict rule limits.maxProcesses: limits.maxProcesses 513 is above the ceiling 512",
			"HarnessPolicy strict rule limits.maxArtifactBytes: limits.maxArtifactBytes 65537 is above the ceiling 65536",
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, v := range p.Violations(tc.spec) {
				got = append(got, v.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
		})
	}
	// An empty policy allows everything.
	empty := &HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "empty"}}
	if v := empty.Violations(good(func(s *HarnessRunSpec) {
		s.Isolation.Policy, s.Network.Egress, s.Agent.Adapter = IsolationAllowFallback, EgressUnrestricted, AdapterAider
	})); len(v) != 0 {
		t.Errorf("an empty policy refuses %v", v)
	}
}

func TestPolicySelects(t *testing.T) {
	p := &HarnessPolicy{Spec: HarnessPolicySpec{NamespaceSelector: metav1.LabelSelector{
		MatchLabels:      map[string]string{"team": "a"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"dev"}}},
	}}}
	for labels, want := range map[string]bool{"team=a": true, "team=a,env=prod": true, "team=a,env=dev": false, "team=b": false, "": false} {
		set := map[string]string{}
		for _, kv := range splitNonEmpty(labels) {
			set[kv[0]] = kv[1]
		}
		if got, err := p.Selects(set); err != nil || got != want {
			t.Errorf("Selects(%s) = %v, %v; want %v", labels, got, err, want)
		}
	}
	if ok, _ := (&HarnessPolicy{}).Selects(nil); !ok {
		t.Error("an empty namespaceSelector must select every namespace")
	}
}

func splitNonEmpty(s string) [][2]string {
	var out [][2]string
	for _, kv := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out = append(out, [2]string{k, v})
		}
	}
	return out
}

// TestInsideHosts: the names every policy that lists insideHosts lists, in
// lower case; a policy without the list neither adds nor takes away.
func TestInsideHosts(t *testing.T) {
	pol := func(hosts ...string) *HarnessPolicy {
		p := &HarnessPolicy{}
		if hosts != nil {
			p.Spec.Network = &PolicyNetwork{InsideHosts: hosts}
		}
		return p
	}
	cases := []struct {
		policies []*HarnessPolicy
		want     []string
	}{
		{nil, nil},
		{[]*HarnessPolicy{pol()}, nil},
		{[]*HarnessPolicy{pol("B.corp", "a.corp.")}, []string{"a.corp", "b.corp"}},
		{[]*HarnessPolicy{pol(), pol("a.corp"), pol()}, []string{"a.corp"}},
		{[]*HarnessPolicy{pol("a.corp", "b.corp"), pol("b.corp", "c.corp")}, []string{"b.corp"}},
		{[]*HarnessPolicy{pol("a.corp"), pol("c.corp")}, nil},
	}
	for i, tc := range cases {
		if diff := cmp.Diff(tc.want, InsideHosts(tc.policies)); diff != "" {
			t.Errorf("case %d (-want +got):\n%s", i, diff)
		}
	}
}

func TestRegistryOf(t *testing.T) {
	for ref, want := range map[string]string{
		"ubuntu@sha256:00":                        "docker.io",
		"library/ubuntu:24.04@sha256:00":          "docker.io",
		"docker.io/library/ubuntu@sha256:00":      "docker.io",
		"ghcr.io/org/img@sha256:00":               "ghcr.io",
		"localhost/img@sha256:00":                 "localhost",
		"127.0.0.1:5000/fixtures/hello@sha256:00": "127.0.0.1:5000",
		"registry:5000/img@sha256:00":             "registry:5000",
	} {
		if got := RegistryOf(ref); got != want {
			t.Errorf("RegistryOf(%q) = %q, want %q", ref, got, want)
		}
	}
}
