package app

import (
	"github.com/spf13/cobra"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
)

// Spec is the plexus-allocator command on the shared runtime: its own flags
// with their defaults, their validation, Setup, and the compact command.
// Every call has its own Options. Its main runs it; hack/gendocs documents
// its flags and metrics from it.
func Spec() server.Spec {
	spec := server.SpecOf(config.Allocator, "Plexus allocator: IP pools and durable address allocation", DefaultOptions, Setup)
	spec.Commands = func() []*cobra.Command { return []*cobra.Command{compactCommand()} }
	return spec
}
