package adapters

import (
	"context"
	"encoding/json"
	"fmt"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Antigravity runs Google's Antigravity CLI, `agy`, headless:
//
//	agy -p PROMPT --dangerously-skip-permissions [--model M] [extraArgs]
//
// --dangerously-skip-permissions is the CLI's documented way to approve
// every tool without asking (there is no --yolo); a run needs it, since
// nobody is there to answer. The isolation is ours: the sandbox, not agy's
// own terminal sandbox, is the boundary.
//
// The CLI is not published in the package registries this project
// installs from, so it was never run by the project's tests: they run this
// adapter against a stand-in that records its argv and environment. Every
// run says so in status.agent.notes. What is taken from the CLI's
// documentation and not verified: settings in
// $HOME/.gemini/antigravity-cli/settings.json (enableTelemetry), the
// Gemini API variables GEMINI_API_KEY and GOOGLE_GEMINI_BASE_URL, and the
// MCP server written in Gemini CLI's "mcpServers" form.
type Antigravity struct{ cfg Config }

// NewAntigravity returns the Antigravity adapter.
func NewAntigravity(cfg Config) Antigravity { return Antigravity{cfg: cfg} }

// Name is antigravity.
func (Antigravity) Name() harnessv1.Adapter { return harnessv1.AdapterAntigravity }

// antigravityCommand is the CLI's command name.
const antigravityCommand = "agy"

// AntigravityNote is in every Antigravity run's status.agent.notes.
const AntigravityNote = "the Antigravity adapter follows the CLI's documentation (agy -p PROMPT --dangerously-skip-permissions); " +
	"HarnessFacts' tests never ran the real agy CLI, only a stand-in, and its MCP settings are unverified; " +
	"the prompt is on agy's command line (no stdin or file form is documented), where any user of the node can read it"

// Version is `agy --version`.
func (a Antigravity) Version(ctx context.Context) (string, error) {
	cmd, err := a.cfg.command(antigravityCommand)
	if err != nil {
		return "", err
	}
	return cliVersion(ctx, cmd, "--version")
}

// Prepare builds agy's command line, settings and environment.
func (a Antigravity) Prepare(in Input) (*Invocation, error) {
	if err := refuseOwnedFlags(harnessv1.AdapterAntigravity, in.Agent.ExtraArgs, "-p", "--prompt", "--model", "-m"); err != nil {
		return nil, err
	}
	cmd, err := a.cfg.command(antigravityCommand)
	if err != nil {
		return nil, err
	}
	for _, c := range in.Credentials {
		if c.File != "" {
			return nil, fmt.Errorf("the antigravity adapter has no credential file form (%s); deliver GEMINI_API_KEY as env", c.File)
		}
	}
	// Antigravity's documented headless form takes the prompt only as -p
	// PROMPT (no stdin or file form is documented, and the real CLI is not
	// available to check): the prompt is on its command line, and status
	// says so.
	argv := []string{cmd, "-p", in.Prompt, "--dangerously-skip-permissions"}
	if in.Agent.Model != "" {
		argv = append(argv, "--model", in.Agent.Model)
	}
	argv = append(argv, in.Agent.ExtraArgs...)

	settings := map[string]any{"enableTelemetry": false}
	switch in.MCP.Transport {
	case harnessv1.MCPTransportHTTP:
		settings["mcpServers"] = map[string]any{in.MCP.Server: map[string]any{"httpUrl": in.MCP.URL, "trust": true}}
	case harnessv1.MCPTransportStdio:
		server := map[string]any{"command": in.MCP.Command[0], "args": in.MCP.Command[1:], "trust": true}
		if len(in.MCP.Env) > 0 {
			server["env"] = in.MCP.Env
		}
		settings["mcpServers"] = map[string]any{in.MCP.Server: server}
	}
	js, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		return nil, err
	}
	inv := &Invocation{
		Argv:  argv,
		Env:   credentialEnv(in.Credentials),
		Files: map[string][]byte{".gemini/antigravity-cli/settings.json": js},
		Notes: []string{AntigravityNote},
	}
	if in.Agent.ProviderURL != "" {
		inv.Env = append(inv.Env, "GOOGLE_GEMINI_BASE_URL="+in.Agent.ProviderURL)
	} else {
		inv.ProviderHosts = []string{"generativelanguage.googleapis.com"}
	}
	inv.ReadOnly, inv.PathDirs = a.cfg.mounts(cmd)
	return inv, nil
}
