package adapters

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// OpenCode runs OpenCode (npm opencode-ai):
//
//	opencode run --format json [-m PROVIDER/MODEL] PROMPT
//
// Its configuration is one file in the run's home, named by OPENCODE_CONFIG:
//
//   - permission: edits and bash allowed, external_directory denied (the
//     seed's policy; in `run` anything that would "ask" is rejected), the
//     fixture's MCP tool allowed by name. The same policy is also passed in
//     OPENCODE_PERMISSION, which OpenCode merges after every config file, so
//     a workspace's own opencode.json cannot widen it.
//   - mcp: the run's server, {"type":"remote","url":…} (transport HTTP) or
//     {"type":"local","command":[…]} (transport Stdio); its tools reach the
//     model as <server>_<tool>.
//   - agent.build.steps from limits.maxDecisions; agent.title.disable, share
//     disabled and autoupdate off, with OPENCODE_DISABLE_MODELS_FETCH and
//     OPENCODE_DISABLE_AUTOUPDATE, so nothing phones home.
//   - with spec.agent.providerURL: a provider "harnessfacts" through
//     @ai-sdk/openai-compatible (bundled in the binary) with options.baseURL
//     PROVIDERURL/v1, so requests go to PROVIDERURL/v1/chat/completions;
//     its apiKey is "{env:VAR}" of the credential delivered as env, never
//     the value itself.
//
// Credentials: OpenCodeAuth is placed as $XDG_DATA_HOME/opencode/auth.json
// (with a provider URL its "harnessfacts" entry is the key); OPENAI_API_KEY,
// ANTHROPIC_API_KEY and GEMINI_API_KEY pass as env.
//
// OpenCode starts a background `npm install @opencode-ai/plugin` in each of
// its config folders ($XDG_CONFIG_HOME/opencode first) unless that folder
// already has a node_modules folder and a package-lock.json listing the
// package: offline it would be a refused connection. The adapter writes
// both (an empty node_modules and a lock naming the package), so OpenCode
// sees nothing to install; plugins are not used by these runs.
type OpenCode struct{ cfg Config }

// NewOpenCode returns the OpenCode adapter.
func NewOpenCode(cfg Config) OpenCode { return OpenCode{cfg: cfg} }

// Name is the adapter's name.
func (OpenCode) Name() harnessv1.Adapter { return harnessv1.AdapterOpenCode }

// Version runs `opencode --version`.
func (o OpenCode) Version(ctx context.Context) (string, error) {
	cmd, err := o.cfg.command("opencode")
	if err != nil {
		return "", err
	}
	return cliVersion(ctx, cmd, "--version")
}

// OpenCode's files below the run's home. The node-agent sets
// XDG_CONFIG_HOME=$HOME/.config and XDG_DATA_HOME=$HOME/.local/share.
const (
	openCodeConfigFile = "opencode-harnessfacts.json"
	openCodeAuthFile   = ".local/share/opencode/auth.json"
	openCodeGlobalDir  = ".config/opencode"
	// openCodeProvider is the provider ID of spec.agent.providerURL.
	openCodeProvider = "harnessfacts"
	// openCodeDefaultModel names the model at a provider URL when
	// spec.agent.model is empty.
	openCodeDefaultModel = "default"
)

// openCodeKeyEnvs are the credential variables OpenCode's providers read,
// in the order one is chosen as the key of the provider URL.
var openCodeKeyEnvs = []string{"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"}

// openCodePermission is the seed's policy.
func openCodePermission(mcp MCPEndpoint) map[string]string {
	p := map[string]string{"edit": "allow", "bash": "allow", "external_directory": "deny"}
	if mcp.Transport == harnessv1.MCPTransportHTTP || mcp.Transport == harnessv1.MCPTransportStdio {
		p[mcp.Server+"_"+mcp.Tool] = "allow"
	}
	return p
}

