// Package app assembles the repair service on the shared server
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
	"log/slog"
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
	"github.com/plexusnet/plexus/services/repair/kube"
	"github.com/plexusnet/plexus/services/repair/pass"
	rserver "github.com/plexusnet/plexus/services/repair/server"
	"github.com/plexusnet/plexus/services/repair/sources"
)

// service is repair's parts as Setup assembles them.
type service struct {
	rt *server.Runtime
	o  Options

	clients *kubeclient.Clients
	// clusterSet is the clusterset's name from its ClusterProperty, if
	// any.
	clusterSet string
	// clusterBound: the certificate this repair presents to the
	// allocator names its cluster, so it may release that cluster's
	// allocations only (decide.Config.ClusterBound).
	clusterBound bool
	allocConn    *grpc.ClientConn
	identity     string
	// logger names this replica's identity.
	logger   *slog.Logger
	recorder record.EventRecorder

	view      *kube.View
	inventory fleet.Inventory
	group     *fleet.Group
	elector   *leader.Elector
	runner    *pass.Runner
}

// Setup wires repair onto rt: open the clients, build the owner view and
// the pass runner, register the gRPC API, start the loops. Everything it
// starts stops when ctx ends; the cleanup waits for it and closes the
// connections.
func Setup(ctx context.Context, rt *server.Runtime, o Options) (func(), error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &service{rt: rt, o: o, identity: o.identity}
	return server.Assemble(ctx, rt.Logger, s.open, s.build, s.register, s.start)
}

// open connects to the member cluster, learns its id, connects to the
// allocator and starts recording Events.
func (s *service) open(ctx context.Context, c *server.Cleanup) error {
	cfg, o := s.rt.Config, s.o
	var err error
	// Repair resolves the Pods and ExternalWorkloads of this cluster only.
	// Its certificate binds it to the cluster only when the allocator sees
	// it (mutual TLS).
	certFile := ""
	if cfg.PeerCA != "" {
		certFile = cfg.TLSCert
	}
	member, err := clusterid.Join(ctx, kubeclient.Options{Kubeconfig: cfg.Kubeconfig, Override: o.restConfig, QPS: o.KubeQPS, Burst: o.KubeBurst, UserAgent: "plexus-repair/" + server.Version()},
		cfg.ClusterName, certFile, s.rt.Logger)
	if err != nil {
		return err
	}
	s.clients, cfg.ClusterName, s.clusterSet, s.clusterBound = member.Clients, member.Cluster, member.ClusterSet, member.CertBound
	if s.clusterBound {
		s.rt.Logger.Info("the certificate names this cluster: releasing its allocations only; leaked clusterset VIPs and stalled pool deletions are left to a repair with fleet rights",
			"cluster", member.Cluster)
	}
	if s.allocConn, err = dial.New(cfg.AllocatorAddr, dial.FromConfig(cfg)...); err != nil {
		return fmt.Errorf("allocator connection: %w", err)
	}
	c.Close("allocator connection", s.allocConn)
	if s.identity == "" {
		if s.identity, err = leader.NewIdentity(); err != nil {
			return err
		}
	}
	s.logger = s.rt.Logger.With("identity", s.identity)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.clients.Kube.CoreV1().Events(metav1.NamespaceAll)})
	s.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "plexus-repair", Host: s.identity})
	c.Defer(broadcaster.Shutdown)
	return nil
}

// build builds the owner view with the sources that follow the fleet,
// leader election and the pass runner.
func (s *service) build(context.Context, *server.Cleanup) error {
	rt, cfg := s.rt, s.rt.Config
	var err error
	if s.view, err = kube.New(kube.Config{
		Cluster: cfg.ClusterName, Kube: s.clients.Kube, MCS: s.clients.MCS, Workloads: s.clients.Workloads,
		Logger: rt.Logger.With("component", "view"),
	}); err != nil {
		return err
	}
	if err := s.sources(); err != nil {
		return err
	}
	if s.elector, err = leader.NewElector(s.identity, "plexus_repair_leader", "1 while this replica is the repair leader, 0 otherwise.", rt.Server.Registerer()); err != nil {
		return err
	}
	s.runner, err = pass.New(s.o.decideConfig(s.view.Scopes(), s.clusterBound), allocatorv1.NewAllocatorServiceClient(s.allocConn), s.view,
		pass.WithLogger(rt.Logger.With("component", "pass")),
		pass.WithRecorder(s.recorder),
		pass.WithRegisterer(rt.Server.Registerer()),
		pass.WithBeforeAct(s.o.beforeAct),
		// The term's context ends only when a renew round has failed;
		// a leader whose lease is no longer fresh stops writing first.
		pass.WithGuard(s.elector.Valid))
	return err
}

