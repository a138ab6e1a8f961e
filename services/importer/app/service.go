// Package app assembles the importer on the shared server runtime:
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
//
// # Refused sources
//
// A source whose membership may not speak for it (package sources: the
// certificate or the stream names another cluster) is reported as a
// Warning Event SourceRefused on the importer's Lease, the one object every
// importer has (a refusal concerns no import), and shows as REFUSED in
// ListSources. --require-cluster-identities refuses memberships whose
// certificates name no cluster.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

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
	"github.com/plexusnet/plexus/internal/policywatch"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/importer/controller"
	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/kube"
	iserver "github.com/plexusnet/plexus/services/importer/server"
	islices "github.com/plexusnet/plexus/services/importer/slices"
	"github.com/plexusnet/plexus/services/importer/sources"
)

// service is the importer's parts as Setup assembles them.
type service struct {
	rt *server.Runtime
	o  Options

	clients *kubeclient.Clients
	// clusterSet is the clusterset's name from its ClusterProperty, if
	// any.
	clusterSet string
	// pools are the VIP pools as "pools/ID"; allocConn is nil without.
	pools     []string
	allocConn *grpc.ClientConn
	identity  string
	// logger names this replica's identity.
	logger   *slog.Logger
	recorder record.EventRecorder

	store     *exports.Store
	informers *kube.Informers
	lead      *leader.Elector
	ctrl      *controller.Controller
	policy    *policywatch.Watcher
	inventory fleet.Inventory
	group     *fleet.Group
	api       *iserver.Server
}

// Setup wires the importer onto rt: open the clients, build the store,
// the controller and the sources, register the gRPC API, start the
// loops. Everything it starts stops when ctx ends; the cleanup waits for
// it and closes the connections.
func Setup(ctx context.Context, rt *server.Runtime, o Options) (func(), error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &service{rt: rt, o: o, identity: o.identity}
	return server.Assemble(ctx, rt.Logger, s.open, s.build, s.register, s.start)
}

// open connects to the member cluster, learns its id, connects to the
// allocator when VIPs come from its pools, and starts recording Events.
func (s *service) open(ctx context.Context, c *server.Cleanup) error {
	cfg, o, rt := s.rt.Config, s.o, s.rt
	var err error
	if s.pools, err = poolNames(o.VIPPools); err != nil {
		return fmt.Errorf("--vip-pool: %w", err)
	}
	// The importer tells the member cluster's own exports from the others'
	// by its id.
	member, err := clusterid.Join(ctx, kubeclient.Options{Kubeconfig: cfg.Kubeconfig, Override: o.restConfig, QPS: o.KubeQPS, Burst: o.KubeBurst, UserAgent: "plexus-importer/" + server.Version()},
		cfg.ClusterName, cfg.TLSCert, rt.Logger)
	if err != nil {
		return err
	}
	s.clients, cfg.ClusterName, s.clusterSet = member.Clients, member.Cluster, member.ClusterSet
	if s.identity == "" {
		if s.identity, err = leader.NewIdentity(); err != nil {
			return err
		}
	}
	s.logger = rt.Logger.With("identity", s.identity)
	if len(s.pools) > 0 {
		if s.allocConn, err = dial.New(cfg.AllocatorAddr, dial.FromConfig(cfg)...); err != nil {
			return fmt.Errorf("allocator connection: %w", err)
		}
		c.Close("allocator connection", s.allocConn)
	}
	s.events(c)
	return nil
}

// events starts the Event broadcaster. It is not bound to the setup's
// context: the lease release on shutdown still records its Event; the
// cleanup shuts the broadcaster down after it.
func (s *service) events(c *server.Cleanup) {
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.clients.Kube.CoreV1().Events(metav1.NamespaceAll)})
	s.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "plexus-importer", Host: s.identity})
	c.Defer(broadcaster.Shutdown)
}

// build builds the exports store, the controller that writes what it
// holds, and the sources that fill it.
func (s *service) build(context.Context, *server.Cleanup) error {
	s.store = exports.New(func(ch exports.Change) {
		if s.ctrl != nil {
			s.ctrl.Changed(ch)
		}
	})
	if err := s.controller(); err != nil {
		return err
	}
	return s.sources()
}

