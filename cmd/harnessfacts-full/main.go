// Command harnessfacts-full is every command of HarnessFacts: the
// controller, the node-agent, local runs and the tools around them. Users
// run harnessfacts (cmd/harnessfacts), which serves `run` and `version`
// itself and hands every other command to this binary beside it; its
// commands and help are written as harnessfacts's.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/harnessfacts/harnessfacts/internal/nodecmd"
	// No heap profile sampled, from before the Kubernetes packages' inits.
	_ "github.com/harnessfacts/harnessfacts/internal/noheapprofile"
	"github.com/harnessfacts/harnessfacts/internal/prestart"
	"github.com/harnessfacts/harnessfacts/internal/runcmd"
	"github.com/harnessfacts/harnessfacts/internal/termsafe"
	"github.com/harnessfacts/harnessfacts/internal/version"
)

func main() {
	err := newRootCommand().Execute()
	// No sandbox of the preflight `run`'s init began outlives the
	// process, whatever ended it (a flag refused before the run began).
	prestart.Wait()
	if err != nil {
		// An error may quote what a run, a folder or a registry handed
		// over: shown inert, as everything the commands print of them.
		fmt.Fprintln(os.Stderr, "harnessfacts:", termsafe.String(err.Error()))
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "harnessfacts",
		Short: "Run coding agents against task fixtures in a sandbox and record hashed evidence",
		Long: `HarnessFacts runs coding agents (Claude Code, Codex CLI, Gemini CLI, OpenCode,
Aider, Antigravity, or any command) against task fixtures inside an OS sandbox,
and records what really happened as hashed evidence.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(version.Command())
	root.AddCommand(newControllerCommand())
	root.AddCommand(newReportCommand(), newImportCommand(), newFixtureCommand())
	root.AddCommand(newGetCommand(), newDescribeCommand(), newWaitCommand(), newCancelCommand(), newRetryCommand(), newLogsCommand())
	root.AddCommand(nodecmd.NodeAgentCommand(), nodecmd.NodeCleanupCommand(), runcmd.Command(), newEvidenceCommand(), newDevCommand(), nodecmd.SandboxInitCommand(), nodecmd.MCPStdioCommand(), newFakeProviderCommand())
	return root
}
