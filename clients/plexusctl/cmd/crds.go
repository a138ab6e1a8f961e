package cmd

import (
	"bytes"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/plexusnet/plexus/deploy/crds"
)

// crdsCmd prints the CRDs a Plexus cluster needs.
func crdsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "crds",
		Short: "Print the CustomResourceDefinitions a Plexus cluster needs, for kubectl apply",
		Long: `Print, as one multi-document YAML stream, every CustomResourceDefinition a
cluster running Plexus needs: ServiceExport and ServiceImport of the
Multi-Cluster Services API (multicluster.x-k8s.io, at the mcs-api version
Plexus is built with), Plexus's ExternalWorkload (workload.plexus.dev), and
ClusterProperty (about.k8s.io, KEP-2149: the cluster's id) and ClusterProfile
(multicluster.x-k8s.io, KEP-4322: the fleet's inventory), written to the
upstream schemas. Apply them to every member cluster before deploy/.`,
		Example: "  plexusctl crds | kubectl apply --server-side -f -",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			for _, m := range crds.All() {
				if _, err := fmt.Fprintf(out, "---\n# %s\n%s", m.Source, bytes.TrimPrefix(m.YAML, []byte("---\n"))); err != nil {
					return err
				}
				if !bytes.HasSuffix(m.YAML, []byte("\n")) {
					fmt.Fprintln(out)
				}
			}
			return nil
		},
	}
}
