// Package app assembles the allocator on the shared server runtime:
// the store --store names, the allocation service following it when other
// replicas share the store, the gRPC API and its metrics, and a readiness
// check on the store. A store shared over the network (etcd) may be down
// when the allocator starts: the servers start anyway, NOT_SERVING, and
// the state is loaded once the store answers. The command's main runs
// Spec; hack/gendocs documents its flags and metrics from it.
package app

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/allocator/allocation"
	allocserver "github.com/plexusnet/plexus/services/allocator/server"
	"github.com/plexusnet/plexus/services/allocator/store"
)

const serviceName = "plexus.allocator.v1.AllocatorService"

// storeReadyTimeout bounds each check, at start-up, of whether a store
// shared over the network (etcd) answers; the runtime's readiness checks
// have the same bound.
const storeReadyTimeout = 2 * time.Second

// Backoff between two attempts to reach the store at start-up.
const (
	retryMin = 250 * time.Millisecond
	retryMax = 10 * time.Second
)

// service is the allocator's parts as Setup assembles them.
type service struct {
	rt *server.Runtime
	o  Options

	store store.Store
	// shared is set when other replicas commit to the store (etcd): it
	// may be down, and the allocator follows their commits.
	shared bool
	opts   []allocation.Option
	api    *server.Later

	lastErr atomic.Pointer[error] // why the last attempt to load failed
}

// Setup wires the allocator onto rt: open the store the options name,
// build the allocation service's options, register the gRPC API (not
// loaded yet), start serving on the state loaded from the store: at once
// from an embedded store, in the background once it answers from a store
// shared over the network. The cleanup waits for that loader and closes
// the store.
func Setup(ctx context.Context, rt *server.Runtime, o Options) (func(), error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &service{rt: rt, o: o}
	return server.Assemble(ctx, rt.Logger, s.open, s.build, s.register, s.start)
}

// open opens the store.
func (s *service) open(_ context.Context, c *server.Cleanup) error {
	var err error
	if s.store, s.shared, err = openStore(s.o.Store, s.rt); err != nil {
		return err
	}
	c.Close("store", s.store)
	return nil
}

// build chooses the allocation service's options.
func (s *service) build(context.Context, *server.Cleanup) error {
	s.opts = []allocation.Option{allocation.WithLogger(s.rt.Logger)}
	if s.shared {
		// Other replicas commit to the same store: follow them.
		s.opts = append(s.opts, allocation.WithFollow())
	}
	return nil
}

// register registers the API, answering UNAVAILABLE until the state is
// loaded. On a shared store the allocator is NOT_SERVING and not ready
// until then, and again while the store cannot be reached, so clients and
// load balancers go to another replica.
func (s *service) register(context.Context, *server.Cleanup) error {
	s.api = s.rt.Server.RegisterLater(&allocatorv1.AllocatorService_ServiceDesc, allocserver.NotLoaded())
	if !s.shared {
		return nil
	}
	s.rt.Server.AddReadinessCheck("store", func(ctx context.Context) error {
		if !s.api.Registered() {
			return s.waiting()
		}
		err := s.store.Ready(ctx)
		s.rt.Server.SetServing(serviceName, err == nil)
		return err
	})
	return nil
}

// start loads the state and serves it. An embedded store is a file of the
// process: it loads or it is broken, and there is nothing to wait for. A
// shared store may be down when the allocator starts: the servers start
// anyway, so that probes and operators see why it does not serve, and the
// state is loaded in the background once the store answers.
func (s *service) start(ctx context.Context, c *server.Cleanup) error {
	if !s.shared {
		if err := s.load(ctx); err != nil {
			return fmt.Errorf("start allocator: %w", err)
		}
		return nil
	}
	c.Go(func() { s.loadWhenReady(ctx) })
	return nil
}

// load rebuilds the state from the store and serves the API on it.
func (s *service) load(ctx context.Context) error {
	svc, err := allocation.New(ctx, allocation.Traced(s.store), s.opts...)
	if err != nil {
		return err
	}
	allocserver.New(svc, allocserver.NewMetrics(s.rt.Server.Registerer(), svc), s.o.serverOptions(s.rt.Logger)...).Register(s.api)
	s.rt.Server.SetServing(serviceName, true)
	return nil
}

// waiting says why the API is not served yet, for /readyz.
func (s *service) waiting() error {
	if err := s.lastErr.Load(); err != nil {
		return fmt.Errorf("waiting for the store: %w", *err)
	}
	return errors.New("waiting for the store: first attempt to reach it and load the state under way")
}

// loadWhenReady loads the state once the store answers, trying again with
// backoff while it cannot be reached, until ctx ends. The store is asked
// whether it answers first, under a deadline: loading waits for the store
// without one (the store may be big), so it starts only when the store
// answers. A failure that is not the store being away ends the process
// (server.Fail), as it did when the state was loaded before serving.
func (s *service) loadWhenReady(ctx context.Context) {
	delay := retryMin
	for attempt := 1; ; attempt++ {
		err := s.ready(ctx)
		if err == nil {
			if err = s.load(ctx); err == nil {
				if attempt > 1 {
					s.rt.Logger.Info("store reached, serving", "store", s.o.Store.Spec, "attempts", attempt)
				}
				return
			}
			if ctx.Err() == nil && !errors.Is(err, store.ErrCompacted) && s.ready(ctx) == nil {
				// The store answers, and yet the state cannot be
				// loaded from it: waiting will not help.
				s.rt.Server.Fail(fmt.Errorf("start allocator: %w", err))
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		s.lastErr.Store(&err)
		s.rt.Logger.Warn("waiting for etcd: cannot load the allocator's state from its store yet, not serving until then",
			"store", s.o.Store.Spec, "attempt", attempt, "retry_in", delay, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, retryMax)
	}
}

func (s *service) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, storeReadyTimeout)
	defer cancel()
	return s.store.Ready(ctx)
}

// openStore opens the store with the store metrics registered.
func openStore(o StoreOptions, rt *server.Runtime) (store.Store, bool, error) {
	// Registered whatever the store, so the metrics are always there to
	// scrape and to document; only one kind of store observes each.
	combined := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "plexus_allocator_etcd_commits_per_transaction",
		Help:    "Allocations an etcd store sent to etcd in one transaction (concurrent allocations are combined); 0 observations with another store.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
	})
	expired := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "plexus_allocator_request_records_expired_total",
		Help: "Request records (the answers kept for retries with the same request_id) the bolt store dropped after their retention of a day; on etcd, etcd's leases drop them and nothing is counted.",
	})
	rt.Server.Registerer().MustRegister(combined, expired)
	return OpenStore(o, rt.Logger, StoreHooks{
		Expired:  func(n int) { expired.Add(float64(n)) },
		Combined: func(n int) { combined.Observe(float64(n)) },
	})
}
