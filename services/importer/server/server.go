// Package server is the importer's gRPC API (plexus.importer.v1): reads of
// the imports as this replica sees them, and the push API that feeds the
// same exports store as the source clusters' streams.
//
// # Reads
//
// GetServiceImport and ListServiceImports answer on every replica, from the
// merged exports and the informer caches, once the caches are synced (until
// then: UNAVAILABLE, NOT_SYNCED). ListServiceImports returns imports in
// name order; its page token is the name the page ended at.
//
// # Pushes
//
// ApplyImport and WithdrawImport change the exports of a cluster that is
// not a configured --source (a configured source's exports come from its
// stream only: INVALID_ARGUMENT). They are answered by the leader only;
// another replica answers FAILED_PRECONDITION, NOT_LEADER, with the
// leader's identity in the ErrorInfo metadata ("leader"), since only the
// leader's store feeds the writes. Pushed exports live in the leader's
// memory: after a restart or a change of leader, a pushing client applies
// its exports again (the slices it had are kept for --source-grace). A
// request_id makes a retried ApplyImport return the first answer.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/pagination"
	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/reconcile"
	"github.com/prometheus/client_golang/prometheus"
)

// ServiceName is the full name of the gRPC service.
const ServiceName = "plexus.importer.v1.ImporterService"

// Reasons of the importer API (see the proto documentation).
const (
	ReasonImportNotFound  = "IMPORT_NOT_FOUND"
	ReasonNotLeader       = "NOT_LEADER"
	ReasonNotSynced       = "NOT_SYNCED"
	ReasonInvalidArgument = "INVALID_ARGUMENT"
)

var (
	errNotFound  = errors.New("no such import")
	errNotSynced = errors.New("the importer has not synced its caches yet; retry shortly")
)

// errorTable maps domain errors to codes and reasons; it is the only place
// where that happens.
var errorTable = apierr.Table{
	{Err: errNotFound, Code: codes.NotFound, Reason: ReasonImportNotFound},
	{Err: errNotSynced, Code: codes.Unavailable, Reason: ReasonNotSynced},
}

// Imports is what the API reads and pushes into.
type Imports interface {
	Status(key exports.Key) (reconcile.Status, bool)
	Keys(namespace string) []exports.Key
}

// Store is the exports store pushes go to.
type Store interface {
	IsSource(cluster string) bool
	Get(key exports.Key) (exports.Service, bool)
	Upsert(cluster string, origin exports.Origin, u exports.Update) (exports.Key, bool, error)
	Withdraw(cluster string, key exports.Key, observed time.Time, traceContext map[string]string) bool
	Forget(origin exports.Origin) int
}

// Leadership says whether this replica leads, and who does.
type Leadership interface {
	// Leader returns the identity of the leader as last observed, and
	// whether it is this replica.
	Leader() (identity string, leading bool)
}

// Config configures the server.
type Config struct {
	Imports Imports
	Store   Store
	Leader  Leadership
	// Synced reports whether the caches are synced.
	Synced func() bool
	// Sources, when set, returns the source clusters, sorted by name.
	Sources func() []SourceInfo
	// ClusterSet, when known, is the clusterset a caller's cluster-bound
	// identity must name to push.
	ClusterSet string
	// RequireClusterIdentities refuses pushes and withdrawals by callers
	// whose identity names no cluster (shared ones, or none).
	RequireClusterIdentities bool
	// Audit, when set, receives the audit line of each refused push or
	// withdrawal ("call refused"); Registerer, when set, gets their count
	// by reason.
	Audit      *slog.Logger
	Registerer prometheus.Registerer
}

// Server implements importerv1.ImporterServiceServer.
type Server struct {
	importerv1.UnimplementedImporterServiceServer
	cfg      Config
	applied  *requestLog
	refusals *prometheus.CounterVec
	// term is held for reading from a push's leadership check until the
	// push is stored, and for writing by EndTerm, so no push accepted in
	// a term outlives it.
	term sync.RWMutex
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Imports == nil || cfg.Store == nil || cfg.Leader == nil || cfg.Synced == nil {
		return nil, errors.New("importer server: imports, store, leadership and synced are required")
	}
	s := &Server{cfg: cfg, applied: newRequestLog(10000), refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "plexus_importer_refusals_total",
		Help: "Pushes and withdrawals refused because the caller's identity may not speak for the cluster they name, by reason; each is also logged as \"call refused\".",
	}, []string{"reason"})}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(s.refusals); err != nil {
			return nil, fmt.Errorf("register importer API metrics: %w", err)
		}
	}
	return s, nil
}

