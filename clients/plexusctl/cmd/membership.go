package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
)

// resourceName turns "NAME" (in namespace ns), "NAMESPACE/NAME" or a full
// resource name into "namespaces/{ns}/{collection}/{name}".
func resourceName(arg, ns, collection string) string {
	if strings.HasPrefix(arg, "namespaces/") {
		return arg
	}
	if before, after, ok := strings.Cut(arg, "/"); ok {
		ns, arg = before, after
	}
	return "namespaces/" + ns + "/" + collection + "/" + arg
}

// shortName drops the resource name's collection: "namespaces/a/workloads/b"
// becomes "a/b".
func shortName(name string) string {
	parts := strings.Split(name, "/")
	if len(parts) == 4 && parts[0] == "namespaces" {
		return parts[1] + "/" + parts[3]
	}
	return name
}

// parsePort reads "NAME:PORT[/PROTOCOL]" or "PORT[/PROTOCOL]".
func parsePort(s string) (*membershipv1.WorkloadPort, error) {
	p := &membershipv1.WorkloadPort{}
	rest := s
	if name, num, ok := strings.Cut(s, ":"); ok {
		p.Name, rest = name, num
	}
	num, proto, _ := strings.Cut(rest, "/")
	n, err := strconv.ParseInt(num, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("port %q: want NAME:PORT[/PROTOCOL], e.g. http:8080 or dns:53/udp", s)
	}
	p.Port = int32(n)
	switch strings.ToUpper(proto) {
	case "", "TCP":
		p.Protocol = membershipv1.Protocol_PROTOCOL_TCP
	case "UDP":
		p.Protocol = membershipv1.Protocol_PROTOCOL_UDP
	case "SCTP":
		p.Protocol = membershipv1.Protocol_PROTOCOL_SCTP
	default:
		return nil, fmt.Errorf("port %q: protocol is tcp, udp or sctp", s)
	}
	return p, nil
}

func portString(name string, port int32, proto membershipv1.Protocol) string {
	s := strconv.Itoa(int(port))
	if name != "" {
		s = name + ":" + s
	}
	if proto == membershipv1.Protocol_PROTOCOL_UDP || proto == membershipv1.Protocol_PROTOCOL_SCTP {
		s += "/" + strings.ToLower(strings.TrimPrefix(proto.String(), "PROTOCOL_"))
	}
	return s
}

func age(since time.Time) string {
	if since.IsZero() || since.Unix() <= 0 {
		return "-"
	}
	return time.Since(since).Round(time.Second).String()
}

func workloadTable(ws ...*membershipv1.Workload) func() *table {
	return func() *table {
		t := &table{header: []string{"NAME", "ADDRESSES", "PORTS", "READY", "EFFECTIVE", "HEARTBEAT", "POOL", "ETAG"}}
		for _, w := range ws {
			var ports []string
			for _, p := range w.GetPorts() {
				ports = append(ports, portString(p.GetName(), p.GetPort(), p.GetProtocol()))
			}
			hb := "-"
			if w.GetLastHeartbeatTime() != nil {
				hb = age(w.GetLastHeartbeatTime().AsTime()) + " ago"
			}
			t.add(shortName(w.GetName()), strings.Join(w.GetAddresses(), ","), strings.Join(ports, ","),
				strconv.FormatBool(w.GetReady()), strconv.FormatBool(w.GetEffectiveReady()), hb,
				strings.TrimPrefix(w.GetAddressPool(), "pools/"), w.GetEtag())
		}
		return t
	}
}

func workloadCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "workload", Short: "Register and manage external workloads (VMs, bare-metal hosts)"}
	var ns string
	c.PersistentFlags().StringVarP(&ns, "namespace", "n", "default", "namespace of the workload")
	c.AddCommand(workloadRegisterCmd(g, &ns), workloadHeartbeatCmd(g, &ns), workloadDeregisterCmd(g, &ns), workloadGetCmd(g, &ns), workloadListCmd(g, &ns))
	return c
}

