package service

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
)

// Spec is the plexus-importer command on the shared runtime: its own flags
// with their defaults, their validation and Setup. Every call has its own
// Options. Its main runs it; hack/gendocs documents its flags and
// metrics from it.
func Spec() server.Spec {
	opts := DefaultOptions()
	return server.Spec{
		Service:  config.Importer,
		Short:    "Plexus importer: imported services become ServiceImports, derived Services and EndpointSlices",
		AddFlags: func(fs *pflag.FlagSet) { opts.AddFlags(fs) },
		Validate: opts.Validate,
		Setup: func(ctx context.Context, rt *server.Runtime) (func(), error) {
			return Setup(ctx, rt, opts)
		},
	}
}
