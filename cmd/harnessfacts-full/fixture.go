package main

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"

	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/fixturesource"
)

func newFixtureCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "fixture", Short: "Work with fixture folders"}
	cmd.AddCommand(newFixturePushCommand(), newFixtureDigestCommand())
	return cmd
}

func newFixturePushCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "push DIR REFERENCE",
		Short: "Push a fixture folder as an OCI artifact and print its reference pinned by digest",
		Long: `Push the fixture folder DIR (fixture.yaml, workspace/, tests/, helper files)
to REFERENCE (registry/repository:tag) as an OCI artifact: an image manifest
with artifactType application/vnd.harnessfacts.fixture.v1, the empty config,
and one layer of media type application/vnd.harnessfacts.fixture.v1.tar+gzip
holding the folder as a tar (docs/fixtures.md). The folder is read and checked
as every fixture is (no links, bounded); a kustomization.yaml, run.yaml,
*.run.yaml and provider-script.yaml beside the fixture are left out.

It prints REFERENCE@sha256:<digest>, the value of a run's spec.fixture.oci.ref.
The same folder always makes the same artifact, so the same digest. Registry
credentials come from $DOCKER_CONFIG (docker login), as for evidence.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			fix, err := fixture.FromDir(args[0], fixturesource.DefaultLimits)
			if err != nil {
				return err
			}
			ref, err := fixturesource.Push(cmd.Context(), fix, args[1], remote.WithAuthFromKeychain(authn.DefaultKeychain))
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), ref)
			return err
		},
	}
}

func newFixtureDigestCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "digest DIR",
		Short: "Print a fixture folder's digest, as a run's status.evidence.fixtureDigest records it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fix, err := fixture.FromDir(args[0], fixturesource.DefaultLimits)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), fix.Digest)
			return err
		},
	}
}
