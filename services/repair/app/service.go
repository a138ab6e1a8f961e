// Package service assembles the repair service on the shared server
// runtime: the member cluster's informers and the source memberships (the
// owner view), the allocator connection, the pass runner, leader election,
// the periodic passes, Kubernetes Events, readiness and the gRPC API. The
// command's main and in-process tests both start it with Setup.
//
// # Leadership
//
// With --leader-elect (the default) the replicas elect one leader through a
// Lease (client-go, released on shutdown). Only the leader runs periodic
// passes and answers RunRepair; it forgets the strikes of any earlier term
// when it becomes leader, so every leak it frees was seen in
// --leak-strikes passes of its own. When leadership is lost the pass in
// flight is cancelled: releases not yet sent are not sent. Leader election
// does not fence: a deposed leader's release in flight is still a guarded
// release, refused if the allocation changed hands.
//
// # Readiness
//
// /readyz lists the checks "informers" (the member cluster's caches are
// synced and their watches healthy), "sources" (every --source holds a
// current snapshot), "allocator" (reachable and serving) and
// "leader-election" (a leader is known; it passes on the leader and on
// followers alike, so a follower stays in rotation and can tell callers
// who leads). A failing informer or source check is exactly what makes
// passes UNSYNCED. Who leads is exported as plexus_repair_leader (1 on the
// leader) and named in NOT_LEADER errors.
//
// # Kubernetes permissions
//
// In the member cluster: list and watch Pods, Services, ExternalWorkloads
// (workload.plexus.dev) and ServiceImports (multicluster.x-k8s.io); list,
// watch and delete EndpointSlices (only those labelled
// endpointslice.kubernetes.io/managed-by=importer.plexus.dev are ever
// listed or deleted); create and patch Events; get, create and update the
// Lease named by --lease-namespace/--lease-name. The ExternalWorkload and
// ServiceImport CRDs must be installed: until every informer has synced,
// every pass is UNSYNCED.
package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/clusterid"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/fleet"
	"github.com/plexusnet/plexus/internal/kubeclient"
	"github.com/plexusnet/plexus/internal/leader"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/repair/owners"
	"github.com/plexusnet/plexus/services/repair/pass"
	rserver "github.com/plexusnet/plexus/services/repair/server"
)

