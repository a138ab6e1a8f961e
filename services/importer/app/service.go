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
package app

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
	"github.com/plexusnet/plexus/services/importer/controller"
	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/kube"
	iserver "github.com/plexusnet/plexus/services/importer/server"
	islices "github.com/plexusnet/plexus/services/importer/slices"
	"github.com/plexusnet/plexus/services/importer/sources"
)

// importer is the importer's parts as Setup assembles them.
type importer struct {
	rt       *server.Runtime
	o        Options
	identity string
	clients  *kubeclient.Clients
	// clusterSet is the clusterset's name from its ClusterProperty, if
	// any.
	clusterSet string
	conns      []interface{ Close() error }

	store     *exports.Store
	informers *kube.Informers
	recorder  record.EventRecorder
	lead      *leader.Elector
	ctrl      *controller.Controller
	inventory fleet.Inventory
	group     *fleet.Group
	api       *iserver.Server
	shutdown  []func()
}

// Setup wires the importer onto rt. Everything it starts stops when ctx
// ends; the cleanup waits for it and closes the connections.
func Setup(ctx context.Context, rt *server.Runtime, o Options) (func(), error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	im := &importer{rt: rt, o: o, identity: o.identity}
	if err := im.assemble(ctx); err != nil {
		im.close()
		return nil, err
	}
	return im.start(ctx), nil
}

// close closes the connections and stops the event broadcaster.
func (im *importer) close() {
	for _, f := range im.shutdown {
		f()
	}
	for _, c := range im.conns {
		if err := c.Close(); err != nil {
			im.rt.Logger.Warn("close connection", "error", err)
		}
	}
}

// assemble builds every part, in the order they depend on each other.
func (im *importer) assemble(ctx context.Context) error {
	cfg, o, rt := im.rt.Config, im.o, im.rt
	pools, err := poolNames(o.VIPPools)
	if err != nil {
		return fmt.Errorf("--vip-pool: %w", err)
	}
	if im.clients, err = kubeclient.New(kubeclient.Options{Kubeconfig: cfg.Kubeconfig, Override: o.restConfig, QPS: o.KubeQPS, Burst: o.KubeBurst, UserAgent: "plexus-importer/" + server.Version()}); err != nil {
		return err
	}
	// The importer tells the member cluster's own exports from the others'
	// by its id.
	id, err := clusterid.Apply(ctx, im.clients.Dynamic, cfg.ClusterName, rt.Logger)
	if err != nil {
		return err
	}
	cfg.ClusterName = id.Cluster
	im.clusterSet = id.ClusterSet
	if im.identity == "" {
		if im.identity, err = leader.NewIdentity(); err != nil {
			return err
		}
	}
	im.store = exports.New(func(ch exports.Change) {
		if im.ctrl != nil {
			im.ctrl.Changed(ch)
		}
	})
	alloc, err := im.allocator(pools)
	if err != nil {
		return err
	}
	im.events()
	if err := im.controller(alloc, pools); err != nil {
		return err
	}
	if err := im.sources(); err != nil {
		return err
	}
	rt.Server.AddHealthInfo(leader.Header, func() string { l, _ := im.lead.Leader(); return l })
	if im.api, err = iserver.New(iserver.Config{Imports: im.ctrl, Store: im.store, Leader: im.lead, Synced: im.informers.HasSynced, Sources: im.sourceInfos}); err != nil {
		return err
	}
	im.api.Register(rt.Server.GRPC())
	// Until the caches are synced every read would be NOT_SYNCED.
	rt.Server.SetServing(iserver.ServiceName, false)
	rt.Server.AddReadinessCheck("informers", func(context.Context) error {
		if !im.informers.HasSynced() {
			return errors.New("informer caches not synced yet")
		}
		return nil
	})
	rt.Server.AddReadinessCheck("leader-election", im.lead.Check)
	return nil
}

// allocator connects to the allocator when VIPs come from its pools.
func (im *importer) allocator(pools []string) (allocatorv1.AllocatorServiceClient, error) {
	if len(pools) == 0 {
		return nil, nil
	}
	conn, err := dial.New(im.rt.Config.AllocatorAddr, dial.FromConfig(im.rt.Config)...)
	if err != nil {
		return nil, fmt.Errorf("allocator connection: %w", err)
	}
	im.conns = append(im.conns, conn)
	im.rt.Server.AddReadinessCheck("allocator", dial.HealthCheck(conn, "plexus.allocator.v1.AllocatorService"))
	return allocatorv1.NewAllocatorServiceClient(conn), nil
}

// events starts the Event broadcaster. It is not bound to the setup's
// context: the lease release on shutdown still records its Event; close
// shuts the broadcaster down after it.
func (im *importer) events() {
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: im.clients.Kube.CoreV1().Events(metav1.NamespaceAll)})
	im.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "plexus-importer", Host: im.identity})
	im.shutdown = append(im.shutdown, broadcaster.Shutdown)
}

