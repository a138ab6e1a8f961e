// Package service assembles the importer on the shared server runtime:
// the exports store, one stream per --source, the member cluster's
// informers, the writer and tracker, the allocator connection, the
// controller, leader election, readiness and the gRPC API. The command's
// main and in-process tests both start it with Setup.
//
// # Leadership
//
// With --leader-elect (the default) the replicas elect one leader through a
// Lease (client-go, released on shutdown). Every replica follows the
// sources and keeps its caches warm; only the leader runs the controller
// and accepts pushes. Pushes live in the memory of the leader that accepted
// them, for its term: when the term ends they are forgotten, and their
// pushers push again to the next leader within --source-grace. Leader
// election does not fence: every write first asks the elector whether the
// lease was renewed within the renew deadline, and the writes of a deposed
// leader still in flight carry resourceVersion preconditions.
//
// # Readiness
//
// /readyz lists "informers" (the member cluster's caches are synced),
// "leader-election" (a leader is known; it passes on the leader and on
// followers alike, so followers keep serving reads) and, with --vip-pool,
// "allocator". An unreachable source does not make the importer unready:
// its last known endpoints stay imported, marked stale. Leadership is
// exported as plexus_importer_leader (1 on the leader), source health as
// plexus_importer_source_connected.
package service

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	allocatorv1 "github.com/plexusnet/plexus/clients/go/plexus/allocator/v1"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/kubeclient"
	"github.com/plexusnet/plexus/internal/leader"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/importer/controller"
	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/kube"
	iserver "github.com/plexusnet/plexus/services/importer/server"
	islices "github.com/plexusnet/plexus/services/importer/slices"
	"github.com/plexusnet/plexus/services/importer/sources"
)

