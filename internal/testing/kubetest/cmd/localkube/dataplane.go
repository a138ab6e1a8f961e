package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"

	"github.com/plexusnet/plexus/internal/testing/dataplane"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// podCIDR is the N-th cluster's Pod range.
func podCIDR(i int) netip.Prefix { return dataplane.PodCIDR(i) }

// serviceCIDR is the N-th cluster's Service range.
func serviceCIDR(i int) string { return fmt.Sprintf("10.%d.0.0/16", 96+i) }

// nodeName is the one Node of a cluster.
func nodeName(cluster string) string { return "localkube-" + cluster }

// startDataPlane runs the data plane for the clusters, their logs in dir.
func startDataPlane(ctx context.Context, bins kubetest.Binaries, coredns, dir string, clusters []*kubetest.Cluster, log *slog.Logger) (*dataplane.Fleet, error) {
	nets := make([]dataplane.ClusterNet, len(clusters))
	for i, c := range clusters {
		nets[i] = dataplane.ClusterNet{Cluster: c, Node: nodeName(c.Name), PodCIDR: podCIDR(i),
			ServiceCIDR: netip.MustParsePrefix(serviceCIDR(i)), Dir: filepath.Join(dir, c.Name)}
	}
	return dataplane.Start(ctx, bins, coredns, filepath.Join(dir, "dataplane"), nets, log)
}