// controller builds the caches, the writer, leader election and the
// controller.
func (im *importer) controller(alloc allocatorv1.AllocatorServiceClient, pools []string) error {
	reg, o := im.rt.Server.Registerer(), im.o
	kubeClient := im.clients.Kube
	tracker := kube.NewTracker(0)
	var err error
	if im.informers, err = kube.NewInformers(kubeClient, im.clients.MCS, tracker); err != nil {
		return err
	}
	writer, err := kube.NewWriter(kubeClient, im.clients.MCS, tracker, reg)
	if err != nil {
		return err
	}
	packer, err := islices.New(islices.WithMaxEndpointsPerSlice(o.MaxEndpointsPerSlice))
	if err != nil {
		return fmt.Errorf("--max-endpoints-per-slice: %w", err)
	}
	if im.lead, err = leader.NewElector(im.identity, "plexus_importer_leader", "1 while this replica is the importer leader (the one that writes), 0 otherwise.", reg); err != nil {
		return err
	}
	// Every write first checks that this replica still holds its lease:
	// resourceVersions guard against a stale cache, not against a stale
	// view of the sources that a paused, deposed leader would write.
	writer.Guard(im.lead.Valid)
	if im.ctrl, err = controller.New(controller.Config{
		Store: im.store, Informers: im.informers, Tracker: tracker, Writer: writer, Kube: kubeClient,
		Allocator: alloc, VIPPools: pools, Guard: im.lead.Valid, Packer: packer, Recorder: im.recorder,
		Workers: o.Workers, SourceGrace: o.SourceGrace, ClusterName: im.rt.Config.ClusterName, ManageServiceCIDRs: o.ManageServiceCIDRs,
		Logger: im.rt.Logger.With("component", "controller"), Registerer: reg,
	}); err != nil {
		return err
	}
	return im.informers.AddHandlers(kube.Handlers{Service: im.ctrl.Enqueue, Namespace: im.ctrl.EnqueueNamespace})
}

// sources builds the group that follows the source clusters the
// inventory names (--source, --sources-file or --inventory-namespace):
// one stream per member, reconnected when its address changes; a member
// that left is withdrawn after --source-grace.
func (im *importer) sources() error {
	rt := im.rt
	srcMetrics, err := sources.NewMetrics(rt.Server.Registerer())
	if err != nil {
		return err
	}
	if im.inventory, err = im.o.Flags.Inventory(im.clients.Dynamic, "plexus-importer/"+server.Version(), im.clusterSet, rt.Logger.With("component", "inventory")); err != nil {
		return err
	}
	im.group, err = fleet.NewGroup(fleet.GroupConfig{
		Dial: fleet.Dialer(rt.Config),
		Start: func(m fleet.Member, conn *grpc.ClientConn, prev fleet.Runner) (fleet.Runner, error) {
			im.store.AddSource(m.Name)
			var from sources.Position
			if p, ok := prev.(*sources.Source); ok {
				from = p.Position()
			}
			return sources.New(sources.Config{Name: m.Name, Addr: m.Addr, Conn: conn, Sink: im.store, Start: from,
				Logger: rt.Logger.With("component", "source"), Metrics: srcMetrics})
		},
		Gone: func(m fleet.Member) {
			n := im.store.RemoveSource(m.Name)
			rt.Logger.Info("withdrew the exports of a cluster that left the fleet", "cluster", m.Name, "services", n)
		},
		Grace:      im.o.SourceGrace,
		Logger:     rt.Logger.With("component", "fleet"),
		Registerer: rt.Server.Registerer(),
	})
	return err
}

// sourceInfos is the sources' state for ListSources: the fleet's members
// and leavers, with what the store and each stream know.
func (im *importer) sourceInfos() []iserver.SourceInfo {
	states := im.store.Sources()
	members := im.group.States()
	out := make([]iserver.SourceInfo, 0, len(members))
	for _, m := range members {
		info := iserver.SourceInfo{Cluster: m.Member.Name, Addr: m.Member.Addr, ServerName: m.Member.ServerName,
			Since: m.Since, LeftAt: m.LeftAt, Exported: im.store.Exported(m.Member.Name)}
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
		}
		out = append(out, info)
	}
	return out
}

// start runs the caches, the sources and leadership terms until ctx ends,
// and returns the cleanup that waits for them.
func (im *importer) start(ctx context.Context) func() {
	rt, o, lead := im.rt, im.o, im.lead
	logger := rt.Logger.With("identity", im.identity)
	im.informers.Start(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := im.group.Run(ctx, im.inventory); err != nil && ctx.Err() == nil {
			logger.Error("stopped following the member clusters", "error", err)
		}
	})
	wg.Go(func() {
		if im.informers.WaitForSync(ctx) {
			rt.Server.SetServing(iserver.ServiceName, true)
			logger.Info("importer caches synced", "sources", len(im.group.States()))
		}
	})
	term := func(term context.Context) {
		if err := im.ctrl.Run(term); err != nil && term.Err() == nil {
			logger.Error("controller stopped", "error", err)
		}
	}
	if o.LeaderElect {
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: o.LeaseNamespace, Name: o.LeaseName},
			Client:     im.clients.Kube.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: im.identity, EventRecorder: im.recorder},
		}
		wg.Go(func() {
			lead.Run(ctx, lock, o.Config, func(t context.Context) {
				lead.Start(t)
				term(t)
				if n := im.api.EndTerm(); n > 0 {
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
		im.close()
	}
}
