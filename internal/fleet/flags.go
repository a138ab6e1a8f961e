package fleet

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"k8s.io/client-go/dynamic"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/kubeclient"
)

// Flags say where the member clusters come from: one of --source (fixed),
// --sources-file or --inventory-namespace.
type Flags struct {
	// Sources are --source NAME=ADDR.
	Sources []string
	// SourcesFile is --sources-file.
	SourcesFile string
	// InventoryNamespace is --inventory-namespace: the namespace of the
	// ClusterProfiles.
	InventoryNamespace string
	// InventoryKubeconfig is --inventory-kubeconfig: the inventory
	// cluster; the member cluster itself when empty.
	InventoryKubeconfig string
}

// AddFlags registers the flags; what says what the members' exports are
// for ("imported here").
func (f *Flags) AddFlags(fs *pflag.FlagSet, what string) {
	fs.StringArrayVar(&f.Sources, "source", f.Sources, "NAME=ADDR of a member cluster's membership (repeatable; ADDR may list replicas, comma-separated): its exported services are "+what+"; fixed for the process's life (see --sources-file and --inventory-namespace for a fleet that changes)")
	fs.StringVar(&f.SourcesFile, "sources-file", f.SourcesFile, "YAML file listing the member clusters (clusters: [{name, address, tlsServerName, ranges, clusterset}]; ranges: the CIDRs the member's endpoint addresses must lie in, none: any; a file listing no clusters is not applied unless it says empty: true), re-read when it changes (a mounted ConfigMap): members join, move and leave without a restart")
	fs.StringVar(&f.InventoryNamespace, "inventory-namespace", f.InventoryNamespace, "namespace of the ClusterProfiles (multicluster.x-k8s.io, KEP-4322) that list the member clusters, each with the status property membership.plexus.dev/address; followed without restarts")
	fs.StringVar(&f.InventoryKubeconfig, "inventory-kubeconfig", f.InventoryKubeconfig, "kubeconfig of the inventory cluster that holds the ClusterProfiles; the member cluster itself when empty")
}

// Validate reports every invalid setting.
func (f *Flags) Validate() []error {
	var errs []error
	given := 0
	for _, set := range []bool{len(f.Sources) > 0, f.SourcesFile != "", f.InventoryNamespace != ""} {
		if set {
			given++
		}
	}
	if given > 1 {
		errs = append(errs, errors.New("--source, --sources-file and --inventory-namespace: give one of them, not several"))
	}
	if _, err := config.ParseSources(f.Sources); err != nil {
		errs = append(errs, fmt.Errorf("--source: %w", err))
	}
	if f.InventoryKubeconfig != "" && f.InventoryNamespace == "" {
		errs = append(errs, errors.New("--inventory-kubeconfig: needs --inventory-namespace"))
	}
	return errs
}

// Inventory returns the inventory the flags name. local is the client of
// the member cluster, the inventory cluster without
// --inventory-kubeconfig; userAgent names the service to the inventory
// cluster; clusterSet filters the ClusterProfiles.
func (f *Flags) Inventory(local dynamic.Interface, userAgent, clusterSet string, logger *slog.Logger) (Inventory, error) {
	switch {
	case f.SourcesFile != "":
		file := NewFile(f.SourcesFile, DefaultFileInterval, logger)
		file.ClusterSet = clusterSet
		return file, nil
	case f.InventoryNamespace != "":
		client := local
		if f.InventoryKubeconfig != "" {
			// A handful of profiles, listed once and watched.
			c, err := kubeclient.New(kubeclient.Options{Kubeconfig: f.InventoryKubeconfig, QPS: 5, Burst: 10, UserAgent: userAgent})
			if err != nil {
				return nil, fmt.Errorf("inventory cluster: %w", err)
			}
			client = c.Dynamic
		}
		return NewProfiles(client, f.InventoryNamespace, clusterSet, logger), nil
	}
	specs, err := config.ParseSources(f.Sources)
	if err != nil {
		return nil, fmt.Errorf("--source: %w", err)
	}
	members := make(Static, len(specs))
	for i, s := range specs {
		members[i] = Member{Name: s.Name, Addr: s.Addr}
	}
	return members, nil
}

// Dialer returns how a service connects to members' memberships: with its
// peer TLS settings (verifying a member's TLS identity when the inventory
// gives one) and without retries inside calls, since each follower's loop
// retries with its own backoff and reports every failure.
func Dialer(cfg *config.Common) func(Member) (*grpc.ClientConn, error) {
	return func(m Member) (*grpc.ClientConn, error) {
		return dial.New(m.Addr, append(dial.FromConfig(cfg), dial.WithoutRetry(), dial.WithServerName(m.ServerName))...)
	}
}
