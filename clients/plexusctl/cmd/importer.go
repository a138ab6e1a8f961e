package cmd

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
)

// importName accepts "NAMESPACE/SERVICE" (with -n as the default
// namespace for a bare SERVICE) or the full resource name.
func importName(arg, namespace string) string {
	if strings.HasPrefix(arg, "namespaces/") {
		return arg
	}
	ns, name, ok := strings.Cut(arg, "/")
	if !ok {
		ns, name = namespace, arg
	}
	return "namespaces/" + ns + "/serviceimports/" + name
}

func importTable(imps ...*importerv1.ServiceImport) func() *table {
	return func() *table {
		t := &table{header: []string{"NAMESPACE", "SERVICE", "TYPE", "IPS", "PORTS", "CLUSTERS", "ENDPOINTS", "SLICES", "CONDITIONS"}}
		for _, im := range imps {
			parts := strings.Split(im.GetName(), "/")
			ns, name := "", im.GetName()
			if len(parts) == 4 {
				ns, name = parts[1], parts[3]
			}
			var ports, clusters, conds []string
			for _, p := range im.GetPorts() {
				ports = append(ports, fmt.Sprintf("%s:%d/%s", p.GetName(), p.GetPort(), strings.TrimPrefix(p.GetProtocol().String(), "PROTOCOL_")))
			}
			var endpoints, ready uint32
			for _, c := range im.GetClusters() {
				s := c.GetCluster()
				if c.GetStale() {
					s += "(stale)"
				}
				clusters = append(clusters, s)
				endpoints += c.GetEndpoints()
				ready += c.GetReadyEndpoints()
			}
			for _, c := range im.GetConditions() {
				if c.GetStatus() == importerv1.ConditionStatus_CONDITION_STATUS_TRUE {
					conds = append(conds, c.GetType())
				} else if c.GetReason() != "" {
					conds = append(conds, "!"+c.GetType()+"("+c.GetReason()+")")
				}
			}
			t.add(ns, name, strings.TrimPrefix(im.GetType().String(), "SERVICE_TYPE_"), strings.Join(im.GetIps(), ","),
				strings.Join(ports, ","), strings.Join(clusters, ","), fmt.Sprintf("%d/%d ready", ready, endpoints),
				fmt.Sprint(im.GetEndpointSlices()), strings.Join(conds, ","))
		}
		return t
	}
}

func importsCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "imports", Aliases: []string{"import"}, Short: "Read the services the importer materialised in this cluster"}
	var namespace string
	c.PersistentFlags().StringVarP(&namespace, "namespace", "n", "default", "namespace of the import")
	get := &cobra.Command{
		Use: "get [NAMESPACE/]SERVICE", Short: "Show one import: VIPs, ports, per-cluster status and conditions", Args: cobra.ExactArgs(1),
		Example: "  plexusctl imports get shop/cart -o yaml",
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, "importer", func(ctx context.Context, cc *grpc.ClientConn) error {
				resp, err := importerv1.NewImporterServiceClient(cc).GetServiceImport(ctx, &importerv1.GetServiceImportRequest{Name: importName(args[0], namespace)})
				if err != nil {
					return err
				}
				return render(g.out, g.output, resp, importTable(resp.GetServiceImport()))
			})
		},
	}
	var all bool
	list := &cobra.Command{
		Use: "list [-n NAMESPACE | -A]", Short: "List imports, every page", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ns := namespace
			if all || !cmd.Flags().Changed("namespace") {
				ns = ""
			}
			return g.call(cmd, "importer", func(ctx context.Context, cc *grpc.ClientConn) error {
				client := importerv1.NewImporterServiceClient(cc)
				out := &importerv1.ListServiceImportsResponse{}
				req := &importerv1.ListServiceImportsRequest{Namespace: ns, PageSize: 1000}
				for {
					resp, err := client.ListServiceImports(ctx, req)
					if err != nil {
						return err
					}
					out.ServiceImports = append(out.ServiceImports, resp.GetServiceImports()...)
					if resp.GetNextPageToken() == "" {
						break
					}
					req.PageToken = resp.GetNextPageToken()
				}
				return render(g.out, g.output, out, importTable(out.GetServiceImports()...))
			})
		},
	}
	list.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list every namespace (the default unless -n is given)")
	c.AddCommand(get, list)
	return c
}
