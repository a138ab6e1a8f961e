package cmd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	"github.com/plexusnet/plexus/internal/fleet"
)

// inventoryFlags say where join and leave record a member: a ClusterProfile
// in an inventory cluster, or a sources file.
type inventoryFlags struct {
	kubeconfig  string
	namespace   string
	sourcesFile string
}

func (f *inventoryFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the inventory cluster (default $KUBECONFIG or ~/.kube/config)")
	c.Flags().StringVar(&f.namespace, "inventory-namespace", "", "namespace of the ClusterProfiles, as the importers' and repair's --inventory-namespace")
	c.Flags().StringVar(&f.sourcesFile, "sources-file", "", "edit this sources file instead of the inventory cluster (the no-hub set-up: the importers' and repair's --sources-file)")
}

// client returns the inventory cluster's client.
func (f *inventoryFlags) client() (dynamic.Interface, error) {
	if f.namespace == "" {
		return nil, errors.New("--inventory-namespace or --sources-file is required")
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if f.kubeconfig != "" {
		rules.ExplicitPath = f.kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("inventory cluster: %w", err)
	}
	return dynamic.NewForConfig(cfg)
}

func clustersCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "clusters", Aliases: []string{"cluster"}, Short: "See and change the member clusters the importers and repair follow"}
	c.AddCommand(clustersListCmd(g), clustersJoinCmd(g), clustersLeaveCmd(g))
	return c
}

func clustersListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the source clusters an importer follows, with each stream's state",
		Long: `List the source clusters the importer at --importer-addr follows (from its
--source, --sources-file or ClusterProfiles), and those that left within its
--source-grace: the stream's state, whether it delivered a snapshot, the
revision it resumes from, how long the cluster has not been heard from while
its stream is down, and the last error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.call(cmd, "importer", func(ctx context.Context, cc *grpc.ClientConn) error {
				client := importerv1.NewImporterServiceClient(cc)
				out := &importerv1.ListSourcesResponse{}
				req := &importerv1.ListSourcesRequest{PageSize: 1000}
				for {
					resp, err := client.ListSources(ctx, req)
					if err != nil {
						return err
					}
					out.Sources = append(out.Sources, resp.GetSources()...)
					if resp.GetNextPageToken() == "" {
						break
					}
					req.PageToken = resp.GetNextPageToken()
				}
				return render(g.out, g.output, out, sourceTable(out.GetSources()))
			})
		},
	}
}

func clustersJoinCmd(g *globals) *cobra.Command {
	var inv inventoryFlags
	var member fleet.Member
	var clusterSet string
	join := &cobra.Command{
		Use:   "join NAME --address ADDR (--inventory-namespace NS | --sources-file FILE)",
		Short: "Add a member cluster, or change its address: one ClusterProfile (or one line of a sources file)",
		Long: `Add a member cluster to the inventory the importers and repair follow: the
ClusterProfile NAME (multicluster.x-k8s.io) in --inventory-namespace, with the
cluster's membership address and TLS identity in its status properties and
Joined True, or an entry in --sources-file. Every importer then imports the
cluster's exports within seconds, with no restart. Joining a member again
with another address moves it: the importers reconnect and resume.`,
		Example: `  plexusctl clusters join east --address membership.east.example:7402 --inventory-namespace plexus-fleet
  plexusctl clusters join east --address 10.0.0.7:7402 --sources-file fleet.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			member.Name, member.ClusterSet = args[0], clusterSet
			if err := member.Validate(); err != nil {
				return err
			}
			if inv.sourcesFile != "" {
				err := fleet.EditFile(inv.sourcesFile, func(ms []fleet.Member) ([]fleet.Member, error) {
					ms = slices.DeleteFunc(ms, func(m fleet.Member) bool { return m.Name == member.Name })
					return append(ms, member), nil
				})
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(g.out, "cluster %s joined: %s lists its membership at %s\n", member.Name, inv.sourcesFile, member.Addr)
				return err
			}
			client, err := inv.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			cp, err := fleet.Join(ctx, client, inv.namespace, member, clusterSet)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(g.out, "cluster %s joined: ClusterProfile %s/%s lists its membership at %s\n", member.Name, cp.Namespace, cp.Name, member.Addr)
			return err
		},
	}
	inv.add(join)
	join.Flags().StringVar(&member.Addr, "address", "", "gRPC address of the cluster's membership (host:port, a comma-separated list of replicas, or dns:///name:port)")
	join.Flags().StringVar(&member.ServerName, "tls-server-name", "", "TLS server name of the membership's certificate, when not the address's host")
	join.Flags().StringSliceVar(&member.Ranges, "range", nil, "CIDR the cluster's endpoint addresses lie in (its Pod CIDRs, its external workloads' addresses), repeatable or comma-separated: importers drop the cluster's endpoints outside them; none: any address")
	join.Flags().StringVar(&clusterSet, "clusterset", "", "clusterset the cluster belongs to (the clusterset.k8s.io property; importers of another clusterset skip it)")
	_ = join.MarkFlagRequired("address")

	return join
}

func clustersLeaveCmd(g *globals) *cobra.Command {
	var leaveInv inventoryFlags
	leave := &cobra.Command{
		Use:   "leave NAME (--inventory-namespace NS | --sources-file FILE)",
		Short: "Remove a member cluster: its imports are withdrawn everywhere once the importers' --source-grace passes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if leaveInv.sourcesFile != "" {
				found := false
				err := fleet.EditFile(leaveInv.sourcesFile, func(ms []fleet.Member) ([]fleet.Member, error) {
					n := len(ms)
					ms = slices.DeleteFunc(ms, func(m fleet.Member) bool { return m.Name == name })
					found = len(ms) < n
					return ms, nil
				})
				if err != nil {
					return err
				}
				if !found {
					return fmt.Errorf("cluster %s is not in %s", name, leaveInv.sourcesFile)
				}
				_, err = fmt.Fprintf(g.out, "cluster %s left: removed from %s\n", name, leaveInv.sourcesFile)
				return err
			}
			client, err := leaveInv.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			found, err := fleet.Leave(ctx, client, leaveInv.namespace, name)
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("cluster %s has no ClusterProfile in namespace %s", name, leaveInv.namespace)
			}
			_, err = fmt.Fprintf(g.out, "cluster %s left: ClusterProfile %s/%s deleted\n", name, leaveInv.namespace, name)
			return err
		},
	}
	leaveInv.add(leave)
	return leave
}

func sourceTable(srcs []*importerv1.Source) func() *table {
	return func() *table {
		t := &table{header: []string{"CLUSTER", "ADDRESS", "STATE", "SYNCED", "REVISION", "EXPORTS", "LAG", "LAST ERROR"}}
		for _, s := range srcs {
			lag := ""
			if d := s.GetLag(); d != nil {
				lag = d.AsDuration().Round(time.Second).String()
			}
			addr := s.GetAddress()
			if s.GetTlsServerName() != "" {
				addr += " (" + s.GetTlsServerName() + ")"
			}
			t.add(s.GetCluster(), addr, strings.ToLower(strings.TrimPrefix(s.GetState().String(), "SOURCE_STATE_")),
				fmt.Sprint(s.GetSynced()), fmt.Sprint(s.GetRevision()), fmt.Sprint(s.GetExportedServices()), lag, s.GetLastError())
		}
		return t
	}
}
