package adapters

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Codex runs Codex CLI (npm @openai/codex) unattended:
//
//	codex exec --json --skip-git-repo-check --ephemeral --color never \
//	  -s danger-full-access -m MODEL -C WORKSPACE [extraArgs] -- PROMPT
//
// with stdin closed (sandbox-init gives the agent /dev/null; with an open
// stdin `codex exec` waits for more prompt). Everything Codex keeps goes to
// CODEX_HOME, a folder of the run's home, configured by config.toml there:
//
//   - the model provider: spec.agent.providerURL + "/v1" as a provider of
//     its own ("harnessfacts", wire_api "responses"), since Codex ignores
//     OPENAI_BASE_URL; without a providerURL, Codex's built-in OpenAI
//     provider;
//   - the run's MCP server "harnessfacts" (url for HTTP, command and args for
//     stdio) with its one tool approved in that server's own table: Codex
//     runs unattended with approval policy "never", where a tool that needs
//     approval is refused;
//   - no update check, no analytics, no plugins (each would phone home);
//   - no hosted web search (the web reached from the provider's side);
//   - credentials from a file, never the system keyring, and the key
//     variables kept from the commands Codex runs.
//
// Credentials: OPENAI_API_KEY or CODEX_API_KEY by env, or Codex's login file
// (CodexAuth), copied as CODEX_HOME/auth.json and nothing else of a user's
// ~/.codex.
//
// Sandbox: Codex's workspace-write mode runs each shell command in its own
// bubblewrap with a fresh user namespace. The harness's sandbox forbids
// nested user namespaces (bwrap --disable-userns), so there every command
// Codex runs would fail; the adapter runs Codex with danger-full-access
// inside the harness's sandbox and says so in status.agent.notes (see
// codexSandbox).
//
// Codex has no turn limit flag: MaxDecisions bounds only MCP calls (the
// node-agent's), and limits.episodeSeconds bounds the run.
type Codex struct{ cfg Config }

// NewCodex returns the Codex CLI adapter.
func NewCodex(cfg Config) Codex { return Codex{cfg: cfg} }

// Name is the adapter's name.
func (Codex) Name() harnessv1.Adapter { return harnessv1.AdapterCodex }

// Version runs `codex --version` ("codex-cli 0.171.0").
func (c Codex) Version(ctx context.Context) (string, error) {
	cmd, err := c.cfg.command("codex")
	if err != nil {
		return "", err
	}
	return cliVersion(ctx, cmd, "--version")
}

const (
	// CodexDefaultModel is the model a run gets when spec.agent.model is
	// empty: Codex 0.171.0's own default, named so that the command line
	// (and the evidence) says which model ran. Re-check on a version bump.
	CodexDefaultModel = "gpt-6.2-sol"
	// codexHome is CODEX_HOME, relative to the run's home. It must not lie
	// under TMPDIR: Codex refuses to start its sandbox helper from there.
	codexHome = ".codex"
	// codexProvider names the provider config.toml defines for a
	// providerURL.
	codexProvider = "harnessfacts"
)

// codexKeyEnv are the variables Codex takes an API key from, in the order
// the adapter prefers them for a providerURL's env_key.
var codexKeyEnv = []string{"OPENAI_API_KEY", "CODEX_API_KEY"}

