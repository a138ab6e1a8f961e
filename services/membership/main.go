// Command plexus-membership: which workloads back which Services, streamed.
package main

import (
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/membership/app"
)

func main() { server.Main(app.Spec()) }
