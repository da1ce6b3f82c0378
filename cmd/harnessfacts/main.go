// Command harnessfacts is the one binary of HarnessFacts: the controller, the
// node-agent, local runs and the tools around them are its subcommands.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/version"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "harnessfacts:", err)
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
	root.AddCommand(newVersionCommand())
	root.AddCommand(newControllerCommand())
	root.AddCommand(newReportCommand(), newImportCommand(), newFixtureCommand())
	root.AddCommand(newGetCommand(), newDescribeCommand(), newWaitCommand(), newCancelCommand(), newRetryCommand(), newLogsCommand())
	root.AddCommand(newNodeAgentCommand(), newNodeCleanupCommand(), newRunCommand(), newEvidenceCommand(), newDevCommand(), newSandboxInitCommand(), newMCPStdioCommand(), newSandboxSpawnCommand(), newFakeProviderCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.String())
			return err
		},
	}
}

// newScheme knows the built-in types and the harnessfacts.io types: what
// every client and manager of this binary reads and writes.
func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := harnessv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, nil
}
