// Package service assembles the membership service on the shared server
// runtime: Kubernetes clients, the informer controller, the watch hub, the
// registry and its heartbeat sweeper, the allocator connection and the gRPC
// API. The command's main and in-process tests both start it with Setup.
package app

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/clusterid"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/kubeclient"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/membership/kube"
	"github.com/plexusnet/plexus/services/membership/registry"
	mserver "github.com/plexusnet/plexus/services/membership/server"
	"github.com/plexusnet/plexus/services/membership/watch"
)

// Options are membership's own flags.
type Options struct {
	// KubeQPS and KubeBurst are the client-side rate limits of Kubernetes
	// API calls.
	KubeQPS   float32
	KubeBurst int
	// Workers reconcile Services concurrently.
	Workers int
	// BatchPeriod groups the changes of a burst into one event per
	// Service (see informers.Options).
	BatchPeriod time.Duration
	// SweepWorkers expire heartbeats concurrently.
	SweepWorkers int
	// IgnoredNamespaces are not watched for membership.
	IgnoredNamespaces []string
	// WatchHistory, WatchMaxPending and WatchMaxLag configure the hub (see
	// package watch).
	WatchHistory    int
	WatchMaxPending int
	WatchMaxLag     time.Duration

	// restConfig, when set, is used instead of --kubeconfig (tests).
	restConfig *rest.Config
}

// DefaultOptions returns the defaults of the flags.
func DefaultOptions() Options {
	return Options{
		KubeQPS:         50,
		KubeBurst:       100,
		Workers:         4,
		BatchPeriod:     50 * time.Millisecond,
		SweepWorkers:    2,
		WatchHistory:    watch.DefaultHistory,
		WatchMaxPending: watch.DefaultMaxPending,
		WatchMaxLag:     watch.DefaultMaxLag,
	}
}

// AddFlags registers the flags on fs with o's values as defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.Float32Var(&o.KubeQPS, "kube-api-qps", o.KubeQPS, "queries per second to the Kubernetes API (client-side limit)")
	fs.IntVar(&o.KubeBurst, "kube-api-burst", o.KubeBurst, "burst of queries to the Kubernetes API above --kube-api-qps")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Services reconciled concurrently")
	fs.DurationVar(&o.BatchPeriod, "batch-period", o.BatchPeriod, "how long a changed Service waits for more changes before its endpoint set is recomputed and published; 0 publishes every change at once")
	fs.IntVar(&o.SweepWorkers, "heartbeat-workers", o.SweepWorkers, "expired heartbeats written concurrently")
	fs.StringSliceVar(&o.IgnoredNamespaces, "ignore-namespaces", o.IgnoredNamespaces, "namespaces whose Services and workloads are not tracked (none by default, kube-system included)")
	fs.IntVar(&o.WatchHistory, "watch-history", o.WatchHistory, "changes remembered for WatchServices clients that resume")
	fs.IntVar(&o.WatchMaxPending, "watch-max-pending", o.WatchMaxPending, "Services a WatchServices client may have waiting before it is cut off (WATCH_TOO_SLOW)")
	fs.DurationVar(&o.WatchMaxLag, "watch-max-lag", o.WatchMaxLag, "how long a WatchServices client may leave events unread before it is cut off (WATCH_TOO_SLOW)")
}

// Validate reports every invalid setting at once.
func (o *Options) Validate() error {
	var errs []error
	if o.KubeQPS <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps: must be positive, got %g", o.KubeQPS))
	}
	if o.KubeBurst <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-burst: must be positive, got %d", o.KubeBurst))
	}
	if o.Workers <= 0 {
		errs = append(errs, fmt.Errorf("--workers: must be positive, got %d", o.Workers))
	}
	if o.BatchPeriod < 0 {
		errs = append(errs, fmt.Errorf("--batch-period: must not be negative, got %s", o.BatchPeriod))
	}
	if o.SweepWorkers <= 0 {
		errs = append(errs, fmt.Errorf("--heartbeat-workers: must be positive, got %d", o.SweepWorkers))
	}
	if o.WatchHistory <= 0 || o.WatchMaxPending <= 0 || o.WatchMaxLag <= 0 {
		errs = append(errs, errors.New("--watch-history, --watch-max-pending and --watch-max-lag: must be positive"))
	}
	return errors.Join(errs...)
}

