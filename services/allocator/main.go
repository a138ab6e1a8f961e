// Command plexus-allocator owns IP ranges: it hands out and releases
// addresses from pools, durably, to many concurrent callers.
package main

import (
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/allocator/app"
)

func main() { server.Main(app.Spec()) }
