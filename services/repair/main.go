// Command plexus-repair finds leaked, duplicate and out-of-range
// allocations and orphaned importer slices, and frees leaks without ever
// freeing an address in use.
package main

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/repair/service"
)

func main() {
	opts := service.DefaultOptions()
	server.Main(server.Spec{
		Service:  config.Repair,
		Short:    "Plexus repair: finds and frees leaked allocations and orphaned slices",
		AddFlags: func(fs *pflag.FlagSet) { opts.AddFlags(fs) },
		Validate: opts.Validate,
		Setup: func(ctx context.Context, rt *server.Runtime) (func(), error) {
			return service.Setup(ctx, rt, opts)
		},
	})
}
