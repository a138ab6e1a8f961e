// Command plexus-importer: imported services become ServiceImports and EndpointSlices.
package main

import (
	"context"

	importerv1 "github.com/plexusnet/plexus/clients/go/plexus/importer/v1"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
)

func main() {
	server.Main(server.Spec{
		Service: config.Importer,
		Short:   "Plexus importer: imported services become ServiceImports and EndpointSlices",
		Setup: func(ctx context.Context, rt *server.Runtime) (func(), error) {
			importerv1.RegisterImporterServiceServer(rt.Server.GRPC(), importerv1.UnimplementedImporterServiceServer{})
			rt.Server.SetServing("plexus.importer.v1.ImporterService", true)
			return nil, nil
		},
	})
}
