package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	"github.com/plexusnet/plexus/internal/pagination"
	"github.com/plexusnet/plexus/services/membership/endpoints"
	"github.com/plexusnet/plexus/services/membership/kube"
	"github.com/plexusnet/plexus/services/membership/registry"
	"github.com/plexusnet/plexus/services/membership/selector"
	"github.com/plexusnet/plexus/services/membership/watch"
)

// ServiceName is the full name of the gRPC service, for health checks.
const ServiceName = "plexus.membership.v1.MembershipService"

// Members answers from the informer caches; *informers.Controller is one.
type Members interface {
	IsSynced() bool
	ServicesFor(kind endpoints.Kind, namespace, name string) ([]selector.ServiceKey, error)
}

// Option configures a Server.
type Option func(*Server)

// WithLogger sets the logger (default slog.Default).
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.logger = l } }

// WithRegisterer registers the server's watch metrics.
func WithRegisterer(r prometheus.Registerer) Option { return func(s *Server) { s.registerer = r } }

// Server implements the MembershipService API over the hub, the informer
// caches and the registry.
type Server struct {
	membershipv1.UnimplementedMembershipServiceServer

	hub        *watch.Hub[*membershipv1.ServiceEndpoints]
	members    Members
	registry   *registry.Registry
	cluster    string
	logger     *slog.Logger
	registerer prometheus.Registerer

	eventsSent  *prometheus.CounterVec
	disconnects *prometheus.CounterVec
}

// New returns a Server. cluster names the cluster in deletion events.
func New(hub *watch.Hub[*membershipv1.ServiceEndpoints], members Members, reg *registry.Registry, cluster string, opts ...Option) (*Server, error) {
	s := &Server{hub: hub, members: members, registry: reg, cluster: cluster, logger: slog.Default()}
	for _, o := range opts {
		o(s)
	}
	s.eventsSent = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "plexus_membership_watch_events_sent_total",
		Help: "WatchServices events sent, by type.",
	}, []string{"type"})
	s.disconnects = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "plexus_membership_watch_disconnects_total",
		Help: "WatchServices streams ended by the server, by reason.",
	}, []string{"reason"})
	if r := s.registerer; r != nil {
		subscribers := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "plexus_membership_watch_subscribers",
			Help: "Open WatchServices streams.",
		}, func() float64 { return float64(hub.Subscribers()) })
		revision := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "plexus_membership_revision",
			Help: "Revision of the latest endpoint set change.",
		}, func() float64 { return float64(hub.Revision()) })
		services := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "plexus_membership_services",
			Help: "Services with an endpoint set.",
		}, func() float64 { return float64(hub.Len()) })
		for _, c := range []prometheus.Collector{s.eventsSent, s.disconnects, subscribers, revision, services} {
			if err := r.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// Register registers the API on a gRPC server.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	membershipv1.RegisterMembershipServiceServer(g, s)
}

// GetWorkload returns one external workload, read from the API server.
func (s *Server) GetWorkload(ctx context.Context, req *membershipv1.GetWorkloadRequest) (*membershipv1.GetWorkloadResponse, error) {
	ns, name, err := parseWorkloadName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	ew, err := s.registry.Get(ctx, ns, name)
	if err != nil {
		return nil, mapError(err)
	}
	return &membershipv1.GetWorkloadResponse{Workload: s.workload(ew)}, nil
}

