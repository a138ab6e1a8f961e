package cmd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/apierr"
)

func poolName(id string) string {
	if strings.HasPrefix(id, "pools/") {
		return id
	}
	return "pools/" + id
}

func poolTable(pools ...*allocatorv1.Pool) func() *table {
	return func() *table {
		t := &table{header: []string{"NAME", "FAMILY", "CIDRS", "CAPACITY", "ALLOCATED", "FREE", "ETAG", "STATE"}}
		for _, p := range pools {
			fam := strings.TrimPrefix(p.GetFamily().String(), "IP_FAMILY_")
			state := "active"
			if p.GetDeleting() {
				state = "deleting" // a forced deletion cut short: delete --force again
			}
			t.add(strings.TrimPrefix(p.GetName(), "pools/"), fam, strings.Join(p.GetCidrs(), ","),
				p.GetStats().GetCapacity(), fmt.Sprint(p.GetStats().GetAllocated()), p.GetStats().GetFree(), p.GetEtag(), state)
		}
		return t
	}
}

func allocTable(allocs ...*allocatorv1.Allocation) func() *table {
	return func() *table {
		t := &table{header: []string{"POOL", "ADDRESS", "OWNER", "UID", "ETAG", "AGE"}}
		for _, a := range allocs {
			o := a.GetOwner()
			owner := o.GetKind() + "/" + o.GetName()
			if o.GetNamespace() != "" {
				owner = o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
			}
			if o.GetCluster() != "" {
				owner = o.GetCluster() + ":" + owner
			}
			age := time.Since(a.GetCreateTime().AsTime()).Round(time.Second).String()
			t.add(strings.TrimPrefix(a.GetPool(), "pools/"), a.GetAddress(), owner, o.GetUid(), a.GetEtag(), age)
		}
		return t
	}
}

func poolCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "pool", Short: "Manage address pools"}
	c.AddCommand(poolCreateCmd(g), poolGetCmd(g), poolListCmd(g), poolUpdateCmd(g), poolDeleteCmd(g))
	return c
}

// poolSpec is what the flags of pool create and pool update say of a pool.
type poolSpec struct {
	cidrs, reserved []string
	labels          map[string]string
	reuse           time.Duration
	overlap         bool
	clusterQuota    uint32
	requestID       string
}

func (spec *poolSpec) addFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&spec.cidrs, "cidr", nil, "CIDR of the pool (repeatable)")
	fs.StringSliceVar(&spec.reserved, "reserved", nil, "reserved CIDR, address or range a-b (repeatable)")
	fs.StringToStringVar(&spec.labels, "label", nil, "label key=value (repeatable)")
	fs.DurationVar(&spec.reuse, "reuse-delay", 0, "a released address is not reused before this delay")
	fs.BoolVar(&spec.overlap, "allow-overlap", false, "allow the pool to overlap other pools")
	fs.Uint32Var(&spec.clusterQuota, "cluster-quota", 0, "most allocations the owners of one member cluster, with the clusterset VIPs its callers created, may hold in the pool; 0: no quota")
	fs.StringVar(&spec.requestID, "request-id", "", "idempotency key")
}

func poolCreateCmd(g *globals) *cobra.Command {
	var spec poolSpec
	create := &cobra.Command{
		Use: "create POOL --cidr CIDR...", Short: "Create a pool", Args: cobra.ExactArgs(1),
		Example: "  plexusctl pool create vips --cidr 10.96.0.0/16 --reserved 10.96.0.0/28",
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, "allocator", func(ctx context.Context, cc *grpc.ClientConn) error {
				p := &allocatorv1.Pool{Cidrs: spec.cidrs, Reserved: spec.reserved, Labels: spec.labels, AllowOverlap: spec.overlap, ClusterQuota: spec.clusterQuota}
				if spec.reuse > 0 {
					p.ReuseDelay = durationpb.New(spec.reuse)
				}
				resp, err := allocatorv1.NewAllocatorServiceClient(cc).CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: strings.TrimPrefix(args[0], "pools/"), Pool: p, RequestId: spec.requestID})
				if err != nil {
					return err
				}
				return render(g.out, g.output, resp, poolTable(resp.GetPool()))
			})
		},
	}
	spec.addFlags(create.Flags())
	return create
}

func poolGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "get POOL", Short: "Show a pool and its statistics", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, "allocator", func(ctx context.Context, cc *grpc.ClientConn) error {
				resp, err := allocatorv1.NewAllocatorServiceClient(cc).GetPool(ctx, &allocatorv1.GetPoolRequest{Name: poolName(args[0])})
				if err != nil {
					return err
				}
				return render(g.out, g.output, resp, poolTable(resp.GetPool()))
			})
		},
	}
}

func poolListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "List pools", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, "allocator", func(ctx context.Context, cc *grpc.ClientConn) error {
				client := allocatorv1.NewAllocatorServiceClient(cc)
				all := &allocatorv1.ListPoolsResponse{}
				for token := ""; ; {
					resp, err := client.ListPools(ctx, &allocatorv1.ListPoolsRequest{PageToken: token, PageSize: 1000})
					if err != nil {
						return err
					}
					all.Pools = append(all.Pools, resp.GetPools()...)
					if token = resp.GetNextPageToken(); token == "" {
						break
					}
				}
				return render(g.out, g.output, all, poolTable(all.GetPools()...))
			})
		},
	}
}

func poolUpdateCmd(g *globals) *cobra.Command {
	var spec poolSpec
	var etag string
	var force bool
	update := &cobra.Command{
		Use: "update POOL", Short: "Change a pool: set its CIDRs, reserved ranges, labels, reuse delay or cluster quota", Args: cobra.ExactArgs(1),
		Example: "  plexusctl pool update vips --cidr 10.96.0.0/16 --cidr 10.97.0.0/16",
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, "allocator", func(ctx context.Context, cc *grpc.ClientConn) error {
				p := &allocatorv1.Pool{Name: poolName(args[0]), Cidrs: spec.cidrs, Reserved: spec.reserved, Labels: spec.labels, AllowOverlap: spec.overlap,
					ClusterQuota: spec.clusterQuota, Etag: etag}
				mask := &fieldmaskpb.FieldMask{}
				for flag, path := range map[string]string{"cidr": "cidrs", "reserved": "reserved", "label": "labels", "reuse-delay": "reuse_delay", "allow-overlap": "allow_overlap",
					"cluster-quota": "cluster_quota"} {
					if cmd.Flags().Changed(flag) {
						mask.Paths = append(mask.Paths, path)
					}
				}
				if len(mask.Paths) == 0 {
					return errors.New("nothing to update: pass --cidr, --reserved, --label, --reuse-delay, --allow-overlap or --cluster-quota")
				}
				p.ReuseDelay = durationpb.New(spec.reuse)
				resp, err := allocatorv1.NewAllocatorServiceClient(cc).UpdatePool(ctx, &allocatorv1.UpdatePoolRequest{Pool: p, UpdateMask: mask, Force: force})
				if err != nil {
					return err
				}
				return render(g.out, g.output, resp, poolTable(resp.GetPool()))
			})
		},
	}
	spec.addFlags(update.Flags())
	update.Flags().BoolVar(&force, "force", false, "remove CIDRs that still hold allocations (they become out of range)")
	update.Flags().StringVar(&etag, "etag", "", "update only this version of the pool")
	return update
}

func poolDeleteCmd(g *globals) *cobra.Command {
	var etag string
	var force bool
	del := &cobra.Command{
		Use: "delete POOL", Short: "Delete a pool", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, "allocator", func(ctx context.Context, cc *grpc.ClientConn) error {
				client := allocatorv1.NewAllocatorServiceClient(cc)
				resp, err := client.DeletePool(ctx, &allocatorv1.DeletePoolRequest{Name: poolName(args[0]), Force: force, Etag: etag})
				released := ""
				if force && status.Code(err) == codes.DeadlineExceeded {
					// Gone just after the deadline: how many went is not known.
					resp, released, err = &allocatorv1.DeletePoolResponse{}, "?", stillDeleting(cmd.Context(), client, args[0], g.timeout, err)
				}
				if err != nil {
					return err
				}
				return render(g.out, g.output, resp, func() *table {
					t := &table{header: []string{"DELETED", "RELEASED"}}
					t.add(args[0], cmp.Or(released, fmt.Sprint(resp.GetReleased())))
					return t
				})
			})
		},
	}
	del.Flags().BoolVar(&force, "force", false, "delete even though allocations exist; they are released (over 4,096 in chunks, the pool marked deleting meanwhile: the deletion goes on past --timeout, and running this again finishes one cut short)")
	del.Flags().StringVar(&etag, "etag", "", "delete only this version of the pool")
	return del
}

