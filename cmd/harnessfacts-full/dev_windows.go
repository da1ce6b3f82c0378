package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newDevCommand: the local control plane (envtest) and the bwrap sandbox do
// not run on Windows.
func newDevCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "dev",
		Short:  "Not available on Windows",
		Hidden: true,
		RunE:   func(*cobra.Command, []string) error { return errors.New("harnessfacts dev runs on Linux") },
	}
}