// Prepare builds the command line, CODEX_HOME/config.toml and, when the run
// selects Codex's login file, CODEX_HOME/auth.json.
func (c Codex) Prepare(in Input) (*Invocation, error) {
	if err := refuseOwnedFlags(harnessv1.AdapterCodex, in.Agent.ExtraArgs, "--json", "-m", "--model", "-C", "--cd", "-s", "--sandbox",
		"--dangerously-bypass-approvals-and-sandbox"); err != nil {
		return nil, err
	}
	cmd, err := c.cfg.command("codex")
	if err != nil {
		return nil, err
	}
	if len(in.Credentials) == 0 && in.Agent.ProviderURL == "" {
		// Codex does not check before it starts: it would retry the OpenAI
		// API until the run's deadline and fail there.
		return nil, errors.New("the codex adapter needs a credential (OPENAI_API_KEY or CODEX_API_KEY by env, or the CodexAuth file) or spec.agent.providerURL")
	}
	inv := &Invocation{Files: map[string][]byte{}}
	inv.ReadOnly, inv.PathDirs = c.cfg.mounts(cmd)

	var authFile []byte
	keyEnv := ""
	for _, cr := range in.Credentials {
		switch cr.File {
		case "":
		case harnessv1.CredentialFileCodexAuth:
			if !json.Valid(cr.Value) {
				// Never echo the value: it is a credential.
				return nil, errors.New("the CodexAuth credential is not JSON: it must be the content of Codex's auth.json")
			}
			authFile = cr.Value
		default:
			return nil, fmt.Errorf("the codex adapter cannot place credential file %s (it takes CodexAuth)", cr.File)
		}
	}
	for _, name := range codexKeyEnv {
		for _, cr := range in.Credentials {
			if cr.Env == name && keyEnv == "" {
				keyEnv = name
			}
		}
	}

	cfg := map[string]any{
		// Quiet: each of these would reach a host other than the provider.
		"check_for_update_on_startup": false,
		"analytics":                   map[string]any{"enabled": false},
		"features":                    map[string]any{"plugins": false},
		// Credentials live in the run's CODEX_HOME, never in the keyring
		// of whoever runs the node-agent.
		"cli_auth_credentials_store": "file",
		// OpenAI's hosted web search would let the model read the web from
		// the provider's side, past the run's egress policy. A run that
		// wants it says so in extraArgs: -c web_search="live" (flags win
		// over config.toml), and, through the model gateway, with
		// network.providerTools Allowed (else the gateway refuses it).
		"web_search": "disabled",
		// The model's key is Codex's, not the commands': Codex passes its
		// whole environment to the commands it runs, where a command (or a
		// prompt injection) could print the key.
		"shell_environment_policy": map[string]any{"exclude": codexKeyEnv},
	}
	if in.Agent.ProviderURL != "" {
		p := map[string]any{
			"name":     "HarnessFacts providerURL",
			"base_url": strings.TrimRight(in.Agent.ProviderURL, "/") + "/v1",
			"wire_api": "responses",
		}
		switch {
		case keyEnv != "":
			p["env_key"] = keyEnv
		case authFile != nil:
			// The login file's key (or ChatGPT tokens) authenticate this
			// provider too.
			p["requires_openai_auth"] = true
		}
		cfg["model_provider"] = codexProvider
		cfg["model_providers"] = map[string]any{codexProvider: p}
	} else {
		inv.ProviderHosts = []string{"api.openai.com"}
		if authFile != nil {
			// A ChatGPT login talks to chatgpt.com and refreshes its
			// tokens at auth.openai.com.
			inv.ProviderHosts = append(inv.ProviderHosts, "chatgpt.com", "auth.openai.com")
		}
	}
	if mcp := codexMCP(in.MCP); mcp != nil {
		cfg["mcp_servers"] = map[string]any{in.MCP.Server: mcp}
	}
	config, err := toml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("writing Codex's config.toml: %w", err)
	}
	inv.Files[filepath.Join(codexHome, "config.toml")] = append([]byte("# Written by the HarnessFacts codex adapter for one run.\n"), config...)
	if authFile != nil {
		inv.Files[filepath.Join(codexHome, "auth.json")] = bytes.Clone(authFile)
	}

	model := in.Agent.Model
	if model == "" {
		model = CodexDefaultModel
	}
	mode, note := codexSandbox()
	if note != "" {
		inv.Notes = append(inv.Notes, note)
	}
	inv.Notes = append(inv.Notes, CodexTurnsNote)
	inv.Argv = []string{cmd, "exec", "--json", "--skip-git-repo-check", "--ephemeral", "--color", "never",
		"-s", mode, "-m", model, "-C", in.Workspace}
	inv.Argv = append(inv.Argv, in.Agent.ExtraArgs...)
	// "-": the instructions are read from stdin, not argv, where every
	// host user could read them.
	inv.Argv = append(inv.Argv, "--", "-")
	inv.Stdin = []byte(in.Prompt)
	inv.Env = append([]string{"CODEX_HOME=" + filepath.Join(in.Home, codexHome)}, credentialEnv(in.Credentials)...)
	return inv, nil
}

