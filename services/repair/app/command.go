package app

import (
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
)

// Spec is the plexus-repair command on the shared runtime: its own flags
// with their defaults, their validation and Setup. Every call has its own
// Options. Its main runs it; hack/gendocs documents its flags and
// metrics from it.
func Spec() server.Spec {
	return server.SpecOf(config.Repair, "Plexus repair: finds and frees leaked allocations and orphaned slices", DefaultOptions, Setup)
}