// stillDeleting explains a forced deletion that outlasted the call (err):
// the allocator goes on with a large pool's, which the pool's state shows.
func stillDeleting(ctx context.Context, client allocatorv1.AllocatorServiceClient, pool string, timeout time.Duration, err error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	got, gerr := client.GetPool(ctx, &allocatorv1.GetPoolRequest{Name: poolName(pool)})
	switch {
	case apierr.Reason(gerr) == "POOL_NOT_FOUND":
		return nil // done just after the deadline
	case gerr != nil || !got.GetPool().GetDeleting():
		return err
	}
	return fmt.Errorf("pool %s is still being deleted, %d allocations left: the allocator goes on with it after this command's --timeout (%s); `plexusctl pool get %s` shows how far it got, and the pool is gone once that says POOL_NOT_FOUND",
		pool, got.GetPool().GetStats().GetAllocated(), timeout, pool)
}

type ownerFlags struct{ cluster, kind, namespace, name, uid string }

func (o *ownerFlags) add(cmd *cobra.Command, required bool) {
	cmd.Flags().StringVar(&o.cluster, "owner-cluster", "", "owner's cluster")
	cmd.Flags().StringVar(&o.kind, "owner-kind", "", "owner's kind, e.g. Pod")
	cmd.Flags().StringVar(&o.namespace, "owner-namespace", "", "owner's namespace")
	cmd.Flags().StringVar(&o.name, "owner-name", "", "owner's name")
	cmd.Flags().StringVar(&o.uid, "owner-uid", "", "owner's uid")
	if required {
		_ = cmd.MarkFlagRequired("owner-kind")
		_ = cmd.MarkFlagRequired("owner-name")
	}
}

func (o *ownerFlags) proto() *allocatorv1.Owner {
	return &allocatorv1.Owner{Cluster: o.cluster, Kind: o.kind, Namespace: o.namespace, Name: o.name, Uid: o.uid}
}

func allocCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "alloc", Short: "Allocate, inspect, release and watch addresses"}
	c.AddCommand(allocCreateCmd(g), allocGetCmd(g), allocListCmd(g), allocReleaseCmd(g), allocWatchCmd(g))
	return c
}

func allocCreateCmd(g *globals) *cobra.Command {
	var owner ownerFlags
	var address, requestID string
	create := &cobra.Command{
		Use: "create POOL --owner-kind KIND --owner-name NAME", Short: "Allocate an address (idempotent per owner)", Args: cobra.ExactArgs(1),
		Example: "  plexusctl alloc create vips --owner-kind Pod --owner-namespace default --owner-name web-0 --owner-uid 1234",
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, "allocator", func(ctx context.Context, cc *grpc.ClientConn) error {
				resp, err := allocatorv1.NewAllocatorServiceClient(cc).Allocate(ctx, &allocatorv1.AllocateRequest{Pool: poolName(args[0]), Owner: owner.proto(), Address: address, RequestId: requestID})
				if err != nil {
					return err
				}
				return render(g.out, g.output, resp, allocTable(resp.GetAllocation()))
			})
		},
	}
	owner.add(create, true)
	create.Flags().StringVar(&address, "address", "", "ask for this address")
	create.Flags().StringVar(&requestID, "request-id", "", "idempotency key")
	return create
}

func allocGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "get POOL ADDRESS", Short: "Show an allocation", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd, "allocator", func(ctx context.Context, cc *grpc.ClientConn) error {
				resp, err := allocatorv1.NewAllocatorServiceClient(cc).GetAllocation(ctx, &allocatorv1.GetAllocationRequest{Name: poolName(args[0]) + "/allocations/" + args[1]})
				if err != nil {
					return err
				}
				return render(g.out, g.output, resp, allocTable(resp.GetAllocation()))
			})
		},
	}
}

