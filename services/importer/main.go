// Command plexus-importer: services exported by other clusters become
// ServiceImports, derived Services and EndpointSlices in this one.
package main

import (
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/importer/app"
)

func main() { server.Main(app.Spec()) }
