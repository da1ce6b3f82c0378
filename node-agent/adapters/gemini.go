package adapters

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Gemini runs Gemini CLI (npm @google/gemini-cli) headless:
//
//	gemini -p PROMPT -o stream-json -m MODEL --skip-trust --approval-mode yolo
//
// Everything it reads and writes is in the run's HOME: GEMINI_CLI_HOME is
// HOME, its settings are $GEMINI_CLI_HOME/.gemini/settings.json, and the
// node-wide system settings files are pointed into the run's home too, so a
// node's /etc/gemini-cli cannot change a run; the system settings there
// pin what a workspace's settings must not change.
//
// The settings turn usage statistics, telemetry and the update check off,
// select API-key auth (the only kind that works headless with a key), set
// model.maxSessionTurns from maxDecisions (exceeding it ends the CLI with
// exit code 53) and wire the run's MCP server as "harnessfacts" with
// trust: true and only its one tool included. "yolo" approves every tool
// call of the run, which is what a headless run needs: in the default mode
// the CLI removes the tools that would ask (edits, shell) from the model's
// list.
//
// The key is GEMINI_API_KEY (sent as x-goog-api-key); the CLI has no login
// file a run can carry, so credentials are env only. spec.agent.providerURL
// becomes GOOGLE_GEMINI_BASE_URL; the CLI then calls
// PROVIDER/v1beta/models/MODEL:streamGenerateContent.
type Gemini struct{ cfg Config }

// NewGemini returns the Gemini CLI adapter.
func NewGemini(cfg Config) Gemini { return Gemini{cfg: cfg} }

// Name is the adapter's name.
func (Gemini) Name() harnessv1.Adapter { return harnessv1.AdapterGemini }

// GeminiDefaultModel is the model a run gets when spec.agent.model is empty:
// Gemini CLI 0.61.0's own default. Naming it avoids the CLI's model-routing
// request ("auto").
const GeminiDefaultModel = "gemini-2.5-pro"

// geminiMCPAlias is the MCP server's name in the settings when the run's
// endpoint names none; Gemini CLI calls its tools mcp_<alias>_<tool>, so
// an alias has no "_".
const geminiMCPAlias = "harnessfacts"

// geminiProviderHost is the Gemini API the CLI calls with an API key.
const geminiProviderHost = "generativelanguage.googleapis.com"

// geminiPlaceholderKey stands in for a key when a run names a provider URL
// and selects no GEMINI_API_KEY (the fake provider needs none): the CLI
// refuses to start without one. It is not a secret.
const geminiPlaceholderKey = "harnessfacts-no-key"

// Version runs `gemini --version`.
func (g Gemini) Version(ctx context.Context) (string, error) {
	cmd, err := g.cfg.command("gemini")
	if err != nil {
		return "", err
	}
	return cliVersion(ctx, cmd, "--version")
}

