package adapters

import (
	"fmt"
	"slices"
	"strings"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/gateway"
)

// GatewayPlaceholder is the key a CLI gets in place of the run's real one
// when its requests go through the run's model gateway: not a secret, and
// replaced by the gateway before anything reaches the provider.
const GatewayPlaceholder = "harnessfacts-gateway-placeholder"

// ModelRoute is how a run's model requests go through the model gateway.
type ModelRoute struct {
	// Upstream is the provider's base URL: spec.agent.providerURL, else the
	// adapter's provider.
	Upstream string
	// Header is where the provider takes Key, the run's real key (nil when
	// the run selects none, as with a local provider that needs none).
	Header gateway.KeyHeader
	Key    []byte
	// Credentials are the run's credentials as the adapter gets them: each
	// model key replaced by GatewayPlaceholder.
	Credentials []Credential
	// Scope are the headers that choose the key's organization or project
	// (gateway.ScopeHeaders) as the run selected them: the gateway sets
	// these and drops the agent's.
	Scope map[string]string
}

// scopeEnv are the variables the OpenAI SDKs (Codex, litellm's) send as
// the OpenAI-Organization and OpenAI-Project headers.
var scopeEnv = map[string]string{"OPENAI_ORGANIZATION": "OpenAI-Organization", "OPENAI_ORG_ID": "OpenAI-Organization", "OPENAI_PROJECT": "OpenAI-Project", "OPENAI_PROJECT_ID": "OpenAI-Project"}

// IsScopeEnv says whether name is a variable that chooses a key's
// organization or project (no key itself).
func IsScopeEnv(name string) bool {
	_, ok := scopeEnv[name]
	return ok
}

// modelKey is an env credential that is a model API key, and the header it
// goes in.
type modelKey struct {
	env    string
	header gateway.KeyHeader
}

// modelKeys are, per adapter, the env credentials that are model API keys
// (in the order the adapter prefers them) and the header each goes in.
var modelKeys = map[harnessv1.Adapter][]modelKey{
	harnessv1.AdapterClaudeCode: {{"ANTHROPIC_API_KEY", gateway.XAPIKey}, {"ANTHROPIC_AUTH_TOKEN", gateway.Bearer}, {"CLAUDE_CODE_OAUTH_TOKEN", gateway.Bearer}},
	harnessv1.AdapterCodex:      {{"OPENAI_API_KEY", gateway.Bearer}, {"CODEX_API_KEY", gateway.Bearer}},
	harnessv1.AdapterGemini:     {{"GEMINI_API_KEY", gateway.XGoogAPIKey}},
	// With a provider URL both speak Chat Completions with a bearer key,
	// whichever variable holds it (see their Prepare).
	harnessv1.AdapterOpenCode: {{"OPENAI_API_KEY", gateway.Bearer}, {"ANTHROPIC_API_KEY", gateway.Bearer}, {"GEMINI_API_KEY", gateway.Bearer}},
	harnessv1.AdapterAider:    {{"OPENAI_API_KEY", gateway.Bearer}, {"ANTHROPIC_API_KEY", gateway.Bearer}},
}

// defaultUpstream is each adapter's provider when the run names no
// providerURL; OpenCode and Aider choose theirs by model, in dialects the
// gateway would have to translate, so they use the gateway only with a
// providerURL.
var defaultUpstream = map[harnessv1.Adapter]string{
	harnessv1.AdapterClaudeCode: "https://api.anthropic.com",
	harnessv1.AdapterCodex:      "https://api.openai.com",
	harnessv1.AdapterGemini:     "https://generativelanguage.googleapis.com",
}

// GatewayRoute says how the run's model requests go through the model
// gateway, or, when they cannot, why (for status.agent.notes; "" when the
// adapter has no model path the gateway knows, as exec). Only API keys
// delivered by env can: a login file (an OAuth login that the CLI refreshes
// itself, against its own hosts) is delivered into the sandbox as before.
func GatewayRoute(agent harnessv1.AgentSpec, creds []Credential) (*ModelRoute, string) {
	keys, ok := modelKeys[agent.Adapter]
	if !ok {
		return nil, ""
	}
	for _, c := range creds {
		if c.File != "" {
			return nil, fmt.Sprintf("the model gateway is off for this run: its credential file %s is a login the CLI uses and refreshes itself, "+
				"so it is delivered into the sandbox, where the agent can read it", c.File)
		}
	}
	// What the gateway's absence means for the run: its key in the
	// sandbox, or (a run with no key, as for a local model server) only
	// the usage, read from the agent's own output.
	keyNote := "the API key is delivered into the sandbox, where the agent can read it"
	if !slices.ContainsFunc(creds, func(c Credential) bool {
		return c.Env != "" && (agent.Adapter == harnessv1.AdapterOpenCode || slices.ContainsFunc(keys, func(k modelKey) bool { return k.env == c.Env }))
	}) {
		keyNote = "the run delivers no API key; its usage is read from the agent's own output"
	}
	upstream := agent.ProviderURL
	if upstream == "" {
		upstream = defaultUpstream[agent.Adapter]
	}
	if upstream == "" {
		return nil, fmt.Sprintf("the model gateway is off for this run: %s chooses its provider by model, and the gateway serves it only with spec.agent.providerURL; %s", agent.Adapter, keyNote)
	}
	if _, err := gateway.CheckUpstream(upstream); err != nil {
		return nil, fmt.Sprintf("the model gateway is off for this run (%v); %s", err, keyNote)
	}
	r := &ModelRoute{Upstream: upstream}
	for _, c := range creds {
		// An empty one selects nothing (the key's default), as the SDKs
		// read an empty variable.
		if h, ok := scopeEnv[c.Env]; ok && strings.TrimSpace(string(c.Value)) != "" {
			if r.Scope == nil {
				r.Scope = map[string]string{}
			}
			r.Scope[h] = string(c.Value)
		}
	}
	for _, k := range keys {
		i := slices.IndexFunc(creds, func(c Credential) bool { return c.Env == k.env })
		if i >= 0 && r.Key == nil {
			r.Header, r.Key = k.header, creds[i].Value
		}
	}
	if r.Key == nil && agent.Adapter == harnessv1.AdapterOpenCode {
		// OpenCode takes its key from whatever variable the run names.
		for _, c := range creds {
			if c.Env != "" {
				r.Header, r.Key = gateway.Bearer, c.Value
				break
			}
		}
	}
	for _, c := range creds {
		isKey := slices.ContainsFunc(keys, func(k modelKey) bool {
			return k.env == c.Env
		}) || (agent.Adapter == harnessv1.AdapterOpenCode && string(c.Value) == string(r.Key))
		if isKey {
			c.Value = []byte(GatewayPlaceholder)
		}
		r.Credentials = append(r.Credentials, c)
	}
	return r, ""
}