// WithRESTConfig returns o set to talk to the cluster of cfg instead of
// --kubeconfig's, for tests that run the service in-process.
func (o Options) WithRESTConfig(cfg *rest.Config) Options {
	o.restConfig = cfg
	return o
}

// Setup wires membership onto rt. The informers, the sweeper and the
// allocator connection stop when ctx ends; the cleanup waits for them.
func Setup(ctx context.Context, rt *server.Runtime, o Options) (func(), error) {
	cfg := rt.Config
	clients, err := kubeclient.New(kubeclient.Options{Kubeconfig: cfg.Kubeconfig, Override: o.restConfig, QPS: o.KubeQPS, Burst: o.KubeBurst, UserAgent: "plexus-membership/" + server.Version()})
	if err != nil {
		return nil, err
	}
	// Membership stamps every endpoint with the cluster's id and owns
	// addresses under it.
	id, err := clusterid.Apply(ctx, clients.Dynamic, cfg.ClusterName, rt.Logger)
	if err != nil {
		return nil, err
	}
	cfg.ClusterName = id.Cluster
	kc, mcs, workloads := clients.Kube, clients.MCS, clients.Workloads

	reg := rt.Server.Registerer()
	hub := watch.New[*membershipv1.ServiceEndpoints](
		watch.WithHistory(o.WatchHistory), watch.WithMaxPending(o.WatchMaxPending), watch.WithMaxLag(o.WatchMaxLag))
	ctrl, err := kube.New(kc, mcs, workloads, hub, kube.Options{
		ClusterName:       cfg.ClusterName,
		Workers:           o.Workers,
		BatchPeriod:       o.BatchPeriod,
		IgnoredNamespaces: o.IgnoredNamespaces,
		Logger:            rt.Logger.With("component", "informers"),
		Registerer:        reg,
	})
	if err != nil {
		return nil, err
	}
	conn, err := dial.New(cfg.AllocatorAddr, dial.FromConfig(cfg)...)
	if err != nil {
		return nil, fmt.Errorf("allocator connection: %w", err)
	}
	registrar, err := registry.New(workloads, allocatorv1.NewAllocatorServiceClient(conn), cfg.ClusterName,
		registry.WithLogger(rt.Logger.With("component", "registry")), registry.WithRegisterer(reg), registry.WithAddressBook(ctrl))
	if err != nil {
		conn.Close()
		return nil, err
	}
	sweeper, err := registry.NewSweeper(workloads, ctrl.ExternalWorkloadInformer(),
		registry.SweepWithLogger(rt.Logger.With("component", "heartbeats")), registry.SweepWithRegisterer(reg))
	if err != nil {
		conn.Close()
		return nil, err
	}
	api, err := mserver.New(hub, ctrl, registrar, cfg.ClusterName,
		mserver.WithLogger(rt.Logger.With("component", "api")), mserver.WithRegisterer(reg))
	if err != nil {
		conn.Close()
		return nil, err
	}
	api.Register(rt.Server.GRPC())

	// Until every Service found at start-up has its endpoint set, a
	// snapshot would tell consumers to drop the others.
	rt.Server.SetServing(mserver.ServiceName, false)
	rt.Server.AddReadinessCheck("informers", func(context.Context) error {
		if !ctrl.IsSynced() {
			return errors.New("informer caches not synced yet")
		}
		return nil
	})

	var wg sync.WaitGroup
	wg.Go(func() {
		if err := ctrl.Run(ctx); err != nil && ctx.Err() == nil {
			rt.Logger.Error("informers stopped", "error", err)
		}
	})
	wg.Go(func() { sweeper.Run(ctx, o.SweepWorkers) })
	wg.Go(func() {
		select {
		case <-ctrl.Synced():
			rt.Server.SetServing(mserver.ServiceName, true)
			rt.Logger.Info("membership synced", "services", hub.Len(), "revision", hub.Revision(), "epoch", hub.Epoch())
		case <-ctx.Done():
		}
	})
	return func() {
		wg.Wait()
		if err := conn.Close(); err != nil {
			rt.Logger.Warn("close allocator connection", "error", err)
		}
	}, nil
}