// Prepare builds the command line, environment and settings.
func (g Gemini) Prepare(in Input) (*Invocation, error) {
	if err := refuseOwnedFlags(harnessv1.AdapterGemini, in.Agent.ExtraArgs, "-o", "--output-format", "-m", "--model", "--approval-mode", "-y", "--yolo",
		"-p", "--prompt"); err != nil {
		return nil, err
	}
	cmd, err := g.cfg.command("gemini")
	if err != nil {
		return nil, err
	}
	model := in.Agent.Model
	if model == "" {
		model = GeminiDefaultModel
	}
	haveKey := false
	for _, c := range in.Credentials {
		if c.File != "" {
			return nil, fmt.Errorf("the gemini adapter cannot place credential file %s: Gemini CLI takes its key from env GEMINI_API_KEY", c.File)
		}
		if c.Env == "GEMINI_API_KEY" {
			haveKey = true
		}
	}

	settings := map[string]any{
		"security": map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"}},
		"privacy":  map[string]any{"usageStatisticsEnabled": false},
		"telemetry": map[string]any{
			"enabled": false, "logPrompts": false,
		},
		"general": map[string]any{
			"enableAutoUpdate": false, "enableAutoUpdateNotification": false,
		},
		// The CLI loads the first .env it finds from the workspace up to
		// "/" (the node's own folders, read-only in the sandbox) into its
		// environment; with this only the run's HOME/.env, which there is
		// none of, would count.
		"advanced": map[string]any{"ignoreLocalEnv": true},
	}
	if in.MaxDecisions > 0 {
		settings["model"] = map[string]any{"maxSessionTurns": in.MaxDecisions}
	}
	alias := in.MCP.Server
	if alias == "" {
		alias = geminiMCPAlias
	}
	if strings.Contains(alias, "_") {
		// Gemini CLI splits mcp_<alias>_<tool> at the first "_".
		return nil, fmt.Errorf("MCP server name %q: Gemini CLI needs a name without \"_\"", alias)
	}
	switch in.MCP.Transport {
	case harnessv1.MCPTransportHTTP:
		// httpUrl is streamable HTTP; "url" would mean SSE.
		settings["mcpServers"] = map[string]any{alias: geminiMCPServer(in.MCP, map[string]any{"httpUrl": in.MCP.URL})}
	case harnessv1.MCPTransportStdio:
		if len(in.MCP.Command) == 0 {
			return nil, errors.New("the run's MCP transport is Stdio but it has no command")
		}
		server := map[string]any{"command": in.MCP.Command[0], "args": append([]string{}, in.MCP.Command[1:]...)}
		if len(in.MCP.Env) > 0 {
			server["env"] = in.MCP.Env
		}
		settings["mcpServers"] = map[string]any{alias: geminiMCPServer(in.MCP, server)}
	}
	settingsJSON, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		return nil, err
	}
	// The workspace's .gemini/settings.json is the fixture's, and it
	// overrides the user settings above; system settings override it. So
	// what must hold whatever the fixture says is pinned there: no hook
	// (a SessionStart hook runs before the model decides anything), no MCP
	// server but the run's (the workspace's are started at the CLI's
	// start), no tool discovery or call command, no telemetry, no local
	// .env, the key's auth.
	system := map[string]any{
		"hooksConfig": map[string]any{"enabled": false},
		"mcp":         map[string]any{"allowed": []string{alias}, "serverCommand": ""},
		"tools":       map[string]any{"discoveryCommand": "", "callCommand": ""},
		"telemetry":   settings["telemetry"],
		"privacy":     settings["privacy"],
		"advanced":    settings["advanced"],
		"security":    settings["security"],
	}
	systemJSON, err := json.MarshalIndent(system, "", "  ")
	if err != nil {
		return nil, err
	}

	// No -p: with stdin not a terminal Gemini CLI runs headless and takes
	// its prompt from stdin, off argv, where every host user could read it.
	argv := []string{cmd, "-o", "stream-json", "-m", model, "--skip-trust", "--approval-mode", "yolo"}
	inv := &Invocation{
		Argv:  append(argv, in.Agent.ExtraArgs...),
		Stdin: []byte(in.Prompt),
		Env: []string{
			"GEMINI_CLI_HOME=" + in.Home,
			"GEMINI_CLI_SYSTEM_SETTINGS_PATH=" + filepath.Join(in.Home, ".gemini", "system-settings.json"),
			"GEMINI_CLI_SYSTEM_DEFAULTS_PATH=" + filepath.Join(in.Home, ".gemini", "system-defaults.json"),
			// No colour codes in the log the harness parses.
			"NO_COLOR=1",
		},
		Files: map[string][]byte{
			filepath.Join(".gemini", "settings.json"):        append(settingsJSON, '\n'),
			filepath.Join(".gemini", "system-settings.json"): append(systemJSON, '\n'),
		},
	}
	inv.ReadOnly, inv.PathDirs = g.cfg.mounts(cmd)
	if in.Agent.ProviderURL != "" {
		u, err := url.Parse(in.Agent.ProviderURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("spec.agent.providerURL %q is not an http(s) URL", in.Agent.ProviderURL)
		}
		inv.Env = append(inv.Env, "GOOGLE_GEMINI_BASE_URL="+in.Agent.ProviderURL)
		if !haveKey {
			inv.Env = append(inv.Env, "GEMINI_API_KEY="+geminiPlaceholderKey)
		}
	} else {
		inv.ProviderHosts = []string{geminiProviderHost}
	}
	inv.Env = append(inv.Env, credentialEnv(in.Credentials)...)
	return inv, nil
}

// geminiMCPServer is one mcpServers entry: trusted (no confirmation) and
// limited to the fixture's tool.
func geminiMCPServer(ep MCPEndpoint, entry map[string]any) map[string]any {
	entry["trust"] = true
	if ep.Tool != "" {
		entry["includeTools"] = []string{ep.Tool}
	}
	return entry
}

// geminiEvent is one line of `gemini -o stream-json`.
type geminiEvent struct {
	Type   string `json:"type"`
	Role   string `json:"role"`
	Status string `json:"status"`
	Error  *struct {
		Type string `json:"type"`
	} `json:"error"`
}

// geminiDenials are the tool error types of a call the CLI itself refused.
var geminiDenials = map[string]bool{"policy_violation": true, "path_not_in_workspace": true}

// Activity reads the stream-json events. A turn is one model reply: the
// assistant messages and tool_use events between two batches of tool
// results (the CLI runs every call of a reply, then asks the model again).
// Tool calls are the tool_use events; permission denials the tool results
// the CLI refused by policy or because the path is outside the workspace.
func (Gemini) Activity(log []byte) Activity {
	var a Activity
	inReply := false
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if !eventLine(line) {
			continue
		}
		var e geminiEvent
		if json.Unmarshal(line, &e) != nil {
			continue
		}
		switch e.Type {
		case "message":
			if e.Role != "assistant" {
				continue
			}
		case "tool_use":
			a.ToolCalls++
		case "tool_result":
			inReply = false
			if e.Status == "error" && e.Error != nil && geminiDenials[e.Error.Type] {
				a.PermissionDenials++
			}
			continue
		default:
			continue
		}
		if !inReply {
			a.Turns++
			inReply = true
		}
	}
	return a
}
