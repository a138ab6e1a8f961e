// Command plexus-allocator owns IP ranges: it hands out and releases
// addresses from pools, durably, to many concurrent callers.
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/allocator/allocation"
	allocserver "github.com/plexusnet/plexus/services/allocator/server"
	"github.com/plexusnet/plexus/services/allocator/store"
	_ "github.com/plexusnet/plexus/services/allocator/store/bolt"   // --store bolt:PATH
	_ "github.com/plexusnet/plexus/services/allocator/store/memory" // --store memory
)

func main() {
	storeSpec := store.DefaultSpec
	server.Main(server.Spec{
		Service: config.Allocator,
		Short:   "Plexus allocator: IP pools and durable address allocation",
		AddFlags: func(fs *pflag.FlagSet) {
			fs.StringVar(&storeSpec, "store", storeSpec, "where allocations are kept: bolt:PATH (embedded file, fsync per acknowledged write) or memory (lost on exit)")
		},
		Setup: func(ctx context.Context, rt *server.Runtime) (func(), error) {
			st, err := store.Open(storeSpec, store.WithLogger(rt.Logger))
			if err != nil {
				return nil, err
			}
			svc, err := allocation.New(ctx, allocation.Traced(st), allocation.WithLogger(rt.Logger))
			if err != nil {
				return nil, errors.Join(fmt.Errorf("start allocator: %w", err), st.Close())
			}
			allocserver.New(svc, allocserver.NewMetrics(rt.Server.Registry(), svc)).Register(rt.Server.GRPC())
			rt.Server.SetServing("plexus.allocator.v1.AllocatorService", true)
			return func() {
				if err := st.Close(); err != nil {
					rt.Logger.Error("close store", "err", err)
				}
			}, nil
		},
	})
}