// controller builds the caches, the writer, leader election and the
// controller.
func (s *service) controller() error {
	reg, o := s.rt.Server.Registerer(), s.o
	kubeClient := s.clients.Kube
	tracker := kube.NewTracker(0)
	var err error
	if s.informers, err = kube.NewInformers(kubeClient, s.clients.MCS, tracker); err != nil {
		return err
	}
	writer, err := kube.NewWriter(kubeClient, s.clients.MCS, tracker, reg)
	if err != nil {
		return err
	}
	packer, err := islices.New(islices.WithMaxEndpointsPerSlice(o.MaxEndpointsPerSlice))
	if err != nil {
		return fmt.Errorf("--max-endpoints-per-slice: %w", err)
	}
	if s.lead, err = leader.NewElector(s.identity, "plexus_importer_leader", "1 while this replica is the importer leader (the one that writes), 0 otherwise.", reg); err != nil {
		return err
	}
	// Every write first checks that this replica still holds its lease:
	// resourceVersions guard against a stale cache, not against a stale
	// view of the sources that a paused, deposed leader would write.
	writer.Guard(s.lead.Valid)
	var alloc allocatorv1.AllocatorServiceClient
	if s.allocConn != nil {
		alloc = allocatorv1.NewAllocatorServiceClient(s.allocConn)
	}
	// What this cluster imports, and from whom, follows the clusterset
	// policy in this cluster.
	if s.policy, err = policywatch.New(s.clients.Dynamic, s.rt.Logger.With("component", "policy"), reg); err != nil {
		return err
	}
	if s.ctrl, err = controller.New(controller.Config{
		Policy: s.policy,
		Store:  s.store, Informers: s.informers, Tracker: tracker, Writer: writer, Kube: kubeClient,
		Allocator: alloc, VIPPools: s.pools, Guard: s.lead.Valid, Packer: packer, Recorder: s.recorder,
		Workers: o.Workers, SourceGrace: o.SourceGrace, ClusterName: s.rt.Config.ClusterName, ManageServiceCIDRs: o.ManageServiceCIDRs,
		Logger: s.rt.Logger.With("component", "controller"), Registerer: reg,
	}); err != nil {
		return err
	}
	s.policy.OnChange(s.ctrl.PolicyChanged)
	return s.informers.AddHandlers(kube.Handlers{Service: s.ctrl.Enqueue, Namespace: s.ctrl.EnqueueNamespace})
}

// sources builds the group that follows the source clusters the
// inventory names (--source, --sources-file or --inventory-namespace):
// one stream per member, reconnected when its address changes; a member
// that left is withdrawn after --source-grace.
func (s *service) sources() error {
	rt := s.rt
	srcMetrics, err := sources.NewMetrics(rt.Server.Registerer())
	if err != nil {
		return err
	}
	if s.inventory, err = s.o.Flags.Inventory(s.clients.Dynamic, "plexus-importer/"+server.Version(), s.clusterSet, rt.Logger.With("component", "inventory")); err != nil {
		return err
	}
	s.group, err = fleet.NewGroup(fleet.GroupConfig{
		Dial: fleet.Dialer(rt.Config),
		Start: func(m fleet.Member, conn *grpc.ClientConn, prev fleet.Runner) (fleet.Runner, error) {
			s.store.AddSource(m.Name)
			s.store.SetRanges(m.Name, m.Prefixes())
			var from sources.Position
			if p, ok := prev.(*sources.Source); ok {
				from = p.Position()
			}
			return sources.New(sources.Config{Name: m.Name, Addr: m.Addr, Conn: conn, Sink: s.store, Start: from,
				Logger: rt.Logger.With("component", "source"), Metrics: srcMetrics,
				Trust:     sources.Trust{Clusterset: s.clusterSet, RequireClusterIdentities: s.o.RequireClusterIdentities},
				OnRefused: func(r sources.Refusal) { s.sourceRefused(m, r) }})
		},
		Gone: func(m fleet.Member) {
			n := s.store.RemoveSource(m.Name)
			s.store.SetRanges(m.Name, nil)
			rt.Logger.Info("withdrew the exports of a cluster that left the fleet", "cluster", m.Name, "services", n)
		},
		Grace:      s.o.SourceGrace,
		Logger:     rt.Logger.With("component", "fleet"),
		Registerer: rt.Server.Registerer(),
	})
	return err
}

// sourceRefused reports a refused source as an Event on the importer's
// Lease: a refusal concerns no import, and the Lease is the one object
// every importer has (also without leader election, when it may not
// exist: the Event still names it).
func (s *service) sourceRefused(m fleet.Member, r sources.Refusal) {
	ref := &corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: s.o.LeaseNamespace, Name: s.o.LeaseName}
	identity := r.Identity
	if identity == "" {
		identity = "none"
	}
	s.recorder.Eventf(ref, corev1.EventTypeWarning, ReasonSourceRefused, "source cluster %s (%s) refused: %s: %s (identity %s)", m.Name, m.Addr, r.Reason, r.Detail, identity)
}

