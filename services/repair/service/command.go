package service

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
)

// Spec is the plexus-repair command on the shared runtime: its own flags
// with their defaults, their validation and Setup. Every call has its own
// Options. Its main runs it; hack/gendocs documents its flags and
// metrics from it.
func Spec() server.Spec {
	opts := DefaultOptions()
	return server.Spec{
		Service:  config.Repair,
		Short:    "Plexus repair: finds and frees leaked allocations and orphaned slices",
		AddFlags: func(fs *pflag.FlagSet) { opts.AddFlags(fs) },
		Validate: opts.Validate,
		Setup: func(ctx context.Context, rt *server.Runtime) (func(), error) {
			return Setup(ctx, rt, opts)
		},
	}
}