// codexMCP is the run's MCP server's table in config.toml, nil for none.
func codexMCP(ep MCPEndpoint) map[string]any {
	s := map[string]any{}
	switch ep.Transport {
	case harnessv1.MCPTransportHTTP:
		s["url"] = ep.URL
	case harnessv1.MCPTransportStdio:
		if len(ep.Command) == 0 {
			return nil
		}
		s["command"] = ep.Command[0]
		s["args"] = append([]string{}, ep.Command[1:]...)
		if len(ep.Env) > 0 {
			s["env"] = ep.Env
		}
	default:
		return nil
	}
	s["startup_timeout_sec"] = 30
	// The one tool, approved by name: nothing else the server might list
	// runs unasked.
	s["enabled_tools"] = []string{ep.Tool}
	s["tools"] = map[string]any{ep.Tool: map[string]any{"approval_mode": "approve"}}
	return s
}

// CodexSandboxNote is what status.agent.notes says about Codex's own
// sandbox in every run.
const CodexSandboxNote = "Codex ran with -s danger-full-access inside the harness's bwrap sandbox: " +
	"Codex's own workspace-write sandbox needs a nested user namespace for its bwrap, which the harness's sandbox forbids " +
	"(bwrap --disable-userns; every command would fail with \"Creating new namespace failed\"), and its legacy Landlock mode " +
	"refuses to run without bwrap; the harness's sandbox is the boundary (read-only root, writable workspace, home and temp only, " +
	"no network but the provider)"

// CodexTurnsNote is what status.agent.notes says about limits.maxDecisions.
const CodexTurnsNote = "Codex CLI has no turn limit: limits.maxDecisions bounds only its MCP calls; limits.episodeSeconds bounds the run"

// codexSandbox is Codex's -s mode and the note status carries about it.
//
// Codex's workspace-write (and read-only) modes run every shell command
// through codex-linux-sandbox, which starts Codex's bundled bwrap with a new
// user namespace. The harness's bwrap runs the agent with --disable-userns,
// so that fails ("bwrap: Creating new namespace failed: nesting depth or
// /proc/sys/user/max_*_namespaces exceeded (ENOSPC)"); the legacy Landlock
// backend (features.use_legacy_landlock) panics instead ("filesystem-
// restricted execution requires bubblewrap to isolate app-server sockets").
// Codex 0.171.0 has no sandbox mode that works inside ours, so it runs
// danger-full-access: the commands run directly, confined by the harness's
// sandbox, which is what the seed's workspace-write asked for (writes only
// to the workspace, plus the run's home and temp dir). Allowing nested user
// namespaces to keep Codex's own layer would weaken the outer boundary
// more than the inner one adds.
func codexSandbox() (mode, note string) {
	return "danger-full-access", CodexSandboxNote
}

// Activity reads Codex's --json events (one JSON object a line):
// turn.completed and turn.failed end a turn (a Codex turn is the whole
// prompt's work, however many model requests it took); item.completed
// of a command_execution, file_change, mcp_tool_call, web_search or
// collab_tool_call is a tool call; one whose status is "declined" or whose
// error says the tool needs approval is a permission denial.
func (Codex) Activity(log []byte) Activity {
	var a Activity
	for line := range bytes.Lines(log) {
		line = bytes.TrimSpace(line)
		if !eventLine(line) {
			continue
		}
		var ev struct {
			Type string `json:"type"`
			Item struct {
				Type   string `json:"type"`
				Status string `json:"status"`
				Error  *struct {
					Message string `json:"message"`
				} `json:"error"`
			} `json:"item"`
		}
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		switch ev.Type {
		case "turn.completed", "turn.failed":
			a.Turns++
		case "item.completed":
			switch ev.Item.Type {
			case "command_execution", "file_change", "mcp_tool_call", "web_search", "collab_tool_call":
				a.ToolCalls++
				if ev.Item.Status == "declined" || (ev.Item.Error != nil && strings.Contains(ev.Item.Error.Message, "approval")) {
					a.PermissionDenials++
				}
			}
		}
	}
	return a
}
