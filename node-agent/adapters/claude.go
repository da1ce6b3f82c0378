package adapters

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// ClaudeCode runs Claude Code (npm @anthropic-ai/claude-code) headless:
//
//	claude -p --output-format stream-json --verbose --max-turns N
//	  --permission-mode acceptEdits --allowedTools Bash,Write,Edit,Read[,mcp__S__T]
//	  [--mcp-config $HOME/.claude/harnessfacts-mcp.json --strict-mcp-config]
//	  [--model M] [extraArgs...] -- PROMPT
//
// Everything Claude Code writes goes to CLAUDE_CONFIG_DIR=$HOME/.claude in
// the run's home. The MCP server is given in a file rather than as inline
// JSON on the command line: its HTTP URL carries the run's unpredictable
// path, and command lines are world-readable on a node.
type ClaudeCode struct{ cfg Config }

// NewClaudeCode returns the Claude Code adapter.
func NewClaudeCode(cfg Config) ClaudeCode { return ClaudeCode{cfg: cfg} }

// Name is claude-code.
func (ClaudeCode) Name() harnessv1.Adapter { return harnessv1.AdapterClaudeCode }

// claudeCommand is Claude Code's command name.
const claudeCommand = "claude"

// Version runs `claude --version` ("2.1.197 (Claude Code)").
func (c ClaudeCode) Version(ctx context.Context) (string, error) {
	cmd, err := c.cfg.command(claudeCommand)
	if err != nil {
		return "", err
	}
	return cliVersion(ctx, cmd, "--version")
}

// ClaudeConfigDir is CLAUDE_CONFIG_DIR, relative to the run's home.
const ClaudeConfigDir = ".claude"

// claudeMCPConfig is the --mcp-config file, relative to the run's home.
var claudeMCPConfig = ClaudeConfigDir + "/harnessfacts-mcp.json"

// claudeTools are the built-in tools a run may use without asking: Claude
// Code in -p mode denies whatever would need a prompt (and says so in
// permission_denials). acceptEdits already lets Write and Edit change files
// in the workspace; Bash needs the allow-list.
var claudeTools = []string{"Bash", "Write", "Edit", "Read"}

// claudeCredentialEnv are the variables Claude Code takes a credential from.
var claudeCredentialEnv = []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"}

// ClaudePlaceholderKey is the ANTHROPIC_API_KEY of a run that names a
// providerURL and selects no credential: without any key Claude Code stops
// with "Not logged in" before asking the provider, and a provider that
// needs none (harnessfacts fake-provider, a local gateway) ignores it.
const ClaudePlaceholderKey = "harnessfacts-no-credential"

// claudeQuiet turns off what Claude Code does besides the task: telemetry,
// error reporting, the auto-updater, feedback surveys and the other
// "nonessential" calls (without them it also sends a title-generation
// request per session).
var claudeQuiet = []string{
	"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	"DISABLE_AUTOUPDATER=1",
	"DISABLE_TELEMETRY=1",
	"DISABLE_ERROR_REPORTING=1",
	"DISABLE_BUG_COMMAND=1",
	"CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY=1",
	"CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1",
}

// Prepare builds the command line, the environment and the MCP config file.
func (c ClaudeCode) Prepare(in Input) (*Invocation, error) {
	if err := refuseOwnedFlags(harnessv1.AdapterClaudeCode, in.Agent.ExtraArgs, "-p", "--print", "--output-format", "--input-format", "--max-turns",
		"--permission-mode", "--dangerously-skip-permissions", "--mcp-config", "--strict-mcp-config", "--allowedTools", "--allowed-tools", "--model",
		"--settings", "--setting-sources"); err != nil {
		return nil, err
	}
	cmd, err := c.cfg.command(claudeCommand)
	if err != nil {
		return nil, err
	}
	if in.Home == "" || !filepath.IsAbs(in.Home) {
		return nil, fmt.Errorf("the claude-code adapter needs the run's home as an absolute path, got %q", in.Home)
	}
	configDir := filepath.Join(in.Home, ClaudeConfigDir)
	inv := &Invocation{Files: map[string][]byte{}}
	inv.ReadOnly, inv.PathDirs = c.cfg.mounts(cmd)

	tools := append([]string{}, claudeTools...)
	argv := []string{cmd, "-p", "--output-format", "stream-json", "--verbose"}
	if in.MaxDecisions > 0 {
		argv = append(argv, "--max-turns", strconv.Itoa(int(in.MaxDecisions)))
	}
	// The run's own settings only: project settings (.claude/settings.json
	// and settings.local.json in the workspace) are the fixture's, and
	// their hooks, apiKeyHelper and env run or redirect the CLI before
	// and without any decision of the model, in the agent's sandbox with
	// its home, its credentials and the MCP token. A fixture still gives
	// the agent instructions (CLAUDE.md, the prompt).
	argv = append(argv, "--setting-sources", "user", "--permission-mode", "acceptEdits")
	mcpConfig, mcpTool, err := claudeMCP(in.MCP)
	if err != nil {
		return nil, err
	}
	if mcpConfig != nil {
		inv.Files[claudeMCPConfig] = mcpConfig
		tools = append(tools, mcpTool)
		// --strict-mcp-config: this server only, none from a settings file
		// or an .mcp.json the workspace might carry.
		argv = append(argv, "--mcp-config", filepath.Join(in.Home, filepath.FromSlash(claudeMCPConfig)), "--strict-mcp-config")
	}
	argv = append(argv, "--allowedTools", strings.Join(tools, ","))
	if in.Agent.Model != "" {
		argv = append(argv, "--model", in.Agent.Model)
	}
	argv = append(argv, in.Agent.ExtraArgs...)
	// The prompt goes on stdin, which `claude -p` reads when no prompt is
	// given: on argv every host user could read it.
	inv.Argv = argv
	inv.Stdin = []byte(in.Prompt)

	inv.Env = append([]string{"CLAUDE_CONFIG_DIR=" + configDir}, claudeQuiet...)
	if in.Agent.ProviderURL != "" {
		inv.Env = append(inv.Env, "ANTHROPIC_BASE_URL="+strings.TrimSuffix(in.Agent.ProviderURL, "/"))
	} else {
		inv.ProviderHosts = []string{"api.anthropic.com"}
	}
	hasCredential := false
	for _, cr := range in.Credentials {
		switch {
		case cr.File == harnessv1.CredentialFileClaudeCredentials:
			inv.Files[ClaudeConfigDir+"/.credentials.json"] = cr.Value
			hasCredential = true
			if in.Agent.ProviderURL == "" {
				// A subscription login refreshes its access token here.
				inv.ProviderHosts = append(inv.ProviderHosts, "platform.claude.com")
			}
		case cr.File != "":
			return nil, fmt.Errorf("the claude-code adapter cannot place credential file %s (it knows %s)", cr.File, harnessv1.CredentialFileClaudeCredentials)
		default:
			for _, name := range claudeCredentialEnv {
				hasCredential = hasCredential || cr.Env == name
			}
		}
	}
	switch {
	case hasCredential:
	case in.Agent.ProviderURL != "":
		inv.Env = append(inv.Env, "ANTHROPIC_API_KEY="+ClaudePlaceholderKey)
	case len(in.Credentials) == 0:
		// Claude Code would stop with "Not logged in" and exit 0, and the
		// run would fail its checks for no visible reason.
		return nil, fmt.Errorf("the claude-code adapter needs a credential to reach Anthropic: select one as env %s, or as file %s, or name a spec.agent.providerURL",
			strings.Join(claudeCredentialEnv, ", "), harnessv1.CredentialFileClaudeCredentials)
	}
	inv.Env = append(inv.Env, credentialEnv(in.Credentials)...)
	return inv, nil
}

