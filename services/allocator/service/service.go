// Package service assembles the allocator on the shared server runtime:
// the store --store names, the allocation service following it when other
// replicas share the store, the gRPC API and its metrics, and a readiness
// check on the store. The command's main runs Spec; hack/gendocs documents
// its flags and metrics from it.
package service

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/allocator/allocation"
	allocserver "github.com/plexusnet/plexus/services/allocator/server"
	"github.com/plexusnet/plexus/services/allocator/store"
	_ "github.com/plexusnet/plexus/services/allocator/store/bolt"   // --store bolt:PATH
	"github.com/plexusnet/plexus/services/allocator/store/etcd"     // --store etcd:ENDPOINTS
	_ "github.com/plexusnet/plexus/services/allocator/store/memory" // --store memory
)

const serviceName = "plexus.allocator.v1.AllocatorService"

// Spec is the plexus-allocator command on the shared runtime: --store and
// the etcd flags, their validation, and the setup that opens the store and
// serves the API. Every call has its own flag values.
func Spec() server.Spec {
	storeSpec := store.DefaultSpec
	var etcdFlags etcd.Flags
	return server.Spec{
		Service: config.Allocator,
		Short:   "Plexus allocator: IP pools and durable address allocation",
		AddFlags: func(fs *pflag.FlagSet) {
			fs.StringVar(&storeSpec, "store", storeSpec, "where allocations are kept: bolt:PATH (embedded file, fsync per acknowledged write), "+
				"etcd:URL[,URL...] (shared by several allocator replicas, all active) or memory (lost on exit)")
			etcdFlags.AddFlags(fs)
		},
		Validate: etcdFlags.Validate,
		Setup: func(ctx context.Context, rt *server.Runtime) (func(), error) {
			return setup(ctx, rt, storeSpec, &etcdFlags)
		},
	}
}

func setup(ctx context.Context, rt *server.Runtime, storeSpec string, etcdFlags *etcd.Flags) (func(), error) {
	st, shared, err := openStore(storeSpec, etcdFlags, rt)
	if err != nil {
		return nil, err
	}
	opts := []allocation.Option{allocation.WithLogger(rt.Logger)}
	if shared {
		// Other replicas commit to the same store: follow them.
		opts = append(opts, allocation.WithFollow())
	}
	svc, err := allocation.New(ctx, allocation.Traced(st), opts...)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("start allocator: %w", err), st.Close())
	}
	allocserver.New(svc, allocserver.NewMetrics(rt.Server.Registerer(), svc)).Register(rt.Server.GRPC())
	rt.Server.SetServing(serviceName, true)
	if r, ok := st.(interface{ Ready(context.Context) error }); ok {
		// NOT_SERVING while the store cannot be reached, so
		// clients and load balancers go to another replica.
		rt.Server.AddReadinessCheck("store", func(ctx context.Context) error {
			err := r.Ready(ctx)
			rt.Server.SetServing(serviceName, err == nil)
			return err
		})
	}
	return func() {
		if err := st.Close(); err != nil {
			rt.Logger.Error("close store", "err", err)
		}
	}, nil
}

// openStore opens the store --store names; shared reports whether other
// replicas may commit to it too.
func openStore(spec string, etcdFlags *etcd.Flags, rt *server.Runtime) (store.Store, bool, error) {
	// Registered whatever the store, so the metric is always there to
	// scrape and to document; only the etcd store observes it.
	combined := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "plexus_allocator_etcd_commits_per_transaction",
		Help:    "Allocations an etcd store sent to etcd in one transaction (concurrent allocations are combined); 0 observations with another store.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
	})
	rt.Server.Registerer().MustRegister(combined)
	endpoints, isEtcd := strings.CutPrefix(spec, "etcd:")
	if !isEtcd {
		st, err := store.Open(spec, store.WithLogger(rt.Logger))
		return st, false, err
	}
	cfg, err := etcdFlags.Config(endpoints)
	if err != nil {
		return nil, false, fmt.Errorf("--store %s: %w", spec, err)
	}
	cfg.Logger = rt.Logger
	cfg.ObserveCombined = func(n int) { combined.Observe(float64(n)) }
	st, err := etcd.Open(cfg)
	if err != nil {
		return nil, false, fmt.Errorf("--store %s: %w", spec, err)
	}
	return st, true, nil
}
