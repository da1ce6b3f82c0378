package adapters

import (
	"strings"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/gateway"
)

// TestGatewayRoute: which runs go through the model gateway, with which
// provider and header, and that the adapter then gets only placeholders.
func TestGatewayRoute(t *testing.T) {
	const key = "sk-real"
	for _, c := range []struct {
		name     string
		agent    harnessv1.AgentSpec
		creds    []Credential
		upstream string
		header   gateway.KeyHeader
		note     string // a part of the note when there is no route
	}{
		{name: "claude api key", agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterClaudeCode},
			creds:    []Credential{{Env: "ANTHROPIC_API_KEY", Value: []byte(key)}, {Env: "GITHUB_TOKEN", Value: []byte("gh")}},
			upstream: "https://api.anthropic.com", header: gateway.XAPIKey},
		{name: "claude oauth token by env", agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterClaudeCode, ProviderURL: "https://p.example/x"},
			creds: []Credential{{Env: "CLAUDE_CODE_OAUTH_TOKEN", Value: []byte(key)}}, upstream: "https://p.example/x", header: gateway.Bearer},
		{name: "claude login file", agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterClaudeCode},
			creds: []Credential{{File: harnessv1.CredentialFileClaudeCredentials, Value: []byte(key)}}, note: "ClaudeCredentials is a login"},
		{name: "codex key", agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex},
			creds: []Credential{{Env: "CODEX_API_KEY", Value: []byte(key)}}, upstream: "https://api.openai.com", header: gateway.Bearer},
		{name: "codex login file", agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex},
			creds: []Credential{{File: harnessv1.CredentialFileCodexAuth, Value: []byte(key)}}, note: "CodexAuth is a login"},
		{name: "gemini key", agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterGemini},
			creds: []Credential{{Env: "GEMINI_API_KEY", Value: []byte(key)}}, upstream: "https://generativelanguage.googleapis.com", header: gateway.XGoogAPIKey},
		{name: "opencode at a provider URL", agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterOpenCode, ProviderURL: "https://p.example"},
			creds: []Credential{{Env: "MY_KEY", Value: []byte(key)}}, upstream: "https://p.example", header: gateway.Bearer},
		{name: "opencode by model", agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterOpenCode, Model: "anthropic/x"},
			creds: []Credential{{Env: "ANTHROPIC_API_KEY", Value: []byte(key)}}, note: "only with spec.agent.providerURL"},
		{name: "aider anthropic key at a provider URL", agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterAider, ProviderURL: "http://127.0.0.1:9"},
			creds: []Credential{{Env: "ANTHROPIC_API_KEY", Value: []byte(key)}}, upstream: "http://127.0.0.1:9", header: gateway.Bearer},
		{name: "plain http beyond loopback", agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex, ProviderURL: "http://p.example"},
			creds: []Credential{{Env: "OPENAI_API_KEY", Value: []byte(key)}}, note: "the API key is delivered into the sandbox"},
		// No key at all (a model server on the LAN): nothing is
		// delivered, and the note does not say a key is.
		{name: "plain http beyond loopback, no key", agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterOpenCode, ProviderURL: "http://192.0.2.2:8096"},
			note: "the run delivers no API key; its usage is read from the agent's own output"},
		{name: "exec", agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec}, creds: []Credential{{Env: "OPENAI_API_KEY", Value: []byte(key)}}},
	} {
		r, note := GatewayRoute(c.agent, c.creds)
		if c.upstream == "" {
			if r != nil || (c.note == "") != (note == "") || !strings.Contains(note, c.note) {
				t.Errorf("%s: route %+v note %q, want none and a note with %q", c.name, r, note, c.note)
			}
			continue
		}
		if r == nil {
			t.Fatalf("%s: no route (%s)", c.name, note)
		}
		if r.Upstream != c.upstream || r.Header != c.header || string(r.Key) != key {
			t.Errorf("%s: route to %s in %s, want %s in %s with the key", c.name, r.Upstream, r.Header, c.upstream, c.header)
		}
		for _, cr := range r.Credentials {
			if string(cr.Value) == key {
				t.Errorf("%s: the adapter would get the real key in %s", c.name, cr.Env)
			}
		}
		if len(r.Credentials) != len(c.creds) {
			t.Errorf("%s: %d credentials, want %d", c.name, len(r.Credentials), len(c.creds))
		}
	}
}

// TestGatewayRouteScope: the organization and project the run selects
// become the gateway's, which it sets whatever the agent sends.
func TestGatewayRouteScope(t *testing.T) {
	r, _ := GatewayRoute(harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex}, []Credential{
		{Env: "OPENAI_API_KEY", Value: []byte("sk")}, {Env: "OPENAI_ORGANIZATION", Value: []byte("org-run")}, {Env: "OPENAI_PROJECT_ID", Value: []byte("proj-run")}})
	if r == nil || r.Scope["OpenAI-Organization"] != "org-run" || r.Scope["OpenAI-Project"] != "proj-run" || len(r.Scope) != 2 {
		t.Errorf("route %+v, want the run's organization and project", r)
	}
	r, _ = GatewayRoute(harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex}, []Credential{{Env: "OPENAI_API_KEY", Value: []byte("sk")}, {Env: "OPENAI_PROJECT", Value: []byte(" \n")}})
	if r == nil || r.Scope != nil {
		t.Errorf("route %+v, want no scope", r)
	}
}
