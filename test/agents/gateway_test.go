package agents

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/fakeprovider"
)

// The model gateway with a real CLI in bwrap: the adapters' API-key runs
// pass through it in every test of this suite (RequireUsage); these are its
// adversarial cases.

// TestGatewayReplacesAForgedKey: the agent's own shell (Claude Code's Bash
// tool) sends a model request to the gateway with a forged key in every key
// header. The provider gets the run's key, never the forged one.
func TestGatewayReplacesAForgedKey(t *testing.T) {
	const key, forged = "sk-ant-api03-planted-gateway-forge-2b7e90", "sk-ant-forged-in-sandbox-61d0"
	o := Run(t, Case{Name: "gateway-forge", Adapter: harnessv1.AdapterClaudeCode, Fixture: "gateway-forge",
		Creds: []Cred{{Env: "ANTHROPIC_API_KEY", Value: key}}})
	RequirePass(t, o)
	var sawForgedRequest bool
	for _, r := range o.Requests {
		if r.KeySHA256 == fakeprovider.KeyDigest(forged) {
			t.Errorf("the forged key reached the provider: %+v", r)
		}
		if r.Model == "forged-request" {
			sawForgedRequest = true
			if r.KeySHA256 != fakeprovider.KeyDigest(key) || r.AuthHeader != "x-api-key" {
				t.Errorf("the agent's own request reached the provider with %s in %q, want the run's key in x-api-key", r.KeySHA256, r.AuthHeader)
			}
		}
	}
	if !sawForgedRequest {
		t.Fatalf("the agent's forged request never reached the provider:\n%s\n%s", requests(o), tailOf(o.Run.Status))
	}
	RequireUsage(t, o, key)
	RequireClean(t, o, key)
}

// TestGatewayRefusesAnUnverifiedProvider: the provider's certificate is
// signed by no CA the node-agent trusts. The run ends at once, Failed, class
// Infrastructure, with its own reason, and no request reached the provider.
func TestGatewayRefusesAnUnverifiedProvider(t *testing.T) {
	const key = "sk-ant-api03-planted-gateway-badcert-913c"
	o := Run(t, Case{Name: "gateway-badcert", Adapter: harnessv1.AdapterClaudeCode, Fixture: "hello",
		Transport: harnessv1.MCPTransportHTTP, Creds: []Cred{{Env: "ANTHROPIC_API_KEY", Value: key}},
		ProviderURL: untrustedURL + "/s/hello"})
	st := o.Run.Status
	if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonProviderCertificateInvalid ||
		st.FailureClass != harnessv1.FailureInfrastructure || !strings.Contains(st.Message, "certificate") {
		t.Errorf("phase %s class %s reason %s: %s; want Failed, Infrastructure, %s", st.Phase, st.FailureClass, st.Reason, st.Message, harnessv1.ReasonProviderCertificateInvalid)
	}
	for _, r := range o.Requests {
		t.Errorf("a request reached the provider: %+v", r)
	}
	RequireClean(t, o, key)
}

// TestGatewayRequestLimit: a HarnessPolicy over the run's namespace allows
// two model requests a run; Claude Code's hello needs four. The third is
// refused and the run ends with its own reason, the agent's failure.
func TestGatewayRequestLimit(t *testing.T) {
	const key = "sk-ant-api03-planted-gateway-limit-5a2c"
	policy := &harnessv1.HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "gateway-limit"}, Spec: harnessv1.HarnessPolicySpec{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "agents-gateway-limit"}},
		Gateway:           &harnessv1.PolicyGateway{MaxRequestsPerRun: ptr.To[int64](2)},
	}}
	if err := k8s.Create(context.Background(), policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), policy) })
	o := Run(t, Case{Name: "gateway-limit", Adapter: harnessv1.AdapterClaudeCode, Fixture: "hello",
		Transport: harnessv1.MCPTransportHTTP, Creds: []Cred{{Env: "ANTHROPIC_API_KEY", Value: key}}})
	st := o.Run.Status
	if st.Reason != harnessv1.ReasonGatewayRequestLimit || st.Verdict != harnessv1.VerdictFail || st.FailureClass != harnessv1.FailureAgent ||
		!strings.Contains(st.Message, "limit of 2") {
		t.Errorf("phase %s verdict %s class %s reason %s: %s; want Fail, Agent, %s", st.Phase, st.Verdict, st.FailureClass, st.Reason, st.Message, harnessv1.ReasonGatewayRequestLimit)
	}
	if u := st.Usage; u == nil || u.Source != harnessv1.UsageFromGateway || u.Requests != 2 || len(o.Requests) != 2 {
		t.Errorf("usage %+v after %d provider requests, want 2 through the gateway", u, len(o.Requests))
	}
	RequireClean(t, o, key)
}

