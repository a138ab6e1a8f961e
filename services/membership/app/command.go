package app

import (
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
)

// Spec is the plexus-membership command on the shared runtime: its own flags
// with their defaults, their validation and Setup. Every call has its own
// Options. Its main runs it; hack/gendocs documents its flags and
// metrics from it.
func Spec() server.Spec {
	return server.SpecOf(config.Membership, "Plexus membership: which workloads back which Services, streamed", DefaultOptions, Setup)
}