// EndTerm forgets the pushes accepted while this replica led, and the
// answers kept for their request ids; call it once a leadership term has
// ended. The next leader does not have those pushes (they live only in the
// memory of the replica that accepted them), and pushers push again to it;
// were this replica to lead again later, acting on them would bring back
// a service its pusher has since withdrawn through another leader.
func (s *Server) EndTerm() int {
	s.term.Lock()
	defer s.term.Unlock()
	s.applied.clear()
	return s.cfg.Store.Forget(exports.OriginPush)
}

// Register registers the service on g.
func (s *Server) Register(g grpc.ServiceRegistrar) { importerv1.RegisterImporterServiceServer(g, s) }

func mapError(err error) error { return apierr.Map(err, errorTable) }

func notLeader(leader string) error {
	msg := "this replica is not the importer leader"
	if leader != "" {
		msg += "; the leader is " + leader
	}
	return apierr.New(codes.FailedPrecondition, ReasonNotLeader, msg, map[string]string{"leader": leader})
}

// ImportName returns the resource name of an import,
// "namespaces/{namespace}/serviceimports/{service}".
func ImportName(k exports.Key) string {
	return "namespaces/" + k.Namespace + "/serviceimports/" + k.Name
}

// GetServiceImport returns one import.
func (s *Server) GetServiceImport(_ context.Context, req *importerv1.GetServiceImportRequest) (*importerv1.GetServiceImportResponse, error) {
	var v violations
	key := parseImportName(&v, "name", req.GetName())
	if err := v.err(); err != nil {
		return nil, err
	}
	if !s.cfg.Synced() {
		return nil, mapError(errNotSynced)
	}
	st, ok := s.cfg.Imports.Status(key)
	if !ok {
		return nil, mapError(fmt.Errorf("%s: %w", req.GetName(), errNotFound))
	}
	return &importerv1.GetServiceImportResponse{ServiceImport: toProto(st)}, nil
}

// page reads a page request: its size and the name the page starts after.
func page(v *violations, pageSize int32, token string) (size int, after string) {
	size, err := pagination.Size(pageSize)
	if err != nil {
		v.add("page_size", "%s", err.Error())
	}
	if err := pagination.Decode(token, &after); err != nil {
		v.add("page_token", "%s", err.Error())
	}
	return size, after
}

// ListServiceImports lists imports in name order, a page at a time.
func (s *Server) ListServiceImports(_ context.Context, req *importerv1.ListServiceImportsRequest) (*importerv1.ListServiceImportsResponse, error) {
	var v violations
	if ns := req.GetNamespace(); ns != "" {
		checkLabel(&v, "namespace", ns)
	}
	size, after := page(&v, req.GetPageSize(), req.GetPageToken())
	if err := v.err(); err != nil {
		return nil, err
	}
	if !s.cfg.Synced() {
		return nil, mapError(errNotSynced)
	}
	keys := s.cfg.Imports.Keys(req.GetNamespace())
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = ImportName(k)
	}
	order := sortedIndex(names)
	resp := &importerv1.ListServiceImportsResponse{}
	for _, i := range order {
		if names[i] <= after {
			continue
		}
		if len(resp.ServiceImports) == size {
			resp.NextPageToken = pagination.Encode(resp.ServiceImports[len(resp.ServiceImports)-1].GetName())
			break
		}
		st, ok := s.cfg.Imports.Status(keys[i])
		if !ok {
			continue // withdrawn while listing
		}
		resp.ServiceImports = append(resp.ServiceImports, toProto(st))
	}
	return resp, nil
}

