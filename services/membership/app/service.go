// Package app assembles the membership service on the shared server
// runtime: Kubernetes clients, the informer controller, the watch hub, the
// registry and its heartbeat sweeper, the allocator connection and the gRPC
// API. The command's main and in-process tests both start it with Setup.
package app

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/clusterid"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/kubeclient"
	"github.com/plexusnet/plexus/internal/policywatch"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/membership/controller"
	"github.com/plexusnet/plexus/services/membership/registry"
	mserver "github.com/plexusnet/plexus/services/membership/server"
	"github.com/plexusnet/plexus/services/membership/watch"
)

// service is membership's parts as Setup assembles them.
type service struct {
	rt *server.Runtime
	o  Options

	clients   *kubeclient.Clients
	allocConn *grpc.ClientConn

	hub       *controller.Hub
	ctrl      *controller.Controller
	registrar *registry.Registry
	sweeper   *registry.Sweeper
	policy    *policywatch.Watcher
}

// Setup wires membership onto rt: open the clients, build the controller
// and the registry, register the gRPC API, start the loops. The informers
// and the sweeper stop when ctx ends; the cleanup waits for them and
// closes the allocator connection.
func Setup(ctx context.Context, rt *server.Runtime, o Options) (func(), error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &service{rt: rt, o: o}
	return server.Assemble(ctx, rt.Logger, s.open, s.build, s.register, s.start)
}

// open connects to the member cluster, learns its id and connects to the
// allocator.
func (s *service) open(ctx context.Context, c *server.Cleanup) error {
	cfg, o := s.rt.Config, s.o
	var err error
	// Membership stamps every endpoint with the cluster's id and owns
	// addresses under it.
	member, err := clusterid.Join(ctx, kubeclient.Options{Kubeconfig: cfg.Kubeconfig, Override: o.restConfig, QPS: o.KubeQPS, Burst: o.KubeBurst, UserAgent: "plexus-membership/" + server.Version()},
		cfg.ClusterName, cfg.TLSCert, s.rt.Logger)
	if err != nil {
		return err
	}
	s.clients, cfg.ClusterName = member.Clients, member.Cluster
	if s.allocConn, err = dial.New(cfg.AllocatorAddr, dial.FromConfig(cfg)...); err != nil {
		return fmt.Errorf("allocator connection: %w", err)
	}
	c.Close("allocator connection", s.allocConn)
	return nil
}

// build builds the watch hub, the informer controller that feeds it, and
// the registry of external workloads with its heartbeat sweeper.
func (s *service) build(context.Context, *server.Cleanup) error {
	rt, o, cluster := s.rt, s.o, s.rt.Config.ClusterName
	reg, workloads := rt.Server.Registerer(), s.clients.Workloads
	s.hub = watch.New[*membershipv1.ServiceEndpoints](
		watch.WithHistory(o.WatchHistory), watch.WithMaxPending(o.WatchMaxPending), watch.WithMaxLag(o.WatchMaxLag))
	var err error
	// The clusterset policy may refuse this cluster's exports of a
	// namespace; a change of it is a change of every export.
	if s.policy, err = policywatch.New(s.clients.Dynamic, rt.Logger.With("component", "policy"), reg); err != nil {
		return err
	}
	if s.ctrl, err = controller.New(s.clients.Kube, s.clients.MCS, workloads, s.hub, controller.Options{
		Policy:            s.policy,
		ClusterName:       cluster,
		Workers:           o.Workers,
		BatchPeriod:       o.BatchPeriod,
		IgnoredNamespaces: o.IgnoredNamespaces,
		Logger:            rt.Logger.With("component", "informers"),
		Registerer:        reg,
	}); err != nil {
		return err
	}
	s.policy.OnChange(s.ctrl.PolicyChanged)
	if s.registrar, err = registry.New(workloads, allocatorv1.NewAllocatorServiceClient(s.allocConn), cluster,
		registry.WithLogger(rt.Logger.With("component", "registry")), registry.WithRegisterer(reg), registry.WithAddressBook(s.ctrl.Caches())); err != nil {
		return err
	}
	s.sweeper, err = registry.NewSweeper(workloads, s.ctrl.Caches().ExternalWorkloadInformer(),
		registry.SweepWithLogger(rt.Logger.With("component", "heartbeats")), registry.SweepWithRegisterer(reg))
	return err
}

// register registers the gRPC API, not serving until the informers have
// synced, and the readiness check.
func (s *service) register(context.Context, *server.Cleanup) error {
	rt := s.rt
	api, err := mserver.New(s.hub, s.ctrl, s.registrar, rt.Config.ClusterName,
		mserver.WithLogger(rt.Logger.With("component", "api")), mserver.WithRegisterer(rt.Server.Registerer()))
	if err != nil {
		return err
	}
	api.Register(rt.Server.GRPC())
	// Until every Service found at start-up has its endpoint set, a
	// snapshot would tell consumers to drop the others.
	rt.Server.SetServing(mserver.ServiceName, false)
	rt.Server.AddReadinessCheck("informers", func(context.Context) error {
		if !s.ctrl.IsSynced() {
			return errors.New("informer caches not synced yet")
		}
		return nil
	})
	return nil
}

// start runs the informers and the sweeper until ctx ends, and serves the
// API once the informers have synced.
func (s *service) start(ctx context.Context, c *server.Cleanup) error {
	rt := s.rt
	c.Go(func() {
		if err := s.ctrl.Run(ctx); err != nil && ctx.Err() == nil {
			rt.Logger.Error("informers stopped", "error", err)
		}
	})
	c.Go(func() { s.sweeper.Run(ctx, s.o.SweepWorkers) })
	c.Go(func() { s.policy.Run(ctx) })
	c.Go(func() {
		select {
		case <-s.ctrl.Synced():
			rt.Server.SetServing(mserver.ServiceName, true)
			rt.Logger.Info("membership synced", "services", s.hub.Len(), "revision", s.hub.Revision(), "epoch", s.hub.Epoch())
		case <-ctx.Done():
		}
	})
	return nil
}
