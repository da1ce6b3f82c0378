package adapters

import (
	"fmt"
	"net/url"
	"strings"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// ProviderRoot is the provider's root that an agent CLI's adapter needs: the
// CLIs add the API's version to the URL themselves (Claude Code /v1/messages,
// Codex and Aider /v1/..., Gemini CLI /v1beta/...), so a providerURL written
// as its SDK's base URL (https://openrouter.ai/api/v1, OPENAI_BASE_URL's
// habit) would reach the provider as .../v1/v1/.... A last path segment v1
// or v1beta is dropped, and the note says so; the exec and oracle adapters,
// whose commands are the run author's, get the URL as written.
func ProviderRoot(agent harnessv1.AgentSpec) (root, note string) {
	raw := agent.ProviderURL
	if raw == "" || agent.Adapter == harnessv1.AdapterExec || agent.Adapter == harnessv1.AdapterOracle {
		return raw, ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.RawQuery != "" || u.Fragment != "" {
		return raw, ""
	}
	p := strings.TrimSuffix(u.Path, "/")
	i := strings.LastIndexByte(p, '/')
	if i < 0 || p[i+1:] != "v1" && p[i+1:] != "v1beta" {
		return raw, ""
	}
	written := u.Redacted()
	u.Path, u.RawPath = p[:i], ""
	return u.String(), fmt.Sprintf("spec.agent.providerURL %s ends in an API version, which %s adds to the URL itself: it was given %s",
		written, agent.Adapter, u.Redacted())
}
