package cmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/plexusnet/plexus/internal/version"
)

// versionCmd prints the release and commit plexusctl was built from; the
// services' own versions are in `plexusctl status`.
func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the release and commit plexusctl was built from (the services': plexusctl status)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "plexusctl %s\n", version.String())
			return err
		},
	}
}