// Setup wires the importer onto rt. Everything it starts stops when ctx
// ends; the cleanup waits for it and closes the connections.
func Setup(ctx context.Context, rt *server.Runtime, o Options) (func(), error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	cfg := rt.Config
	srcSpecs, err := config.ParseSources(o.Sources)
	if err != nil {
		return nil, fmt.Errorf("--source: %w", err)
	}
	pools, err := poolNames(o.VIPPools)
	if err != nil {
		return nil, fmt.Errorf("--vip-pool: %w", err)
	}
	clients, err := kubeclient.New(kubeclient.Options{Kubeconfig: cfg.Kubeconfig, Override: o.restConfig, QPS: o.KubeQPS, Burst: o.KubeBurst, UserAgent: "plexus-importer/" + server.Version()})
	if err != nil {
		return nil, err
	}
	kubeClient, mcs := clients.Kube, clients.MCS
	reg := rt.Server.Registerer()

	var conns []interface{ Close() error }
	closeAll := func() {
		for _, c := range conns {
			if err := c.Close(); err != nil {
				rt.Logger.Warn("close connection", "error", err)
			}
		}
	}
	fail := func(err error) (func(), error) {
		closeAll()
		return nil, err
	}

	identity := o.identity
	if identity == "" {
		if identity, err = leader.NewIdentity(); err != nil {
			return nil, err
		}
	}

	var ctrl *controller.Controller
	store := exports.New(func(k exports.Key) {
		if ctrl != nil {
			ctrl.Enqueue(k)
		}
	})
	tracker := kube.NewTracker(0)
	informers, err := kube.NewInformers(kubeClient, mcs, tracker)
	if err != nil {
		return nil, err
	}
	writer, err := kube.NewWriter(kubeClient, mcs, tracker, reg)
	if err != nil {
		return nil, err
	}
	packer, err := islices.New(islices.WithMaxEndpointsPerSlice(o.MaxEndpointsPerSlice))
	if err != nil {
		return nil, fmt.Errorf("--max-endpoints-per-slice: %w", err)
	}
	var alloc allocatorv1.AllocatorServiceClient
	if len(pools) > 0 {
		conn, err := dial.New(cfg.AllocatorAddr, dial.FromConfig(cfg)...)
		if err != nil {
			return nil, fmt.Errorf("allocator connection: %w", err)
		}
		conns = append(conns, conn)
		alloc = allocatorv1.NewAllocatorServiceClient(conn)
		rt.Server.AddReadinessCheck("allocator", dial.HealthCheck(conn, "plexus.allocator.v1.AllocatorService"))
	}

	// Not bound to ctx: the lease release on shutdown still records its
	// Event; the cleanup shuts the broadcaster down after it.
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kubeClient.CoreV1().Events(metav1.NamespaceAll)})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "plexus-importer", Host: identity})
	closeAll0 := closeAll
	closeAll = func() {
		broadcaster.Shutdown()
		closeAll0()
	}

	lead, err := leader.NewElector(identity, "plexus_importer_leader", "1 while this replica is the importer leader (the one that writes), 0 otherwise.", reg)
	if err != nil {
		return fail(err)
	}
	// Every write first checks that this replica still holds its lease:
	// resourceVersions guard against a stale cache, not against a stale
	// view of the sources that a paused, deposed leader would write.
	writer.Guard(lead.Valid)
	ctrl, err = controller.New(controller.Config{
		Store: store, Informers: informers, Tracker: tracker, Writer: writer, Kube: kubeClient,
		Allocator: alloc, VIPPools: pools, Guard: lead.Valid, Packer: packer, Recorder: recorder,
		Workers: o.Workers, SourceGrace: o.SourceGrace,
		Logger: rt.Logger.With("component", "controller"), Registerer: reg,
	})
	if err != nil {
		return fail(err)
	}
	if err := informers.AddHandlers(kube.Handlers{Service: ctrl.Enqueue, Namespace: ctrl.EnqueueNamespace}); err != nil {
		return fail(err)
	}

	srcMetrics, err := sources.NewMetrics(reg)
	if err != nil {
		return fail(err)
	}
	var srcs []*sources.Source
	for _, s := range srcSpecs {
		store.AddSource(s.Name)
		// The source's loop retries with its own backoff and reports
		// every failure; retries inside the call would only hide an
		// unreachable source for a while.
		conn, err := dial.New(s.Addr, append(dial.FromConfig(cfg), dial.WithoutRetry())...)
		if err != nil {
			return fail(fmt.Errorf("source %s: %w", s.Name, err))
		}
		conns = append(conns, conn)
		src, err := sources.New(sources.Config{Name: s.Name, Addr: s.Addr, Conn: conn, Sink: store,
			Logger: rt.Logger.With("component", "source"), Metrics: srcMetrics})
		if err != nil {
			return fail(err)
		}
		srcs = append(srcs, src)
	}

	rt.Server.AddHealthInfo(leader.Header, func() string { l, _ := lead.Leader(); return l })
	api, err := iserver.New(iserver.Config{Imports: ctrl, Store: store, Leader: lead, Synced: informers.HasSynced})
	if err != nil {
		return fail(err)
	}
	api.Register(rt.Server.GRPC())

	// Until the caches are synced every read would be NOT_SYNCED.
	rt.Server.SetServing(iserver.ServiceName, false)
	rt.Server.AddReadinessCheck("informers", func(context.Context) error {
		if !informers.HasSynced() {
			return errors.New("informer caches not synced yet")
		}
		return nil
	})
	rt.Server.AddReadinessCheck("leader-election", lead.Check)

	logger := rt.Logger.With("identity", identity)
	informers.Start(ctx)
	var wg sync.WaitGroup
	for _, src := range srcs {
		wg.Go(func() { src.Run(ctx) })
	}
	wg.Go(func() {
		if informers.WaitForSync(ctx) {
			rt.Server.SetServing(iserver.ServiceName, true)
			logger.Info("importer caches synced", "sources", len(srcs))
		}
	})
	term := func(term context.Context) {
		if err := ctrl.Run(term); err != nil && term.Err() == nil {
			logger.Error("controller stopped", "error", err)
		}
	}
	if o.LeaderElect {
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: o.LeaseNamespace, Name: o.LeaseName},
			Client:     kubeClient.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity, EventRecorder: recorder},
		}
		wg.Go(func() {
			lead.Run(ctx, lock, o.Config, func(t context.Context) {
				lead.Start(t)
				term(t)
				if n := api.EndTerm(); n > 0 {
					logger.Info("forgot the pushes of the ended term; their clusters push again to the next leader", "exports", n)
				}
			}, logger)
		})
	} else {
		lead.Start(ctx)
		wg.Go(func() {
			term(ctx)
			lead.Stop()
		})
	}
	return func() {
		wg.Wait()
		closeAll()
	}, nil
}