// claudeMCP is the --mcp-config file for the run's MCP server and the
// allow-list name of its tool (mcp__SERVER__TOOL); nil for transport None.
func claudeMCP(ep MCPEndpoint) ([]byte, string, error) {
	var server map[string]any
	switch ep.Transport {
	case harnessv1.MCPTransportHTTP:
		if ep.URL == "" {
			return nil, "", fmt.Errorf("MCP transport HTTP without a URL")
		}
		server = map[string]any{"type": "http", "url": ep.URL}
	case harnessv1.MCPTransportStdio:
		if len(ep.Command) == 0 {
			return nil, "", fmt.Errorf("MCP transport Stdio without a command")
		}
		server = map[string]any{"type": "stdio", "command": ep.Command[0], "args": append([]string{}, ep.Command[1:]...)}
		if len(ep.Env) > 0 {
			server["env"] = ep.Env
		}
	default:
		return nil, "", nil
	}
	if ep.Server == "" || ep.Tool == "" {
		return nil, "", fmt.Errorf("the MCP endpoint has no server or tool name")
	}
	b, err := json.MarshalIndent(map[string]any{"mcpServers": map[string]any{ep.Server: server}}, "", "  ")
	if err != nil {
		return nil, "", err
	}
	return b, "mcp__" + ep.Server + "__" + ep.Tool, nil
}

// claudeEvent is the part of a stream-json line Activity reads.
type claudeEvent struct {
	Type    string `json:"type"`
	Message *struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Content []struct {
			Type string `json:"type"`
			ID   string `json:"id"`
		} `json:"content"`
	} `json:"message"`
	// PermissionDenials is in the result event, the last line of a
	// finished run.
	PermissionDenials []json.RawMessage `json:"permission_denials"`
}

// Activity reads Claude Code's stream-json output. Turns are the model's
// replies: Claude Code writes one assistant event per content block, the
// blocks of one reply sharing its message id. (The result event's
// num_turns counts those events instead: a reply that reads and writes a
// file is two, and --max-turns 1 ends a run with num_turns 2.) Tool calls
// are the tool_use blocks; permission denials come from the result event.
// Claude Code's own messages (model "<synthetic>", such as "Not logged in")
// are not turns. Lines that are not JSON (stderr mixed in, a line cut by
// the output limit) are skipped, so a cut log still counts what it holds.
func (ClaudeCode) Activity(log []byte) Activity {
	var a Activity
	replies, calls := map[string]bool{}, map[string]bool{}
	for _, line := range bytes.Split(log, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if !eventLine(line) {
			continue
		}
		var ev claudeEvent
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		switch ev.Type {
		case "assistant":
			if ev.Message == nil || ev.Message.Model == "<synthetic>" {
				continue
			}
			if !replies[ev.Message.ID] {
				replies[ev.Message.ID] = true
				a.Turns++
			}
			for _, b := range ev.Message.Content {
				if (b.Type == "tool_use" || b.Type == "server_tool_use") && !calls[b.ID] {
					calls[b.ID] = true
					a.ToolCalls++
				}
			}
		case "result":
			a.PermissionDenials = int32(len(ev.PermissionDenials))
		}
	}
	return a
}

var _ ActivityReader = ClaudeCode{}
