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

// readier is a store reached over the network, which can be down while
// the allocator runs (etcd).
type readier interface {
	Ready(context.Context) error
}

// Setup opens the store the options name and serves the API on the state
// loaded from it: at once from an embedded store, in the background once
// it answers from a store shared over the network.
func Setup(ctx context.Context, rt *server.Runtime, o Options) (func(), error) {
	st, shared, err := openStore(o.Store, rt)
	if err != nil {
		return nil, err
	}
	opts := []allocation.Option{allocation.WithLogger(rt.Logger)}
	if shared {
		// Other replicas commit to the same store: follow them.
		opts = append(opts, allocation.WithFollow())
	}
	s := &starter{rt: rt, store: st, opts: opts, serverOpts: o.serverOptions()}
	s.api = rt.Server.RegisterLater(&allocatorv1.AllocatorService_ServiceDesc, allocserver.NotLoaded())
	closeStore := func() {
		if err := st.Close(); err != nil {
			rt.Logger.Error("close store", "err", err)
		}
	}
	r, remote := st.(readier)
	if !remote {
		// An embedded store is a file (or memory) of the process: it
		// loads or it is broken, and there is nothing to wait for.
		if err := s.load(ctx); err != nil {
			return nil, errors.Join(fmt.Errorf("start allocator: %w", err), st.Close())
		}
		return closeStore, nil
	}
	// NOT_SERVING and not ready until the state is loaded, then while
	// the store cannot be reached, so clients and load balancers go to
	// another replica.
	rt.Server.AddReadinessCheck("store", func(ctx context.Context) error {
		if !s.api.Registered() {
			return s.waiting()
		}
		err := r.Ready(ctx)
		rt.Server.SetServing(serviceName, err == nil)
		return err
	})
	// The store may be down when the allocator starts: the servers start
	// anyway, so that probes and operators see why it does not serve, and
	// the state is loaded in the background once the store answers.
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		s.loadWhenReady(ctx, r, o.Store.Spec)
	}()
	return func() {
		<-loaded // ends with ctx
		closeStore()
	}, nil
}

// starter loads the allocator's state from its store and then serves the
// API on it.
type starter struct {
	rt         *server.Runtime
	store      store.Store
	opts       []allocation.Option
	serverOpts []allocserver.Option
	api        *server.Later

	lastErr atomic.Pointer[error] // why the last attempt to load failed
}

// load rebuilds the state from the store and serves the API on it.
func (s *starter) load(ctx context.Context) error {
	svc, err := allocation.New(ctx, allocation.Traced(s.store), s.opts...)
	if err != nil {
		return err
	}
	allocserver.New(svc, allocserver.NewMetrics(s.rt.Server.Registerer(), svc), s.serverOpts...).Register(s.api)
	s.rt.Server.SetServing(serviceName, true)
	return nil
}

// waiting says why the API is not served yet, for /readyz.
func (s *starter) waiting() error {
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
func (s *starter) loadWhenReady(ctx context.Context, r readier, storeSpec string) {
	delay := retryMin
	for attempt := 1; ; attempt++ {
		err := s.ready(ctx, r)
		if err == nil {
			if err = s.load(ctx); err == nil {
				if attempt > 1 {
					s.rt.Logger.Info("store reached, serving", "store", storeSpec, "attempts", attempt)
				}
				return
			}
			if ctx.Err() == nil && !errors.Is(err, store.ErrCompacted) && s.ready(ctx, r) == nil {
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
			"store", storeSpec, "attempt", attempt, "retry_in", delay, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, retryMax)
	}
}

func (s *starter) ready(ctx context.Context, r readier) error {
	ctx, cancel := context.WithTimeout(ctx, storeReadyTimeout)
	defer cancel()
	return r.Ready(ctx)
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