// TestGatewayRefusesTheProvidersNetworkTools: the agent's own shell sends a
// model request that asks the provider to fetch a URL carrying the
// workspace (Anthropic's web_fetch server tool), which would reach past
// egress ProviderOnly. The gateway answers 403, the request never reaches
// the provider, and the run's notes say so.
func TestGatewayRefusesTheProvidersNetworkTools(t *testing.T) {
	const key = "sk-ant-api03-planted-gateway-tools-7c1d"
	o := Run(t, Case{Name: "gateway-provider-tools", Adapter: harnessv1.AdapterClaudeCode, Fixture: "gateway-provider-tools",
		Creds: []Cred{{Env: "ANTHROPIC_API_KEY", Value: key}}})
	RequirePass(t, o)
	for _, r := range o.Requests {
		if r.Model == "provider-fetch" {
			t.Errorf("the request with the provider's web_fetch reached the provider: %+v", r)
		}
	}
	if ag := o.Run.Status.Agent; ag == nil || !strings.Contains(strings.Join(ag.Notes, "\n"), "refused 1 model requests that asked the provider to reach the network") {
		t.Errorf("the run's notes do not count the refusal: %+v", ag)
	}
	if n := o.Run.Status.Network; n == nil || n.ProviderToolsRefused != 1 {
		t.Errorf("status.network %+v, want providerToolsRefused 1", n)
	}
	RequireUsage(t, o, key)
	RequireClean(t, o, key)
}

// TestGatewayTokenLimitLetsEveryCLIFinish: under a HarnessPolicy token
// limit far above what hello takes, every CLI's run passes. The gateway
// ends a run under a token limit when the agent cuts an answer before the
// provider's closing figures and asks again (an agent could otherwise
// spend without limit); no CLI may read its answers that way, or each of
// its runs under a token limit would end at its second request.
func TestGatewayTokenLimitLetsEveryCLIFinish(t *testing.T) {
	for _, c := range []Case{
		{Name: "tokens-claude", Adapter: harnessv1.AdapterClaudeCode, Fixture: "hello", Transport: harnessv1.MCPTransportHTTP,
			Creds: []Cred{{Env: "ANTHROPIC_API_KEY", Value: "sk-ant-api03-planted-tokens-claude-4f1a"}}},
		{Name: "tokens-codex", Adapter: harnessv1.AdapterCodex, Fixture: "hello", Transport: harnessv1.MCPTransportHTTP,
			Creds: []Cred{{Env: "OPENAI_API_KEY", Value: "sk-proj-planted-tokens-codex-7b2e"}}},
		{Name: "tokens-gemini", Adapter: harnessv1.AdapterGemini, Fixture: "hello", Transport: harnessv1.MCPTransportHTTP,
			Creds: []Cred{{Env: "GEMINI_API_KEY", Value: "hf-planted-tokens-gemini-93cd"}}},
		{Name: "tokens-opencode", Adapter: harnessv1.AdapterOpenCode, Fixture: "hello", Transport: harnessv1.MCPTransportHTTP,
			Creds: []Cred{{Env: "OPENAI_API_KEY", Value: "sk-proj-planted-tokens-opencode-0d5c"}}},
		{Name: "tokens-aider", Adapter: harnessv1.AdapterAider, Fixture: "edit",
			Creds: []Cred{{Env: "OPENAI_API_KEY", Value: "hf-planted-tokens-aider-6a81"}}},
	} {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			policy := &harnessv1.HarnessPolicy{ObjectMeta: metav1.ObjectMeta{Name: c.Name}, Spec: harnessv1.HarnessPolicySpec{
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "agents-" + c.Name}},
				Gateway:           &harnessv1.PolicyGateway{MaxTokensPerRun: ptr.To[int64](10_000_000)},
			}}
			if err := k8s.Create(context.Background(), policy); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), policy) })
			o := Run(t, c)
			RequirePass(t, o)
			RequireUsage(t, o, c.Creds[0].Value)
			RequireClean(t, o, c.Creds[0].Value)
			if c.Adapter != harnessv1.AdapterAider && len(o.Requests) < 2 {
				t.Errorf("%d model requests: the limit's check on a second request was never reached", len(o.Requests))
			}
		})
	}
}
