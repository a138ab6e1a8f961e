package server

import (
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
	v1reflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1"
	v1alphareflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/plexusnet/plexus/api/apidesc"
)

// registerReflection serves reflection (v1 and v1alpha) from the documented
// API descriptors, so grpcurl describe shows every comment.
func registerReflection(g *grpc.Server, logger *slog.Logger) {
	documented, err := apidesc.Files()
	if err != nil {
		logger.Warn("documented descriptors unavailable; reflection serves them without comments", "err", err)
	}
	opts := reflection.ServerOptions{
		Services:           g,
		DescriptorResolver: apidesc.Resolver{Documented: documented, Fallback: protoregistry.GlobalFiles},
	}
	v1reflectiongrpc.RegisterServerReflectionServer(g, reflection.NewServerV1(opts))
	v1alphareflectiongrpc.RegisterServerReflectionServer(g, reflection.NewServer(opts))
}
