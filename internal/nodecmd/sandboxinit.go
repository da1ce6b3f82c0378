package nodecmd

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/harnessfacts/harnessfacts/node-agent/sandboxinit"
)

// SandboxInitCommand is the entry point inside the sandbox: it bridges
// loopback ports to unix sockets in the run dir, then runs the agent.
func SandboxInitCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox-init -- COMMAND [ARG]...",
		Short: "Inside the sandbox: bridge loopback ports to the run's sockets, then run the agent",
		Long: `Inside the sandbox: bridge loopback ports to the run's unix sockets, then run
the agent. The bridges come as JSON in $` + sandboxinit.ConfigEnv + `, never as
arguments (every user of the node can read a command line); the agent does not
get that variable.`,
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, _, err := sandboxinit.ConfigFromEnv(os.Environ())
			if err != nil {
				return err
			}
			cfg.Stdin = os.Stdin
			code, err := sandboxinit.Run(cmd.Context(), cfg, args, os.Stdout, os.Stderr)
			if err != nil {
				cmd.PrintErrln("harnessfacts sandbox-init:", err)
			}
			os.Exit(code)
			return nil
		},
	}
	return cmd
}

// MCPStdioCommand is the stdio MCP server an agent starts: a pipe to the
// node-agent's MCP server on a unix socket in the run dir.
func MCPStdioCommand() *cobra.Command {
	var socket string
	cmd := &cobra.Command{
		Use:    "mcp-stdio",
		Short:  "Inside the sandbox: serve the run's MCP token server on stdin/stdout",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			if socket == "" {
				socket = os.Getenv(sandboxinit.MCPSocketEnv)
			}
			if socket == "" {
				return fmt.Errorf("mcp-stdio: no socket: set $%s (or --socket)", sandboxinit.MCPSocketEnv)
			}
			return sandboxinit.Stdio(socket, os.Stdin, os.Stdout)
		},
	}
	cmd.Flags().StringVar(&socket, "socket", "", "the run's MCP socket (default $"+sandboxinit.MCPSocketEnv+", which keeps it off the command line)")
	return cmd
}