// ApplyImport stores one cluster's pushed endpoint set.
func (s *Server) ApplyImport(ctx context.Context, req *importerv1.ApplyImportRequest) (*importerv1.ApplyImportResponse, error) {
	if err := s.validateApply(req); err != nil {
		return nil, err
	}
	if err := s.speaksFor(ctx, "endpoints.cluster", req.GetEndpoints().GetCluster()); err != nil {
		return nil, err
	}
	s.term.RLock()
	defer s.term.RUnlock()
	if leader, leading := s.cfg.Leader.Leader(); !leading {
		return nil, notLeader(leader)
	}
	if id := req.GetRequestId(); id != "" {
		if prev, same, ok := s.applied.get(id, req); ok {
			if !same {
				return nil, apierr.InvalidField(ReasonInvalidArgument, apierr.FieldViolation{Field: "request_id", Description: "already used for another request"})
			}
			return prev, nil
		}
	}
	u := exports.Update{Endpoints: req.GetEndpoints()}
	if t := req.GetObserveTime(); t != nil {
		u.ObserveTime = t.AsTime()
	}
	// The reconcile that writes the push links to this call's span.
	tc := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, tc)
	if len(tc) > 0 {
		u.TraceContext = tc
	}
	key, _, err := s.cfg.Store.Upsert(req.GetEndpoints().GetCluster(), exports.OriginPush, u)
	if err != nil {
		return nil, apierr.InvalidField(ReasonInvalidArgument, apierr.FieldViolation{Field: "endpoints", Description: err.Error()})
	}
	resp := &importerv1.ApplyImportResponse{}
	if st, ok := s.cfg.Imports.Status(key); ok {
		resp.ServiceImport = toProto(st)
	}
	if id := req.GetRequestId(); id != "" {
		s.applied.put(id, req, resp)
	}
	return resp, nil
}

// WithdrawImport removes one cluster's pushed contribution.
func (s *Server) WithdrawImport(ctx context.Context, req *importerv1.WithdrawImportRequest) (*importerv1.WithdrawImportResponse, error) {
	var v violations
	key := parseServiceName(&v, "service", req.GetService())
	checkLabel(&v, "cluster", req.GetCluster())
	if req.GetCluster() != "" && s.cfg.Store.IsSource(req.GetCluster()) {
		v.add("cluster", "%s is a configured source; its exports come from its stream", req.GetCluster())
	}
	if err := v.err(); err != nil {
		return nil, err
	}
	if err := s.speaksFor(ctx, "cluster", req.GetCluster()); err != nil {
		return nil, err
	}
	s.term.RLock()
	defer s.term.RUnlock()
	if leader, leading := s.cfg.Leader.Leader(); !leading {
		return nil, notLeader(leader)
	}
	svc, _ := s.cfg.Store.Get(key)
	if _, ok := svc.Export(req.GetCluster()); !ok {
		if req.GetAllowMissing() {
			return &importerv1.WithdrawImportResponse{}, nil
		}
		return nil, mapError(fmt.Errorf("cluster %s exports nothing for %s: %w", req.GetCluster(), req.GetService(), errNotFound))
	}
	s.cfg.Store.Withdraw(req.GetCluster(), key, time.Time{}, nil)
	// A push of the same request id after the withdrawal is a new push,
	// not a retry of the one withdrawn.
	s.applied.forget(req.GetCluster(), req.GetService())
	_, still := s.cfg.Store.Get(key)
	return &importerv1.WithdrawImportResponse{Removed: !still}, nil
}