// Setup wires repair onto rt. Everything it starts stops when ctx ends; the
// cleanup waits for it and closes the connections.
func Setup(ctx context.Context, rt *server.Runtime, o Options) (func(), error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	cfg := rt.Config
	clients, err := kubeclient.New(kubeclient.Options{Kubeconfig: cfg.Kubeconfig, Override: o.restConfig, QPS: o.KubeQPS, Burst: o.KubeBurst, UserAgent: "plexus-repair/" + server.Version()})
	if err != nil {
		return nil, err
	}
	kube, mcs, workloads := clients.Kube, clients.MCS, clients.Workloads
	// Repair resolves the Pods and ExternalWorkloads of this cluster only.
	id, err := clusterid.Apply(ctx, clients.Dynamic, cfg.ClusterName, rt.Logger)
	if err != nil {
		return nil, err
	}
	cfg.ClusterName = id.Cluster

	var conns []interface{ Close() error }
	closeAll := func() {
		for _, c := range conns {
			if err := c.Close(); err != nil {
				rt.Logger.Warn("close connection", "error", err)
			}
		}
	}
	view, err := owners.New(owners.Config{
		Cluster: cfg.ClusterName, Kube: kube, MCS: mcs, Workloads: workloads,
		Logger: rt.Logger.With("component", "owners"),
	})
	if err != nil {
		return nil, err
	}
	// The sources follow the fleet. A member that leaves stops counting at
	// once: its services stay alive through this cluster's ServiceImports
	// until the importer withdraws them, after its own grace.
	inventory, err := o.Flags.Inventory(clients.Dynamic, "plexus-repair/"+server.Version(), id.ClusterSet, rt.Logger.With("component", "inventory"))
	if err != nil {
		return nil, err
	}
	group, err := fleet.NewGroup(fleet.GroupConfig{
		Dial: fleet.Dialer(cfg),
		Start: func(m fleet.Member, conn *grpc.ClientConn, _ fleet.Runner) (fleet.Runner, error) {
			src := owners.NewSource(m.Name, m.Addr, conn, rt.Logger.With("component", "source"))
			view.AddSource(src)
			return src, nil
		},
		Left:       func(m fleet.Member) { view.RemoveSource(m.Name) },
		Logger:     rt.Logger.With("component", "fleet"),
		Registerer: rt.Server.Registerer(),
	})
	if err != nil {
		return nil, err
	}
	allocConn, err := dial.New(cfg.AllocatorAddr, dial.FromConfig(cfg)...)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("allocator connection: %w", err)
	}
	conns = append(conns, allocConn)

	identity := o.identity
	if identity == "" {
		if identity, err = leader.NewIdentity(); err != nil {
			closeAll()
			return nil, err
		}
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events(metav1.NamespaceAll)})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "plexus-repair", Host: identity})

	elector, err := leader.NewElector(identity, "plexus_repair_leader", "1 while this replica is the repair leader, 0 otherwise.", rt.Server.Registerer())
	if err != nil {
		broadcaster.Shutdown()
		closeAll()
		return nil, err
	}
	runner, err := pass.New(o.decideConfig(view.Scopes()), allocatorv1.NewAllocatorServiceClient(allocConn), view,
		pass.WithLogger(rt.Logger.With("component", "pass")),
		pass.WithRecorder(recorder),
		pass.WithRegisterer(rt.Server.Registerer()),
		pass.WithBeforeAct(o.beforeAct),
		// The term's context ends only when a renew round has failed;
		// a leader whose lease is no longer fresh stops writing first.
		pass.WithGuard(elector.Valid))
	if err != nil {
		broadcaster.Shutdown()
		closeAll()
		return nil, err
	}
	rserver.New(runner, elector).Register(rt.Server.GRPC())
	rt.Server.AddHealthInfo(leader.Header, func() string { l, _ := elector.Leader(); return l })

	// Until the caches are synced every pass would be UNSYNCED.
	rt.Server.SetServing(rserver.ServiceName, false)
	rt.Server.AddReadinessCheck("informers", func(context.Context) error { return view.InformersSynced() })
	rt.Server.AddReadinessCheck("sources", func(context.Context) error { return view.SourcesSynced() })
	rt.Server.AddReadinessCheck("allocator", dial.HealthCheck(allocConn, "plexus.allocator.v1.AllocatorService"))
	rt.Server.AddReadinessCheck("leader-election", elector.Check)

	logger := rt.Logger.With("identity", identity)
	var wg sync.WaitGroup
	wg.Go(func() { view.Run(ctx) })
	wg.Go(func() {
		if err := group.Run(ctx, inventory); err != nil && ctx.Err() == nil {
			logger.Error("stopped following the member clusters", "error", err)
		}
	})
	wg.Go(func() {
		if view.WaitForSync(ctx) {
			rt.Server.SetServing(rserver.ServiceName, true)
			logger.Info("repair informers synced")
		}
	})
	periodic := func(term context.Context) {
		t := time.NewTicker(o.Interval)
		defer t.Stop()
		for {
			select {
			case <-term.Done():
				return
			case <-t.C:
			}
			if _, err := runner.Run(term, o.DryRun); err != nil && term.Err() == nil {
				logger.Warn("periodic pass not run", "error", err)
			}
		}
	}
	// lead runs one term: forget the strikes of any earlier term, accept
	// RunRepair, and run the periodic passes until the term ends.
	lead := func(term context.Context) {
		if err := runner.Reset(term); err != nil {
			return
		}
		elector.Start(term)
		periodic(term)
	}
	if o.LeaderElect {
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: o.LeaseNamespace, Name: o.LeaseName},
			Client:     kube.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity, EventRecorder: recorder},
		}
		wg.Go(func() { elector.Run(ctx, lock, o.Config, lead, logger) })
	} else {
		// The only replica leads from the start.
		elector.Start(ctx)
		wg.Go(func() { periodic(ctx) })
	}
	return func() {
		wg.Wait()
		broadcaster.Shutdown()
		closeAll()
	}, nil
}
