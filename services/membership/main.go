// Command plexus-membership: which workloads back which Services, streamed.
package main

import (
	"context"

	membershipv1 "github.com/plexusnet/plexus/clients/go/plexus/membership/v1"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
)

func main() {
	server.Main(server.Spec{
		Service: config.Membership,
		Short:   "Plexus membership: which workloads back which Services, streamed",
		Setup: func(ctx context.Context, rt *server.Runtime) (func(), error) {
			membershipv1.RegisterMembershipServiceServer(rt.Server.GRPC(), membershipv1.UnimplementedMembershipServiceServer{})
			rt.Server.SetServing("plexus.membership.v1.MembershipService", true)
			return nil, nil
		},
	})
}
