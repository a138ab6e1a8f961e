// Command plexus-importer: services exported by other clusters become
// ServiceImports, derived Services and EndpointSlices in this one.
package main

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/importer/service"
)

func main() {
	opts := service.DefaultOptions()
	server.Main(server.Spec{
		Service:  config.Importer,
		Short:    "Plexus importer: imported services become ServiceImports, derived Services and EndpointSlices",
		AddFlags: func(fs *pflag.FlagSet) { opts.AddFlags(fs) },
		Validate: opts.Validate,
		Setup: func(ctx context.Context, rt *server.Runtime) (func(), error) {
			return service.Setup(ctx, rt, opts)
		},
	})
}
