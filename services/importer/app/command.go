package app

import (
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
)

// Spec is the plexus-importer command on the shared runtime: its own flags
// with their defaults, their validation and Setup. Every call has its own
// Options. Its main runs it; hack/gendocs documents its flags and
// metrics from it.
func Spec() server.Spec {
	return server.SpecOf(config.Importer, "Plexus importer: imported services become ServiceImports, derived Services and EndpointSlices", DefaultOptions, Setup)
}
