// Command plexus-repair: finds and frees leaked allocations and orphaned slices.
package main

import (
	"context"

	repairv1 "github.com/plexusnet/plexus/clients/go/plexus/repair/v1"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
)

func main() {
	server.Main(server.Spec{
		Service: config.Repair,
		Short:   "Plexus repair: finds and frees leaked allocations and orphaned slices",
		Setup: func(ctx context.Context, rt *server.Runtime) (func(), error) {
			repairv1.RegisterRepairServiceServer(rt.Server.GRPC(), repairv1.UnimplementedRepairServiceServer{})
			rt.Server.SetServing("plexus.repair.v1.RepairService", true)
			return nil, nil
		},
	})
}
