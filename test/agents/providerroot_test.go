package agents

import (
	"slices"
	"strings"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
)

// A providerURL written as an SDK's base URL, with the API's version at its
// end (OPENAI_BASE_URL's habit): the CLI, which adds the version itself, is
// given the provider's root, and status.agent.notes says so. Codex reaches
// the provider directly; Claude Code through the model gateway.
func TestProviderURLWithItsVersion(t *testing.T) {
	for _, c := range []struct {
		name  string
		c     Case
		check func(*testing.T, *Outcome)
	}{
		{"codex", Case{Name: "codex-v1", Adapter: harnessv1.AdapterCodex, Fixture: "hello", Transport: harnessv1.MCPTransportHTTP,
			ProviderURL: providerURL + "/s/hello/v1"},
			func(t *testing.T, o *Outcome) {
				requireCodexHello(t, o, harnessv1.MCPTransportHTTP, adapters.CodexDefaultModel)
			}},
		{"claude-code", Case{Name: "claude-v1", Adapter: harnessv1.AdapterClaudeCode, Fixture: "hello", Transport: harnessv1.MCPTransportHTTP,
			Creds: []Cred{{Env: "ANTHROPIC_API_KEY", Value: "sk-ant-api03-planted-claude-v1-77c1e0"}}, ProviderURL: providerTLSURL + "/s/hello/v1"},
			func(t *testing.T, o *Outcome) {
				requireClaudeHello(t, o, harnessv1.MCPTransportHTTP)
				RequireKeyArrived(t, o, "sk-ant-api03-planted-claude-v1-77c1e0")
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := Run(t, c.c)
			c.check(t, o)
			ag := o.Run.Status.Agent
			if ag == nil || !slices.ContainsFunc(ag.Notes, func(n string) bool {
				return strings.Contains(n, c.c.ProviderURL+" ends in an API version")
			}) {
				t.Errorf("status.agent.notes do not say the providerURL's version was dropped: %+v", ag)
			}
			for _, r := range o.Requests {
				if strings.Contains(r.Path, "/v1/v1/") {
					t.Errorf("the provider got %s: the version twice", r.Path)
				}
			}
		})
	}
}