// Prepare writes the config and builds the command line.
func (o OpenCode) Prepare(in Input) (*Invocation, error) {
	if err := refuseOwnedFlags(harnessv1.AdapterOpenCode, in.Agent.ExtraArgs, "--format", "-m", "--model", "--agent"); err != nil {
		return nil, err
	}
	cmd, err := o.cfg.command("opencode")
	if err != nil {
		return nil, err
	}
	inv := &Invocation{}
	inv.ReadOnly, inv.PathDirs = o.cfg.mounts(cmd)
	inv.Files = map[string][]byte{}

	var envs []string
	for _, c := range in.Credentials {
		switch {
		case c.File == harnessv1.CredentialFileOpenCodeAuth:
			inv.Files[openCodeAuthFile] = c.Value
		case c.File != "":
			return nil, fmt.Errorf("the opencode adapter cannot place credential file %s; it takes OpenCodeAuth or env", c.File)
		case c.Env != "":
			envs = append(envs, c.Env)
		}
	}
	if len(in.Credentials) == 0 && in.Agent.ProviderURL == "" {
		// OpenCode would fall back to its own free models at opencode.ai,
		// which is no provider the run named.
		return nil, errors.New("the opencode adapter needs a credential (OpenCodeAuth, OPENAI_API_KEY, ANTHROPIC_API_KEY or GEMINI_API_KEY) or spec.agent.providerURL")
	}
	// The provider URL's key: a provider key variable first, else any
	// variable the run delivers.
	keyEnv := ""
	for _, want := range openCodeKeyEnvs {
		if slices.Contains(envs, want) {
			keyEnv = want
			break
		}
	}
	if keyEnv == "" && len(envs) > 0 {
		keyEnv = envs[0]
	}

	perm := openCodePermission(in.MCP)
	conf := map[string]any{
		"$schema":    "https://opencode.ai/config.json",
		"permission": perm,
		"share":      "disabled",
		"autoupdate": false,
		"agent": map[string]any{
			"title": map[string]any{"disable": true},
		},
	}
	if in.MaxDecisions > 0 {
		conf["agent"].(map[string]any)["build"] = map[string]any{"steps": in.MaxDecisions}
	}
	switch in.MCP.Transport {
	case harnessv1.MCPTransportHTTP:
		conf["mcp"] = map[string]any{in.MCP.Server: map[string]any{"type": "remote", "url": in.MCP.URL, "enabled": true}}
	case harnessv1.MCPTransportStdio:
		server := map[string]any{"type": "local", "command": in.MCP.Command, "enabled": true}
		if len(in.MCP.Env) > 0 {
			server["environment"] = in.MCP.Env
		}
		conf["mcp"] = map[string]any{in.MCP.Server: server}
	}

	model := in.Agent.Model
	if in.Agent.ProviderURL != "" {
		name := strings.TrimPrefix(model, openCodeProvider+"/")
		if name == "" {
			name = openCodeDefaultModel
		}
		options := map[string]any{"baseURL": strings.TrimSuffix(in.Agent.ProviderURL, "/") + "/v1"}
		if keyEnv != "" {
			options["apiKey"] = "{env:" + keyEnv + "}"
		}
		conf["provider"] = map[string]any{openCodeProvider: map[string]any{
			"npm":     "@ai-sdk/openai-compatible",
			"name":    "HarnessFacts provider URL",
			"options": options,
			"models":  map[string]any{name: map[string]any{"name": name}},
		}}
		model = openCodeProvider + "/" + name
	} else {
		inv.ProviderHosts = openCodeHosts(model)
	}
	if model != "" {
		conf["model"] = model
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return nil, err
	}
	inv.Files[openCodeConfigFile] = b
	permJSON, err := json.Marshal(perm)
	if err != nil {
		return nil, err
	}
	// The plugin install OpenCode would start: see the type's comment.
	inv.Files[openCodeGlobalDir+"/node_modules/.harnessfacts"] = []byte("OpenCode plugins are not installed in HarnessFacts runs\n")
	inv.Files[openCodeGlobalDir+"/package.json"] = []byte(`{"dependencies":{"@opencode-ai/plugin":"*"}}` + "\n")
	inv.Files[openCodeGlobalDir+"/package-lock.json"] = []byte(`{"lockfileVersion":3,"packages":{"":{"dependencies":{"@opencode-ai/plugin":"*"}}}}` + "\n")

	inv.Argv = []string{cmd, "run", "--format", "json"}
	if model != "" {
		inv.Argv = append(inv.Argv, "-m", model)
	}
	inv.Argv = append(inv.Argv, in.Agent.ExtraArgs...)
	// `opencode run` reads the message from stdin when it is not a
	// terminal: off argv, where every host user could read it.
	inv.Stdin = []byte(in.Prompt)
	inv.Env = append([]string{
		"OPENCODE_CONFIG=" + filepath.Join(in.Home, openCodeConfigFile),
		"OPENCODE_PERMISSION=" + string(permJSON),
		"OPENCODE_DISABLE_MODELS_FETCH=1",
		"OPENCODE_DISABLE_AUTOUPDATE=1",
		"OPENCODE_DISABLE_SHARE=1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD=1",
		// The workspace's opencode.json and .opencode/ are the fixture's:
		// their plugins and MCP servers start with OpenCode, before the
		// model decides anything, in the agent's sandbox with its home,
		// credentials and MCP token. The run's config alone applies.
		"OPENCODE_DISABLE_PROJECT_CONFIG=1",
	}, credentialEnv(in.Credentials)...)
	return inv, nil
}

// openCodeHosts are the provider hosts of model ("provider/model"); all
// three known ones when the provider is not one of them (OpenCode picks a
// default model from the credentials it finds).
func openCodeHosts(model string) []string {
	provider, _, _ := strings.Cut(model, "/")
	switch provider {
	case "anthropic":
		return []string{"api.anthropic.com"}
	case "openai":
		return []string{"api.openai.com"}
	case "google":
		return []string{"generativelanguage.googleapis.com"}
	}
	return []string{"api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com"}
}

// Activity reads `--format json`'s events: one step_start per model turn,
// one tool_use per tool call; a tool_use whose error is OpenCode's
// permission refusal (a deny rule, or an "ask" that `run` rejects) is a
// permission denial.
func (OpenCode) Activity(log []byte) Activity {
	var a Activity
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if !eventLine(line) {
			continue
		}
		var ev struct {
			Type string `json:"type"`
			Part struct {
				State struct {
					Status string `json:"status"`
					Error  string `json:"error"`
				} `json:"state"`
			} `json:"part"`
		}
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		switch ev.Type {
		case "step_start":
			a.Turns++
		case "tool_use":
			a.ToolCalls++
			if ev.Part.State.Status == "error" && openCodeDenied(ev.Part.State.Error) {
				a.PermissionDenials++
			}
		}
	}
	return a
}

// openCodeDenied recognises OpenCode's permission errors
// (PermissionDeniedError, PermissionRejectedError).
func openCodeDenied(msg string) bool {
	return strings.HasPrefix(msg, "The user has specified a rule which prevents you from using this specific tool call") ||
		strings.HasPrefix(msg, "The user rejected permission to use this specific tool call")
}
