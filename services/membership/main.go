// Command plexus-membership: which workloads back which Services, streamed.
package main

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/membership/service"
)

func main() {
	opts := service.DefaultOptions()
	server.Main(server.Spec{
		Service:  config.Membership,
		Short:    "Plexus membership: which workloads back which Services, streamed",
		AddFlags: func(fs *pflag.FlagSet) { opts.AddFlags(fs) },
		Validate: opts.Validate,
		Setup: func(ctx context.Context, rt *server.Runtime) (func(), error) {
			return service.Setup(ctx, rt, opts)
		},
	})
}