// ListWorkloads lists external workloads a page at a time, read from the
// API server.
func (s *Server) ListWorkloads(ctx context.Context, req *membershipv1.ListWorkloadsRequest) (*membershipv1.ListWorkloadsResponse, error) {
	var v violations
	checkNamespace(&v, "namespace", req.GetNamespace())
	sel := checkSelector(&v, "label_selector", req.GetLabelSelector())
	size, err := pagination.Size(req.GetPageSize())
	if err != nil {
		v.add("page_size", "%v", err)
	}
	q := listQuery{Namespace: req.GetNamespace(), Selector: sel}
	var pos listQuery
	if err := pagination.Decode(req.GetPageToken(), &pos); err != nil {
		v.add("page_token", "%v", err)
	} else if req.GetPageToken() != "" && (pos.Namespace != q.Namespace || pos.Selector != q.Selector) {
		v.add("page_token", "the token belongs to a list of another namespace or label selector")
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	items, next, err := s.registry.List(ctx, q.Namespace, q.Selector, int64(size), pos.Continue)
	if err != nil {
		return nil, mapError(err)
	}
	resp := &membershipv1.ListWorkloadsResponse{Workloads: make([]*membershipv1.Workload, 0, len(items))}
	for i := range items {
		resp.Workloads = append(resp.Workloads, s.workload(&items[i]))
	}
	if next != "" {
		q.Continue = next
		resp.NextPageToken = pagination.Encode(q)
	}
	return resp, nil
}

// RegisterWorkload creates or updates an external workload. It is
// idempotent by the workload's name, so request_id is accepted but not
// needed: a retried registration finds the object and the allocation the
// first one made.
func (s *Server) RegisterWorkload(ctx context.Context, req *membershipv1.RegisterWorkloadRequest) (*membershipv1.RegisterWorkloadResponse, error) {
	reg, err := registration(req.GetWorkload())
	if err != nil {
		return nil, err
	}
	ew, created, err := s.registry.Register(ctx, reg)
	if err != nil {
		return nil, mapError(err)
	}
	return &membershipv1.RegisterWorkloadResponse{Workload: s.workload(ew), Created: created}, nil
}

// HeartbeatWorkload keeps a workload alive.
func (s *Server) HeartbeatWorkload(ctx context.Context, req *membershipv1.HeartbeatWorkloadRequest) (*membershipv1.HeartbeatWorkloadResponse, error) {
	ns, name, err := parseWorkloadName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	var ready *bool
	if req.Ready != nil {
		r := req.GetReady()
		ready = &r
	}
	ew, err := s.registry.Heartbeat(ctx, ns, name, ready)
	if err != nil {
		return nil, mapError(err)
	}
	// Three heartbeats per TTL: one lost heartbeat does not expire the
	// workload.
	return &membershipv1.HeartbeatWorkloadResponse{
		Workload:      s.workload(ew),
		NextHeartbeat: durationpb.New(ew.TTL() / 3),
	}, nil
}

// DeregisterWorkload deletes a workload and releases its address.
func (s *Server) DeregisterWorkload(ctx context.Context, req *membershipv1.DeregisterWorkloadRequest) (*membershipv1.DeregisterWorkloadResponse, error) {
	ns, name, err := parseWorkloadName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	released, err := s.registry.Deregister(ctx, ns, name, req.GetEtag(), req.GetAllowMissing())
	if err != nil {
		return nil, mapError(err)
	}
	return &membershipv1.DeregisterWorkloadResponse{ReleasedAllocation: released}, nil
}

// GetServiceMembers returns a Service's current endpoint set.
func (s *Server) GetServiceMembers(_ context.Context, req *membershipv1.GetServiceMembersRequest) (*membershipv1.GetServiceMembersResponse, error) {
	ns, name, err := parseServiceName("service", req.GetService())
	if err != nil {
		return nil, err
	}
	if !s.members.IsSynced() {
		return nil, mapError(errNotSynced)
	}
	set, _, _, rev, ok := s.hub.Get(watch.Key{Namespace: ns, Name: name})
	if !ok {
		return nil, mapError(fmt.Errorf("service %s/%s: %w", ns, name, errServiceNotFound))
	}
	return &membershipv1.GetServiceMembersResponse{Endpoints: set, Revision: rev}, nil
}

// ListServicesForWorkload returns the Services selecting a workload.
func (s *Server) ListServicesForWorkload(_ context.Context, req *membershipv1.ListServicesForWorkloadRequest) (*membershipv1.ListServicesForWorkloadResponse, error) {
	kind, ns, name, err := parseMemberName("workload", req.GetWorkload())
	if err != nil {
		return nil, err
	}
	if !s.members.IsSynced() {
		return nil, mapError(errNotSynced)
	}
	keys, err := s.members.ServicesFor(kind, ns, name)
	if err != nil {
		return nil, mapError(err)
	}
	resp := &membershipv1.ListServicesForWorkloadResponse{Services: make([]string, 0, len(keys))}
	for _, k := range keys {
		resp.Services = append(resp.Services, kube.ServiceName(k.Namespace, k.Name))
	}
	return resp, nil
}

// workload renders an ExternalWorkload as the API returns it.
func (s *Server) workload(ew *workloadv1alpha1.ExternalWorkload) *membershipv1.Workload {
	w := &membershipv1.Workload{
		Name:           WorkloadName(ew.Namespace, ew.Name),
		Labels:         ew.Labels,
		Addresses:      ew.Spec.WorkloadIPs,
		Zone:           ew.Spec.Zone,
		Node:           ew.Spec.Node,
		Hostname:       ew.Spec.Hostname,
		Ready:          registry.ReportedReady(ew),
		Ttl:            durationpb.New(ew.TTL()),
		AddressPool:    ew.Spec.Pool,
		Allocation:     ew.Status.Allocation,
		Uid:            string(ew.UID),
		Etag:           ew.ResourceVersion,
		CreateTime:     timestamppb.New(ew.CreationTimestamp.Time),
		EffectiveReady: ew.IsReady(time.Now()),
	}
	for _, p := range ew.Spec.Ports {
		w.Ports = append(w.Ports, &membershipv1.WorkloadPort{Name: p.Name, Port: p.Port, Protocol: protocolOf(string(p.Protocol))})
	}
	if hb := ew.Status.LastHeartbeatTime; hb != nil {
		w.LastHeartbeatTime = timestamppb.New(hb.Time)
	}
	return w
}

func protocolOf(p string) membershipv1.Protocol {
	switch p {
	case "UDP":
		return membershipv1.Protocol_PROTOCOL_UDP
	case "SCTP":
		return membershipv1.Protocol_PROTOCOL_SCTP
	default:
		return membershipv1.Protocol_PROTOCOL_TCP
	}
}
