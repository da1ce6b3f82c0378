package version

import (
	"fmt"

	"github.com/spf13/cobra"
)

// Command is `version`: it prints the binary's version.
func Command() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), String())
			return err
		},
	}
}