func allocListCmd(g *globals) *cobra.Command {
	var listOwner ownerFlags
	list := &cobra.Command{
		Use: "list [POOL]", Short: "List allocations of a pool (all pools when omitted)", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := "pools/-"
			if len(args) == 1 {
				p = poolName(args[0])
			}
			return g.call(cmd, "allocator", func(ctx context.Context, cc *grpc.ClientConn) error {
				client := allocatorv1.NewAllocatorServiceClient(cc)
				all := &allocatorv1.ListAllocationsResponse{}
				for token := ""; ; {
					resp, err := client.ListAllocations(ctx, &allocatorv1.ListAllocationsRequest{
						Pool: p, OwnerCluster: listOwner.cluster, OwnerKind: listOwner.kind, OwnerNamespace: listOwner.namespace,
						OwnerName: listOwner.name, OwnerUid: listOwner.uid, PageSize: 1000, PageToken: token})
					if err != nil {
						return err
					}
					all.Allocations = append(all.Allocations, resp.GetAllocations()...)
					if token = resp.GetNextPageToken(); token == "" {
						break
					}
				}
				return render(g.out, g.output, all, allocTable(all.GetAllocations()...))
			})
		},
	}
	listOwner.add(list, false)
	return list
}

func allocReleaseCmd(g *globals) *cobra.Command {
	var etag string
	var allowMissing bool
	var relOwner ownerFlags
	release := &cobra.Command{
		Use: "release (POOL ADDRESS | POOL --owner-kind KIND --owner-name NAME)", Short: "Release an allocation, optionally guarded by etag and owner uid", Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &allocatorv1.ReleaseRequest{Etag: etag, OwnerUid: relOwner.uid, AllowMissing: allowMissing}
			if len(args) == 2 {
				req.Name = poolName(args[0]) + "/allocations/" + args[1]
			} else {
				req.Pool, req.Owner = poolName(args[0]), relOwner.proto()
			}
			return g.call(cmd, "allocator", func(ctx context.Context, cc *grpc.ClientConn) error {
				resp, err := allocatorv1.NewAllocatorServiceClient(cc).Release(ctx, req)
				if err != nil {
					return err
				}
				return render(g.out, g.output, resp, allocTable(resp.GetAllocation()))
			})
		},
	}
	relOwner.add(release, false)
	release.Flags().StringVar(&etag, "etag", "", "release only this version of the allocation")
	release.Flags().BoolVar(&allowMissing, "allow-missing", false, "succeed when there is nothing to release")
	return release
}

func allocWatchCmd(g *globals) *cobra.Command {
	var fromRev int64
	watch := &cobra.Command{
		Use: "watch [POOL]", Short: "Stream allocation events (snapshot first unless --from-revision)", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pool := "pools/-"
			if len(args) == 1 {
				pool = poolName(args[0])
			}
			cc, err := g.conn("allocator")
			if err != nil {
				return err
			}
			defer cc.Close()
			stream, err := allocatorv1.NewAllocatorServiceClient(cc).WatchAllocations(cmd.Context(), &allocatorv1.WatchAllocationsRequest{Pool: pool, StartRevision: fromRev})
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
				if err := out.render(ev, allocEventTable(ev)); err != nil {
					return err
				}
			}
		},
	}
	watch.Flags().Int64Var(&fromRev, "from-revision", 0, "resume after this revision instead of starting with a snapshot")
	return watch
}

// allocEventTable renders an allocation event: its type and revision, then
// the allocation, if it has one.
func allocEventTable(ev *allocatorv1.WatchAllocationsResponse) func() *table {
	return func() *table {
		t := allocTable(ev.GetAllocation())()
		t.header = append([]string{"EVENT", "REVISION"}, t.header...)
		for i := range t.rows {
			t.rows[i] = append([]string{strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_"), fmt.Sprint(ev.GetRevision())}, t.rows[i]...)
		}
		if ev.GetAllocation() == nil {
			t.rows = [][]string{{strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_"), fmt.Sprint(ev.GetRevision())}}
		}
		return t
	}
}
