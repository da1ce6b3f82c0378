package v1alpha1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestProviderAllowed(t *testing.T) {
	allowed := []string{"https://llm.example.com/v1", "http://127.0.0.1:8080", "https://API.other.example/"}
	for raw, want := range map[string]bool{
		"https://llm.example.com/v1":            true,
		"https://llm.example.com:443/v1/team-a": true,
		"https://llm.example.com/v1/":           true,
		"https://llm.example.com":               false,
		"https://llm.example.com/v10":           false,
		"https://llm.example.com/v1/../admin":   false,
		"https://llm.example.com/v1/%2e%2e/x":   false,
		"http://llm.example.com/v1":             false,
		"https://llm.example.com.evil.net/v1":   false,
		"https://user@llm.example.com/v1":       false,
		"https://llm.example.com/v1?x=1":        false,
		"http://127.0.0.1:8080/s/hello":         true,
		"http://127.0.0.1:8081/s/hello":         false,
		"https://api.other.example/anything":    true,
		"https://api.other.example.:443/x":      true,
	} {
		if got := ProviderAllowed(allowed, raw); got != want {
			t.Errorf("ProviderAllowed(%q) = %v, want %v", raw, got, want)
		}
	}
}

func TestGatewayPolicy(t *testing.T) {
	p := HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: HarnessPolicySpec{Gateway: &PolicyGateway{
		MaxRequestsPerRun: ptr.To[int64](50), MaxTokensPerRun: ptr.To[int64](90000), AllowedProviders: []string{"https://llm.example.com/v1"}}}}
	spec := &HarnessRunSpec{Agent: AgentSpec{Adapter: AdapterCodex, ProviderURL: "https://elsewhere.example/v1"}}
	v := p.Violations(spec)
	if len(v) != 1 || v[0].Rule != "gateway.allowedProviders" {
		t.Errorf("violations %v, want gateway.allowedProviders", v)
	}
	spec.Agent.ProviderURL = "https://llm.example.com/v1"
	if v := p.Violations(spec); len(v) != 0 {
		t.Errorf("violations %v", v)
	}
	q := HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: HarnessPolicySpec{Gateway: &PolicyGateway{MaxRequestsPerRun: ptr.To[int64](20)}}}
	got := GatewayLimitsOf([]HarnessPolicy{p, q, {}})
	want := GatewayLimits{MaxRequests: 20, MaxTokens: 90000, Sources: []string{"HarnessPolicy p gateway.maxRequestsPerRun", "HarnessPolicy p gateway.maxTokensPerRun", "HarnessPolicy q gateway.maxRequestsPerRun"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