// workloadRegisterCmd is plexusctl workload register; ns points at the
// --namespace of its parent.
func workloadRegisterCmd(g *globals, ns *string) *cobra.Command {
	var spec struct {
		labels               map[string]string
		addresses, ports     []string
		zone, node, hostname string
		pool, requestID      string
		ready                bool
		ttl                  time.Duration
	}
	register := &cobra.Command{
		Use: "register NAME (--address IP... | --pool POOL)", Short: "Register a workload, or update its registration (idempotent)", Args: cobra.ExactArgs(1),
		Example: "  plexusctl workload register vm-1 -n shop --label app=db --address 192.0.2.10 --port sql:5432 --ttl 30s\n" +
			"  plexusctl workload register vm-2 -n shop --label app=db --pool ext --port sql:5432",
		RunE: func(cmd *cobra.Command, args []string) error {
			w := &membershipv1.Workload{
				Name: resourceName(args[0], *ns, "workloads"), Labels: spec.labels, Addresses: spec.addresses,
				Zone: spec.zone, Node: spec.node, Hostname: spec.hostname, Ready: spec.ready,
			}
			for _, p := range spec.ports {
				port, err := parsePort(p)
				if err != nil {
					return err
				}
				w.Ports = append(w.Ports, port)
			}
			if spec.pool != "" {
				w.AddressPool = poolName(spec.pool)
			}
			if spec.ttl > 0 {
				w.Ttl = durationpb.New(spec.ttl)
			}
			return g.call(cmd, "membership", func(ctx context.Context, cc *grpc.ClientConn) error {
				resp, err := membershipv1.NewMembershipServiceClient(cc).RegisterWorkload(ctx, &membershipv1.RegisterWorkloadRequest{Workload: w, RequestId: spec.requestID})
				if err != nil {
					return err
				}
				return render(g.out, g.output, resp, workloadTable(resp.GetWorkload()))
			})
		},
	}
	register.Flags().StringToStringVar(&spec.labels, "label", nil, "label key=value that Service selectors match (repeatable)")
	register.Flags().StringSliceVar(&spec.addresses, "address", nil, "address of the workload, at most one per IP family (repeatable)")
	register.Flags().StringSliceVar(&spec.ports, "port", nil, "port NAME:PORT[/PROTOCOL] (repeatable)")
	register.Flags().StringVar(&spec.zone, "zone", "", "topology zone")
	register.Flags().StringVar(&spec.node, "node", "", "name of the host the workload runs on")
	register.Flags().StringVar(&spec.hostname, "hostname", "", "hostname published in endpoints")
	register.Flags().StringVar(&spec.pool, "pool", "", "allocator pool to allocate the address from (instead of --address)")
	register.Flags().BoolVar(&spec.ready, "ready", true, "readiness the workload reports")
	register.Flags().DurationVar(&spec.ttl, "ttl", 0, "the workload is not ready when no heartbeat arrived for this long (server default 30s)")
	register.Flags().StringVar(&spec.requestID, "request-id", "", "idempotency key")

	return register
}

func workloadHeartbeatCmd(g *globals, ns *string) *cobra.Command {
	var hbReady bool
	heartbeat := &cobra.Command{
		Use: "heartbeat NAME", Short: "Tell membership the workload is alive (and, with --ready, whether it is ready)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &membershipv1.HeartbeatWorkloadRequest{Name: resourceName(args[0], *ns, "workloads")}
			if cmd.Flags().Changed("ready") {
				req.Ready = &hbReady
			}
			return g.call(cmd, "membership", func(ctx context.Context, cc *grpc.ClientConn) error {
				resp, err := membershipv1.NewMembershipServiceClient(cc).HeartbeatWorkload(ctx, req)
				if err != nil {
					return err
				}
				return render(g.out, g.output, resp, workloadTable(resp.GetWorkload()))
			})
		},
	}
	heartbeat.Flags().BoolVar(&hbReady, "ready", true, "new readiness; unchanged when the flag is not given")

	return heartbeat
}

func workloadDeregisterCmd(g *globals, ns *string) *cobra.Command {
	var etag string
	var allowMissing bool
	deregister := &cobra.Command{
		Use: "deregister NAME", Short: "Delete a workload and release its allocated address", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := resourceName(args[0], *ns, "workloads")
			return g.call(cmd, "membership", func(ctx context.Context, cc *grpc.ClientConn) error {
				resp, err := membershipv1.NewMembershipServiceClient(cc).DeregisterWorkload(ctx, &membershipv1.DeregisterWorkloadRequest{
					Name: name, Etag: etag, AllowMissing: allowMissing,
				})
				if err != nil {
					return err
				}
				return render(g.out, g.output, resp, func() *table {
					t := &table{header: []string{"DEREGISTERED", "RELEASED"}}
					released := resp.GetReleasedAllocation()
					if released == "" {
						released = "-"
					}
					t.add(shortName(name), released)
					return t
				})
			})
		},
	}
	deregister.Flags().StringVar(&etag, "etag", "", "deregister only this version of the workload")
	deregister.Flags().BoolVar(&allowMissing, "allow-missing", false, "succeed when the workload does not exist")

	return deregister
}

func workloadGetCmd(g *globals, ns *string) *cobra.Command {
	return &cobra.Command{
		Use: "get NAME", Short: "Show a workload", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, "membership", func(ctx context.Context, cc *grpc.ClientConn) error {
				resp, err := membershipv1.NewMembershipServiceClient(cc).GetWorkload(ctx, &membershipv1.GetWorkloadRequest{Name: resourceName(args[0], *ns, "workloads")})
				if err != nil {
					return err
				}
				return render(g.out, g.output, resp, workloadTable(resp.GetWorkload()))
			})
		},
	}
}

