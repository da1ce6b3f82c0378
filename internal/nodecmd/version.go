package nodecmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/harnessfacts/harnessfacts/internal/version"
)

// VersionCommand prints the binary's version.
func VersionCommand() *cobra.Command {
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
