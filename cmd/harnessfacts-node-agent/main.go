// Command harnessfacts-node-agent is the node-agent alone: the node image's
// entry point, with the node's commands of harnessfacts (node-agent,
// node-cleanup, and the sandbox's own, for a node without
// harnessfacts-sandbox-init). The harnessfacts binary serves the same
// commands from the same code; this one leaves out what only the controller
// and the client commands need (the CRD validator with CEL, the API server's
// libraries, report and evidence tooling), which every node-agent would
// otherwise map and initialise: it idles in about two thirds of the memory.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/harnessfacts/harnessfacts/internal/nodecmd"
	// No heap profile sampled, from before the Kubernetes packages' inits.
	_ "github.com/harnessfacts/harnessfacts/internal/noheapprofile"
	"github.com/harnessfacts/harnessfacts/internal/version"
)

func main() {
	root := &cobra.Command{
		Use:           "harnessfacts-node-agent",
		Short:         "The HarnessFacts node-agent: runs the node's HarnessRuns in sandboxes and records their evidence",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(version.Command(), nodecmd.NodeAgentCommand(), nodecmd.NodeCleanupCommand(),
		nodecmd.SandboxInitCommand(), nodecmd.MCPStdioCommand())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "harnessfacts-node-agent:", err)
		os.Exit(1)
	}
}
