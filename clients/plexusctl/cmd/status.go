package cmd

import (
	"context"
	"errors"
	"sync"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
)

// serviceNames are the v1 gRPC services, by plexusctl's name of the
// service.
var serviceNames = map[string]string{
	"allocator":  "plexus.allocator.v1.AllocatorService",
	"membership": "plexus.membership.v1.MembershipService",
	"importer":   "plexus.importer.v1.ImporterService",
	"repair":     "plexus.repair.v1.RepairService",
}

// errNotHealthy makes status exit non-zero after printing the table.
var errNotHealthy = errors.New("not every service is SERVING")

// serviceStatus is what status learns of one service.
type serviceStatus struct {
	name, addr, status, version, leader, err string
}

// checkService asks svc's health service, with the call's headers: the
// server's version, and the leader the importer and repair last observed.
func (g *globals) checkService(ctx context.Context, svc string) serviceStatus {
	st := serviceStatus{name: svc, addr: *g.addrs[svc]}
	cc, err := g.conn(svc)
	if err != nil {
		st.status, st.err = "UNREACHABLE", err.Error()
		return st
	}
	defer cc.Close()
	var md metadata.MD
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: serviceNames[svc]}, grpc.Header(&md))
	if err != nil {
		// A failed TLS handshake is no sign of the service being down.
		st.status = "UNREACHABLE"
		if err = g.unreachable(svc, err); errors.As(err, new(*tlsError)) {
			st.status = "TLS_ERROR"
		}
		st.err = describe(err)
		return st
	}
	st.status = resp.GetStatus().String()
	if v := md.Get("plexus-version"); len(v) > 0 {
		st.version = v[0]
	}
	if v := md.Get("plexus-leader"); len(v) > 0 {
		st.leader = v[0]
	}
	return st
}

func statusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "status", Short: "Health and version of the four services, and who leads the importer and repair", Args: cobra.NoArgs,
		Long: "Ask every service's grpc.health.v1 service (at --allocator-addr, --membership-addr, --importer-addr, --repair-addr). " +
			"Exits non-zero when a service is not SERVING.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			// All four at once, each within --timeout: one that hangs
			// does not use up the others' time.
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			names := []string{"allocator", "membership", "importer", "repair"}
			all := make([]serviceStatus, len(names))
			var wg sync.WaitGroup
			for i, n := range names {
				wg.Go(func() { all[i] = g.checkService(ctx, n) })
			}
			wg.Wait()
			list := &structpb.ListValue{}
			healthy := true
			for _, st := range all {
				healthy = healthy && st.status == healthpb.HealthCheckResponse_SERVING.String()
				item, _ := structpb.NewStruct(map[string]any{"service": st.name, "address": st.addr, "status": st.status,
					"version": st.version, "leader": st.leader, "error": st.err})
				list.Values = append(list.Values, structpb.NewStructValue(item))
			}
			err := render(g.out, g.output, list, func() *table {
				t := &table{header: []string{"SERVICE", "ADDRESS", "STATUS", "VERSION", "LEADER", "ERROR"}}
				for _, st := range all {
					t.add(st.name, st.addr, st.status, st.version, st.leader, st.err)
				}
				return t
			})
			if err != nil {
				return err
			}
			if !healthy {
				return errNotHealthy
			}
			return nil
		},
	}
}
