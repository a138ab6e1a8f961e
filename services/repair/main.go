// Command plexus-repair finds leaked, duplicate and out-of-range
// allocations and orphaned importer slices, and frees leaks without ever
// freeing an address in use.
package main

import (
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/repair/app"
)

func main() { server.Main(app.Spec()) }