// toProto renders a Status.
func toProto(st reconcile.Status) *importerv1.ServiceImport {
	out := &importerv1.ServiceImport{
		Name:            ImportName(st.Key),
		Ips:             st.IPs,
		Type:            membershipv1.ServiceType_SERVICE_TYPE_CLUSTER_SET_IP,
		SessionAffinity: membershipv1.SessionAffinity_SESSION_AFFINITY_NONE,
		DerivedService:  st.DerivedService,
		EndpointSlices:  uint32(st.EndpointSlices),
	}
	if st.Type == mcsv1beta1.Headless {
		out.Type = membershipv1.ServiceType_SERVICE_TYPE_HEADLESS
	}
	if st.SessionAffinity == corev1.ServiceAffinityClientIP {
		out.SessionAffinity = membershipv1.SessionAffinity_SESSION_AFFINITY_CLIENT_IP
		if st.SessionAffinityTimeout > 0 {
			out.SessionAffinityTimeout = durationpb.New(st.SessionAffinityTimeout)
		}
	}
	for _, p := range st.Ports {
		sp := &membershipv1.ServicePort{Name: p.Name, Port: p.Port, Protocol: exports.ProtocolOf(p.Protocol)}
		if p.AppProtocol != nil {
			sp.AppProtocol = *p.AppProtocol
		}
		out.Ports = append(out.Ports, sp)
	}
	for _, c := range st.Clusters {
		cs := &importerv1.ClusterStatus{
			Cluster: c.Cluster, Endpoints: uint32(c.Endpoints), ReadyEndpoints: uint32(c.ReadyEndpoints),
			ExportedEndpoints: uint32(c.Exported), DroppedEndpoints: uint32(c.Dropped), DropReason: c.DropReason, Problem: c.Problem,
		}
		if src, ok := st.Sources[c.Cluster]; ok {
			cs.Revision, cs.Stale, cs.Origin = src.Revision, src.Stale, string(src.Origin)
			if !src.LastHeard.IsZero() {
				cs.LastHeardTime = timestamppb.New(src.LastHeard)
			}
			if !src.ExportCreated.IsZero() {
				cs.ExportCreateTime = timestamppb.New(src.ExportCreated)
			}
		}
		out.Clusters = append(out.Clusters, cs)
	}
	for _, c := range st.Conditions {
		pc := &importerv1.Condition{Type: c.Type, Reason: c.Reason, Message: c.Message, Clusters: c.Clusters,
			Status: importerv1.ConditionStatus_CONDITION_STATUS_UNSPECIFIED}
		switch c.Status {
		case metav1.ConditionTrue:
			pc.Status = importerv1.ConditionStatus_CONDITION_STATUS_TRUE
		case metav1.ConditionFalse:
			pc.Status = importerv1.ConditionStatus_CONDITION_STATUS_FALSE
		}
		if !c.LastTransition.IsZero() {
			pc.LastTransitionTime = timestamppb.New(c.LastTransition)
		}
		out.Conditions = append(out.Conditions, pc)
	}
	if !st.ReconcileTime.IsZero() {
		out.ReconcileTime = timestamppb.New(st.ReconcileTime)
	}
	return out
}

// sortedIndex returns the indexes of names in ascending order of names.
func sortedIndex(names []string) []int {
	idx := make([]int, len(names))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return strings.Compare(names[a], names[b]) })
	return idx
}

// requestLog remembers the answers to recent ApplyImport request_ids.
type requestLog struct {
	max   int
	mu    sync.Mutex
	order []string
	byID  map[string]loggedRequest
}

type loggedRequest struct {
	req  *importerv1.ApplyImportRequest
	resp *importerv1.ApplyImportResponse
}

func newRequestLog(max int) *requestLog {
	return &requestLog{max: max, byID: map[string]loggedRequest{}}
}

func (l *requestLog) get(id string, req *importerv1.ApplyImportRequest) (*importerv1.ApplyImportResponse, bool, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.byID[id]
	if !ok {
		return nil, false, false
	}
	return e.resp, proto.Equal(e.req, req), true
}

// forget drops the answers to pushes of one cluster's export of a service.
func (l *requestLog) forget(cluster, service string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.order = slices.DeleteFunc(l.order, func(id string) bool {
		e := l.byID[id]
		if e.req.GetEndpoints().GetCluster() == cluster && e.req.GetEndpoints().GetService() == service {
			delete(l.byID, id)
			return true
		}
		return false
	})
}

func (l *requestLog) clear() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.order = l.order[:0]
	clear(l.byID)
}

func (l *requestLog) put(id string, req *importerv1.ApplyImportRequest, resp *importerv1.ApplyImportResponse) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.byID[id]; ok {
		return
	}
	l.byID[id] = loggedRequest{req: req, resp: resp}
	l.order = append(l.order, id)
	for len(l.order) > l.max {
		delete(l.byID, l.order[0])
		l.order = l.order[1:]
	}
}