// sources builds the group that follows the source clusters the
// inventory names, each member's exports a source of the owner view. A
// member that leaves stops counting at once: its services stay alive
// through this cluster's ServiceImports until the importer withdraws them,
// after its own grace.
func (s *service) sources() error {
	rt := s.rt
	var err error
	if s.inventory, err = s.o.Flags.Inventory(s.clients.Dynamic, "plexus-repair/"+server.Version(), s.clusterSet, rt.Logger.With("component", "inventory")); err != nil {
		return err
	}
	s.group, err = fleet.NewGroup(fleet.GroupConfig{
		Dial: fleet.Dialer(rt.Config),
		Start: func(m fleet.Member, conn *grpc.ClientConn, _ fleet.Runner) (fleet.Runner, error) {
			src := sources.NewSource(m.Name, m.Addr, conn, rt.Logger.With("component", "source"))
			s.view.AddSource(src)
			return src, nil
		},
		Left:       func(m fleet.Member) { s.view.RemoveSource(m.Name) },
		Logger:     rt.Logger.With("component", "fleet"),
		Registerer: rt.Server.Registerer(),
	})
	return err
}

// register registers the gRPC API, not serving until the informers have
// synced, who leads, and the readiness checks.
func (s *service) register(context.Context, *server.Cleanup) error {
	srv := s.rt.Server
	rserver.New(s.runner, s.elector).Register(srv.GRPC())
	srv.AddHealthInfo(leader.Header, func() string { l, _ := s.elector.Leader(); return l })
	// Until the caches are synced every pass would be UNSYNCED.
	srv.SetServing(rserver.ServiceName, false)
	srv.AddReadinessCheck("informers", func(context.Context) error { return s.view.InformersSynced() })
	srv.AddReadinessCheck("sources", func(context.Context) error { return s.view.SourcesSynced() })
	srv.AddReadinessCheck("allocator", dial.HealthCheck(s.allocConn, "plexus.allocator.v1.AllocatorService"))
	srv.AddReadinessCheck("leader-election", s.elector.Check)
	return nil
}

// start runs the informers and the sources until ctx ends, serves the API
// once the informers have synced, and runs the periodic passes while this
// replica leads.
func (s *service) start(ctx context.Context, c *server.Cleanup) error {
	logger := s.logger
	c.Go(func() { s.view.Run(ctx) })
	c.Go(func() {
		if err := s.group.Run(ctx, s.inventory); err != nil && ctx.Err() == nil {
			logger.Error("stopped following the member clusters", "error", err)
		}
	})
	c.Go(func() {
		if s.view.WaitForSync(ctx) {
			s.rt.Server.SetServing(rserver.ServiceName, true)
			logger.Info("repair informers synced")
		}
	})
	if !s.o.LeaderElect {
		// The only replica leads from the start.
		s.elector.Start(ctx)
		c.Go(func() { s.periodic(ctx) })
		return nil
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: s.o.LeaseNamespace, Name: s.o.LeaseName},
		Client:     s.clients.Kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: s.identity, EventRecorder: s.recorder},
	}
	c.Go(func() { s.elector.Run(ctx, lock, s.o.Config, s.lead, logger) })
	return nil
}

// lead runs one term: forget the strikes of any earlier term, accept
// RunRepair, and run the periodic passes until the term ends.
func (s *service) lead(term context.Context) {
	if err := s.runner.Reset(term); err != nil {
		return
	}
	s.elector.Start(term)
	s.periodic(term)
}

// periodic runs a pass every --interval until the term ends.
func (s *service) periodic(term context.Context) {
	t := time.NewTicker(s.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-term.Done():
			return
		case <-t.C:
		}
		if _, err := s.runner.Run(term, s.o.DryRun); err != nil && term.Err() == nil {
			s.logger.Warn("periodic pass not run", "error", err)
		}
	}
}
