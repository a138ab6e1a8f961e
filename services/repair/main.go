// Command plexus-repair finds leaked, duplicate and out-of-range
// allocations and orphaned importer slices, and frees leaks without ever
// freeing an address in use.
package main

import (
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/repair/service"
)

func main() { server.Main(service.Spec()) }