// ReasonSourceRefused is the reason of the Event that reports a refused
// source.
const ReasonSourceRefused = "SourceRefused"

// register registers the gRPC API, not serving until the caches have
// synced, who leads, and the readiness checks.
func (s *service) register(context.Context, *server.Cleanup) error {
	srv := s.rt.Server
	if s.allocConn != nil {
		srv.AddReadinessCheck("allocator", dial.HealthCheck(s.allocConn, "plexus.allocator.v1.AllocatorService"))
	}
	srv.AddHealthInfo(leader.Header, func() string { l, _ := s.lead.Leader(); return l })
	var err error
	if s.api, err = iserver.New(iserver.Config{Imports: s.ctrl, Store: s.store, Leader: s.lead, Synced: s.informers.HasSynced, Sources: s.sourceInfos,
		ClusterSet: s.clusterSet, RequireClusterIdentities: s.o.RequireClusterIdentities,
		Audit: s.rt.Logger.With("component", "api"), Registerer: srv.Registerer()}); err != nil {
		return err
	}
	s.api.Register(srv.GRPC())
	// Until the caches are synced every read would be NOT_SYNCED.
	srv.SetServing(iserver.ServiceName, false)
	srv.AddReadinessCheck("informers", func(context.Context) error {
		if !s.informers.HasSynced() {
			return errors.New("informer caches not synced yet")
		}
		return nil
	})
	srv.AddReadinessCheck("leader-election", s.lead.Check)
	return nil
}

// sourceInfos is the sources' state for ListSources: the fleet's members
// and leavers, with what the store and each stream know.
func (s *service) sourceInfos() []iserver.SourceInfo {
	states := s.store.Sources()
	members := s.group.States()
	out := make([]iserver.SourceInfo, 0, len(members))
	for _, m := range members {
		info := iserver.SourceInfo{Cluster: m.Member.Name, Addr: m.Member.Addr, ServerName: m.Member.ServerName,
			Since: m.Since, LeftAt: m.LeftAt, Exported: s.store.Exported(m.Member.Name)}
		if st, ok := states[m.Member.Name]; ok {
			info.Connected, info.Synced, info.LastHeard = st.Connected, st.Synced, st.LastHeard
		}
		if m.Err != nil {
			info.Err = m.Err.Error()
		}
		if src, ok := m.Runner.(*sources.Source); ok {
			info.Running = true
			pos := src.Position()
			info.Epoch, info.Revision = pos.Epoch, pos.Revision
			if err := src.LastError(); err != nil {
				info.Err = err.Error()
			}
			info.Identity = src.Identity()
			if r := src.Refusal(); r != nil {
				info.Refusal = r.Reason
			}
		}
		out = append(out, info)
	}
	return out
}

// start runs the caches and the sources until ctx ends, serves the API
// once the caches have synced, and runs the controller while this replica
// leads.
func (s *service) start(ctx context.Context, c *server.Cleanup) error {
	s.informers.Start(ctx)
	c.Go(func() { s.policy.Run(ctx) })
	c.Go(func() {
		if err := s.group.Run(ctx, s.inventory); err != nil && ctx.Err() == nil {
			s.logger.Error("stopped following the member clusters", "error", err)
		}
	})
	c.Go(func() {
		if s.informers.WaitForSync(ctx) {
			s.rt.Server.SetServing(iserver.ServiceName, true)
			s.logger.Info("importer caches synced", "sources", len(s.group.States()))
		}
	})
	if !s.o.LeaderElect {
		s.lead.Start(ctx)
		c.Go(func() {
			s.runController(ctx)
			s.lead.Stop()
		})
		return nil
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: s.o.LeaseNamespace, Name: s.o.LeaseName},
		Client:     s.clients.Kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: s.identity, EventRecorder: s.recorder},
	}
	c.Go(func() { s.lead.Run(ctx, lock, s.o.Config, s.term, s.logger) })
	return nil
}

// term runs one leadership term: the controller writes until the term
// ends, then the term's pushes are forgotten.
func (s *service) term(term context.Context) {
	s.lead.Start(term)
	s.runController(term)
	if n := s.api.EndTerm(); n > 0 {
		s.logger.Info("forgot the pushes of the ended term; their clusters push again to the next leader", "exports", n)
	}
}

// runController runs the controller until ctx ends.
func (s *service) runController(ctx context.Context) {
	if err := s.ctrl.Run(ctx); err != nil && ctx.Err() == nil {
		s.logger.Error("controller stopped", "error", err)
	}
}