func workloadListCmd(g *globals, ns *string) *cobra.Command {
	var selector string
	var all bool
	list := &cobra.Command{
		Use: "list", Short: "List workloads", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			namespace := *ns
			if all {
				namespace = ""
			}
			return g.call(cmd, "membership", func(ctx context.Context, cc *grpc.ClientConn) error {
				client := membershipv1.NewMembershipServiceClient(cc)
				out := &membershipv1.ListWorkloadsResponse{}
				for token := ""; ; {
					resp, err := client.ListWorkloads(ctx, &membershipv1.ListWorkloadsRequest{Namespace: namespace, LabelSelector: selector, PageSize: 1000, PageToken: token})
					if err != nil {
						return err
					}
					out.Workloads = append(out.Workloads, resp.GetWorkloads()...)
					if token = resp.GetNextPageToken(); token == "" {
						break
					}
				}
				return render(g.out, g.output, out, workloadTable(out.GetWorkloads()...))
			})
		},
	}
	list.Flags().StringVarP(&selector, "selector", "l", "", "label selector, e.g. app=db,tier!=cache")
	list.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list every namespace")

	return list
}

// endpointRows renders the endpoints of a set, one row per endpoint.
func endpointRows(t *table, prefix []string, se *membershipv1.ServiceEndpoints) {
	for _, grp := range se.GetGroups() {
		var ports []string
		for _, p := range grp.GetPorts() {
			ports = append(ports, portString(p.GetName(), p.GetPort(), p.GetProtocol()))
		}
		for _, ep := range grp.GetEndpoints() {
			c := ep.GetConditions()
			ref := ep.GetTargetRef()
			row := append(append([]string{}, prefix...),
				strings.Join(ep.GetAddresses(), ","), strings.Join(ports, ","),
				strconv.FormatBool(c.GetReady()), strconv.FormatBool(c.GetServing()), strconv.FormatBool(c.GetTerminating()),
				ref.GetKind()+"/"+ref.GetName(), dash(ep.GetNodeName()), dash(ep.GetZone()))
			t.add(row...)
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func membersCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "members", Short: "Show and watch which workloads back which Services"}
	var ns string
	get := &cobra.Command{
		Use: "get SERVICE", Short: "Show a Service's endpoints", Args: cobra.ExactArgs(1),
		Example: "  plexusctl members get web -n shop\n  plexusctl members get shop/web -o json",
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, "membership", func(ctx context.Context, cc *grpc.ClientConn) error {
				resp, err := membershipv1.NewMembershipServiceClient(cc).GetServiceMembers(ctx, &membershipv1.GetServiceMembersRequest{Service: resourceName(args[0], ns, "services")})
				if err != nil {
					return err
				}
				return render(g.out, g.output, resp, func() *table {
					t := &table{header: []string{"ADDRESSES", "PORTS", "READY", "SERVING", "TERMINATING", "TARGET", "NODE", "ZONE"}}
					endpointRows(t, nil, resp.GetEndpoints())
					return t
				})
			})
		},
	}
	get.Flags().StringVarP(&ns, "namespace", "n", "default", "namespace of the Service")

	var req membershipv1.WatchServicesRequest
	watch := &cobra.Command{
		Use: "watch", Short: "Stream endpoint sets: a snapshot, then changes", Args: cobra.NoArgs,
		Example: "  plexusctl members watch -n shop\n  plexusctl members watch --exported-only -o json",
		RunE: func(cmd *cobra.Command, args []string) error {
			cc, err := g.conn("membership")
			if err != nil {
				return err
			}
			defer cc.Close()
			stream, err := membershipv1.NewMembershipServiceClient(cc).WatchServices(cmd.Context(), &req)
			if err != nil {
				return err
			}
			out := &watchOutput{w: g.out, format: g.output}
			for {
				ev, err := stream.Recv()
				if errors.Is(err, io.EOF) || errors.Is(cmd.Context().Err(), context.Canceled) {
					return nil
				}
				if err != nil {
					return err
				}
				if err := out.render(ev, watchTable(ev)); err != nil {
					return err
				}
			}
		},
	}
	watch.Flags().StringVarP(&req.Namespace, "namespace", "n", "", "only Services of this namespace (all when empty)")
	watch.Flags().BoolVar(&req.ExportedOnly, "exported-only", false, "only Services with a ServiceExport")
	watch.Flags().Uint64Var(&req.StartRevision, "from-revision", 0, "resume after this revision (with --epoch) instead of starting with a snapshot")
	watch.Flags().StringVar(&req.Epoch, "epoch", "", "epoch the --from-revision came from")
	c.AddCommand(get, watch)
	return c
}

// watchTable renders one watch event: a line per endpoint, or one line for
// an event without endpoints.
func watchTable(ev *membershipv1.WatchServicesResponse) func() *table {
	return func() *table {
		t := &table{header: []string{"EVENT", "REVISION", "SERVICE", "ADDRESSES", "PORTS", "READY", "SERVING", "TERMINATING", "TARGET", "NODE", "ZONE"}}
		typ := strings.TrimPrefix(ev.GetType().String(), "WATCH_EVENT_TYPE_")
		prefix := []string{typ, strconv.FormatUint(ev.GetRevision(), 10), dash(shortName(ev.GetEndpoints().GetService()))}
		endpointRows(t, prefix, ev.GetEndpoints())
		if len(t.rows) == 0 {
			t.add(append(prefix, "-", "-", "-", "-", "-", "-", "-", "-")...)
		}
		return t
	}
}
