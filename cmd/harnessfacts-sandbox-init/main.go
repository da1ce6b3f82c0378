// Command harnessfacts-sandbox-init is what runs of ours inside a sandbox:
// `mcp-stdio [--socket PATH]`, the stdio MCP server an agent starts, and
// on Windows `sandbox-init -- COMMAND [ARG]...` in front of the agent (an
// AppContainer's loopback cannot be listened on from outside; on Linux the
// runner serves the sandbox's loopback itself), exactly as the
// harnessfacts binary's hidden commands of the same names (both call
// package sandboxinit).
//
// It exists for speed alone. The harnessfacts binary is about 100 MB, and
// its package initialisation (Kubernetes client schemes, metrics
// registries) took 30 ms and more before sandbox-init's first instruction,
// at every sandboxed agent start; this program links the standard library
// and package sandboxinit only. The executor uses it when it lies beside
// the harnessfacts binary (executor.InitBinaryBeside), else the full binary.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/harnessfacts/harnessfacts/internal/cloexec"
	"github.com/harnessfacts/harnessfacts/node-agent/sandboxinit"
)

const usage = "usage: harnessfacts-sandbox-init sandbox-init -- COMMAND [ARG]... | mcp-stdio [--socket PATH]"

func main() {
	// Nothing this program inherited beyond what it is given reaches the
	// agent: whatever bwrap left open.
	if err := cloexec.Inherited(); err != nil {
		fmt.Fprintln(os.Stderr, "harnessfacts-sandbox-init: marking inherited descriptors close-on-exec:", err)
		os.Exit(1)
	}
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	switch args[0] {
	case "sandbox-init":
		rest := args[1:]
		if len(rest) > 0 && rest[0] == "--" {
			rest = rest[1:]
		}
		if len(rest) == 0 {
			fmt.Fprintln(os.Stderr, "harnessfacts sandbox-init: no command to run;", usage)
			return 2
		}
		cfg, _, err := sandboxinit.ConfigFromEnv(os.Environ())
		if err != nil {
			fmt.Fprintln(os.Stderr, "harnessfacts sandbox-init:", err)
			return 1
		}
		cfg.Stdin = os.Stdin
		code, err := sandboxinit.Run(context.Background(), cfg, rest, os.Stdout, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "harnessfacts sandbox-init:", err)
		}
		return code
	case "mcp-stdio":
		socket, err := socketFlag(args[1:])
		if err != nil {
			fmt.Fprintln(os.Stderr, "harnessfacts mcp-stdio:", err)
			return 2
		}
		if socket == "" {
			socket = os.Getenv(sandboxinit.MCPSocketEnv)
		}
		if socket == "" {
			fmt.Fprintf(os.Stderr, "harnessfacts mcp-stdio: no socket: set $%s (or --socket)\n", sandboxinit.MCPSocketEnv)
			return 1
		}
		if err := sandboxinit.Stdio(socket, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "harnessfacts mcp-stdio:", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "harnessfacts-sandbox-init: unknown command %q; %s\n", args[0], usage)
	return 2
}

// socketFlag reads mcp-stdio's only flag, --socket PATH or --socket=PATH.
func socketFlag(args []string) (string, error) {
	switch {
	case len(args) == 0:
		return "", nil
	case len(args) == 2 && (args[0] == "--socket" || args[0] == "-socket"):
		return args[1], nil
	case len(args) == 1 && (strings.HasPrefix(args[0], "--socket=") || strings.HasPrefix(args[0], "-socket=")):
		_, v, _ := strings.Cut(args[0], "=")
		return v, nil
	}
	return "", fmt.Errorf("unexpected arguments %q; %s", args, usage)
}
