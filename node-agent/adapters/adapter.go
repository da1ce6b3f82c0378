// Package adapters turns a HarnessRun's agent spec into the command line,
// environment and config files of one agent CLI, inside the run's isolated
// home. One file per CLI: Claude Code, Codex, Gemini CLI, OpenCode, Aider,
// Antigravity, exec, which runs any command, and oracle, which runs the
// fixture's own solution (see Default).
package adapters

import (
	"context"
	"fmt"
	"path/filepath"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Input is what an adapter needs to prepare one run.
type Input struct {
	// Agent is the run's spec.agent.
	Agent harnessv1.AgentSpec
	// Prompt is the task, from the fixture or spec.fixture.prompt.
	Prompt string
	// Workspace is the agent's working directory.
	Workspace string
	// Home is the run's isolated HOME; config files go below it.
	Home string
	// MCP is how the agent reaches the run's MCP token server.
	MCP MCPEndpoint
	// MaxDecisions bounds the agent's turns where the CLI has a turn limit.
	MaxDecisions int32
	// Credentials are the run's selected credential values.
	Credentials []Credential
	// ProxyURL is the run's egress proxy as the agent reaches it
	// ("http://127.0.0.1:PORT"), empty when the run has none (egress None or
	// Unrestricted). sandbox-init already sets HTTPS_PROXY, HTTP_PROXY and
	// NO_PROXY; an adapter whose CLI ignores them sets the CLI's own setting.
	ProxyURL string
	// Solution is the path of the fixture's solution command in the run
	// dir, and SolutionEnv its variables: set for an oracle's run only.
	Solution    string
	SolutionEnv map[string]string
}

// MCPEndpoint is the run's MCP token server as the agent sees it.
type MCPEndpoint struct {
	// Transport is None, HTTP or Stdio.
	Transport harnessv1.MCPTransport
	// URL is the streamable-HTTP endpoint (Transport HTTP).
	URL string
	// Command is the argv that serves MCP over stdio (Transport Stdio).
	Command []string
	// Env is the environment that Command needs (the run's socket, in
	// HARNESSFACTS_MCP_SOCKET): the adapter puts it in the CLI's own
	// settings for the server, since a path there is on no command line
	// while an argument of Command is in /proc/PID/cmdline for every host
	// user to read.
	Env map[string]string
	// Server and Tool name the server and its one tool, for allow-lists.
	Server, Tool string
}

// Credential is one selected Secret key's value and how it is delivered.
type Credential struct {
	Env   string
	File  harnessv1.CredentialFile
	Value []byte
}

// Invocation is what the sandbox runs.
type Invocation struct {
	// Argv is the agent's command line. It never holds a credential.
	Argv []string
	// Env are the adapter's variables (credentials delivered by env among
	// them), added to the run's base environment.
	Env []string
	// Files are written before the run, relative to Home, mode 0600; the
	// node-agent removes them with the run dir, whatever happens.
	Files map[string][]byte
	// Stdin is what the CLI reads on its standard input: the prompt, for
	// every CLI that accepts it there, so that it is on no command line
	// (/proc/PID/cmdline is readable by every host user). Nil is /dev/null.
	Stdin []byte
	// Notes are things status must say (for example that a CLI has no MCP
	// support).
	Notes []string
	// MCPUnsupported is true when the run asked for MCP and the CLI has none.
	MCPUnsupported bool
	// ReadOnly are host folders the sandbox must show read-only: the CLI's
	// installation, when it lies in a folder the sandbox hides (a host home).
	ReadOnly []string
	// PathDirs are put in front of the sandbox's PATH (the CLI's bin folder,
	// for the helpers it starts by name).
	PathDirs []string
	// ProviderHosts are the "host" or "host:port" entries the CLI must reach
	// with egress ProviderOnly (its model provider's API, its login and
	// telemetry only if it cannot work without them). The node-agent adds
	// spec.network.allowHosts and the host of spec.agent.providerURL; a host
	// without a port allows 443 and 80.
	ProviderHosts []string
}

// Adapter prepares runs of one agent CLI.
type Adapter interface {
	// Name is the adapter's name in spec.agent.adapter.
	Name() harnessv1.Adapter
	// Version reports the installed CLI's version, or an error when the
	// CLI is not installed.
	Version(ctx context.Context) (string, error)
	// Prepare builds the invocation of one run.
	Prepare(in Input) (*Invocation, error)
}

// Activity is what a CLI's structured output says it did.
type Activity struct {
	Turns, ToolCalls, PermissionDenials int32
}

// ActivityReader is implemented by adapters whose CLI writes structured
// output (stream-json, JSONL): Activity reads the run's redacted log, where
// stderr lines are mixed in and the end may be cut off.
type ActivityReader interface {
	Activity(log []byte) Activity
}

// Registry maps adapter names to adapters.
type Registry map[harnessv1.Adapter]Adapter

// Get returns the adapter for name, or an error naming the adapters this
// node has.
func (r Registry) Get(name harnessv1.Adapter) (Adapter, error) {
	if a, ok := r[name]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("this node has no %s adapter", name)
}

// Config says where a node's agent CLIs are.
type Config struct {
	// CLIDir is the folder of the CLIs' commands: hack/install-agent-clis.sh's
	// PREFIX/bin (/opt/harnessfacts/agents/bin in the node-agent image).
	// Empty: each command is looked up on PATH.
	CLIDir string
}

// Default is the registry of the adapters built into this binary, finding
// the CLIs on PATH.
func Default() Registry { return New(Config{}) }

// New is the registry of the adapters built into this binary, finding the
// CLIs as cfg says.
func New(cfg Config) Registry {
	if cfg.CLIDir != "" {
		// The sandbox binds and finds the CLIs by absolute paths (a
		// relative --agent-clis failed every run as the sandbox's).
		if abs, err := filepath.Abs(cfg.CLIDir); err == nil {
			cfg.CLIDir = abs
		}
	}
	r := Registry{}
	for _, a := range []Adapter{
		Exec{},
		Oracle{},
		NewClaudeCode(cfg),
		NewCodex(cfg),
		NewGemini(cfg),
		NewOpenCode(cfg),
		NewAider(cfg),
		NewAntigravity(cfg),
	} {
		r[a.Name()] = a
	}
	return r
}

// credentialEnv returns the env entries of the credentials delivered by env.
func credentialEnv(creds []Credential) []string {
	var env []string
	for _, c := range creds {
		if c.Env != "" {
			env = append(env, c.Env+"="+string(c.Value))
		}
	}
	return env
}
