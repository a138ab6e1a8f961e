// Package server is the allocator's gRPC adapter: it parses and validates
// requests, calls the allocation service, maps domain errors to statuses
// once (errors.go) and converts results to the v1 API.
package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/gctune"
	"github.com/plexusnet/plexus/internal/netparse"
	"github.com/plexusnet/plexus/internal/pagination"
	rt "github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/allocator/allocation"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// MaxBatch is the largest BatchAllocate accepted.
const MaxBatch = 10000

// Server implements allocatorv1.AllocatorServiceServer.
type Server struct {
	allocatorv1.UnimplementedAllocatorServiceServer
	svc     *allocation.Allocator
	metrics *Metrics

	// maxWatches bounds the open WatchAllocations streams; watches counts
	// them.
	maxWatches int64
	watches    atomic.Int64
	burst      burst
	turns      *turns

	// access decides who may touch which allocations; audit receives a
	// line per refusal; callers caches the callers' identities.
	access  decide.Access
	audit   *slog.Logger
	callers callers
}

// DefaultMaxWatches is the default bound on open WatchAllocations
// streams.
const DefaultMaxWatches = 1000

// Option configures a Server.
type Option func(*Server)

// WithMaxWatches bounds the open WatchAllocations streams of the server
// (0: no bound); one more is RESOURCE_EXHAUSTED with reason
// TOO_MANY_WATCHES.
func WithMaxWatches(n int) Option { return func(s *Server) { s.maxWatches = int64(n) } }

// WithReleaseMemory sets what is called when a burst of watches has ended
// (debug.FreeOSMemory by default; tests count the calls).
func WithReleaseMemory(fn func()) Option { return func(s *Server) { s.burst.release = fn } }

// WithRestrainGC sets what holds the collector to a small headroom while
// a burst of watches sends its snapshots (gctune.Restrain by default;
// tests count the calls).
func WithRestrainGC(fn func() (release func())) Option {
	return func(s *Server) { s.burst.restrain = fn }
}

// WithSnapshotTurns lets n watches at a time send their snapshots, each
// for hold at most (turns.go); n of 0 lets every watch go at once.
func WithSnapshotTurns(n int, hold time.Duration) Option {
	return func(s *Server) {
		s.turns = nil
		if n > 0 {
			s.turns = newTurns(n, hold)
		}
	}
}

// New returns a Server around svc. metrics may be nil.
func New(svc *allocation.Allocator, metrics *Metrics, opts ...Option) *Server {
	s := &Server{svc: svc, metrics: metrics, maxWatches: DefaultMaxWatches, burst: burst{release: debug.FreeOSMemory, restrain: gctune.Restrain},
		turns: newTurns(DefaultSnapshotTurns, DefaultSnapshotTurnHold), audit: slog.Default()}
	for _, o := range opts {
		o(s)
	}
	if s.turns != nil && metrics != nil {
		s.turns.observe = func(d time.Duration) { metrics.turnWait.Observe(d.Seconds()) }
		s.turns.timedOut = metrics.turnsTimedOut.Inc
	}
	return s
}

// Register registers the server on g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	allocatorv1.RegisterAllocatorServiceServer(g, s)
}

func (s *Server) fail(err error) error {
	err = mapError(err)
	if s.metrics != nil && err != nil {
		s.metrics.errors.WithLabelValues(apierr.Reason(err)).Inc()
	}
	return err
}

// annotate sets attributes on the span of ctx if it records: attrs runs
// only then, so a call whose trace nobody samples (the default, without
// an exporter) builds none.
func annotate(ctx context.Context, attrs func() []attribute.KeyValue) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrs()...)
	}
}

func ownerAttrs(o *allocatorv1.Owner) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("plexus.owner.cluster", o.GetCluster()),
		attribute.String("plexus.owner.kind", o.GetKind()),
		attribute.String("plexus.owner.namespace", o.GetNamespace()),
		attribute.String("plexus.owner.name", o.GetName()),
	}
}

// poolID parses "pools/{id}".
func poolID(field, name string, allowAll bool) (string, error) {
	id, ok := strings.CutPrefix(name, "pools/")
	if !ok || strings.Contains(id, "/") {
		return "", &decide.FieldError{Field: field, Reason: "INVALID_NAME", Message: fmt.Sprintf("%s is not of the form pools/{pool_id}", decide.Clip(name))}
	}
	if allowAll && id == "-" {
		return id, nil
	}
	if err := decide.ValidatePoolID(field, id); err != nil {
		return "", err
	}
	return id, nil
}

// allocationName parses "pools/{id}/allocations/{address}".
func allocationName(field, name string) (string, netip.Addr, error) {
	rest, ok := strings.CutPrefix(name, "pools/")
	id, addrText, ok2 := strings.Cut(rest, "/allocations/")
	if !ok || !ok2 {
		return "", netip.Addr{}, &decide.FieldError{Field: field, Reason: "INVALID_NAME", Message: fmt.Sprintf("%s is not of the form pools/{pool_id}/allocations/{address}", decide.Clip(name))}
	}
	if err := decide.ValidatePoolID(field, id); err != nil {
		return "", netip.Addr{}, err
	}
	addr, err := netparse.ParseAddr(addrText)
	if err != nil {
		return "", netip.Addr{}, &decide.FieldError{Field: field, Reason: "INVALID_ADDRESS", Message: err.Error(), Err: err}
	}
	return id, addr, nil
}

func ownerFrom(o *allocatorv1.Owner) decide.Owner {
	return decide.Owner{Cluster: o.GetCluster(), Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName(), UID: o.GetUid()}
}

func ownerTo(o decide.Owner) *allocatorv1.Owner {
	return &allocatorv1.Owner{Cluster: o.Cluster, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Uid: o.UID}
}

func (s *Server) allocationTo(a store.Allocation) *allocatorv1.Allocation {
	return allocationMsg(a, !s.svc.InRange(a.Pool, a.Address))
}

// allocationMsg is the API's message of a.
func allocationMsg(a store.Allocation, outOfRange bool) *allocatorv1.Allocation {
	return &allocatorv1.Allocation{
		Name:       "pools/" + a.Pool + "/allocations/" + a.Address.String(),
		Pool:       "pools/" + a.Pool,
		Address:    a.Address.String(),
		Owner:      ownerTo(a.Owner),
		Etag:       decide.Etag(a.Revision),
		CreateTime: timestamppb.New(a.CreateTime),
		Revision:   a.Revision,
		OutOfRange: outOfRange,

		CreatorCluster: a.CreatorCluster,
	}
}

func poolTo(v allocation.PoolView) *allocatorv1.Pool {
	p := &allocatorv1.Pool{
		Name:         "pools/" + v.ID,
		Cidrs:        v.CIDRs,
		Reserved:     v.Reserved,
		Labels:       v.Labels,
		AllowOverlap: v.AllowOverlap,
		ClusterQuota: v.ClusterQuota,
		Deleting:     v.Deleting,
		Family:       allocatorv1.IPFamily_IP_FAMILY_IPV4,
		Etag:         decide.Etag(v.Revision),
		CreateTime:   timestamppb.New(v.CreateTime),
		UpdateTime:   timestamppb.New(v.UpdateTime),
		Stats: &allocatorv1.PoolStats{
			Capacity:   v.Stats.Capacity.String(),
			Allocated:  v.Stats.Allocated,
			Free:       v.Stats.Free.String(),
			OutOfRange: v.Stats.OutOfRange,
		},
	}
	if v.ReuseDelay > 0 {
		p.ReuseDelay = durationpb.New(v.ReuseDelay)
	}
	if v.Family == allocation.FamilyIPv6 {
		p.Family = allocatorv1.IPFamily_IP_FAMILY_IPV6
	}
	return p
}

func specFrom(p *allocatorv1.Pool) (decide.PoolSpec, error) {
	spec := decide.PoolSpec{CIDRs: p.GetCidrs(), Reserved: p.GetReserved(), Labels: p.GetLabels(), AllowOverlap: p.GetAllowOverlap(),
		ClusterQuota: p.GetClusterQuota()}
	if d := p.GetReuseDelay(); d != nil {
		if err := d.CheckValid(); err != nil {
			return spec, &decide.FieldError{Field: "pool.reuse_delay", Reason: "INVALID_DURATION", Message: err.Error()}
		}
		spec.ReuseDelay = d.AsDuration()
	}
	return spec, nil
}

// CreatePool implements AllocatorService.CreatePool.
func (s *Server) CreatePool(ctx context.Context, req *allocatorv1.CreatePoolRequest) (*allocatorv1.CreatePoolResponse, error) {
	annotate(ctx, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("plexus.pool", req.GetPoolId())}
	})
	if err := s.access.ManagePools(s.callers.of(ctx)); err != nil {
		return nil, s.failAt(ctx, req.GetPoolId(), err)
	}
	if req.GetPool() == nil {
		return nil, s.fail(&decide.FieldError{Field: "pool", Reason: "REQUIRED", Message: "pool is required"})
	}
	spec, err := specFrom(req.GetPool())
	if err == nil && !req.GetAllowLocalRanges() {
		err = localRanges(spec.CIDRs)
	}
	if err != nil {
		return nil, s.fail(err)
	}
	// A retry with the request id gets the pool it created; the id used
	// for another pool, or with another body, is refused.
	v, err := s.svc.CreatePoolRequest(ctx, req.GetRequestId(), req.GetPoolId(), spec)
	if err != nil {
		return nil, s.fail(err)
	}
	return &allocatorv1.CreatePoolResponse{Pool: poolTo(v)}, nil
}

// GetPool implements AllocatorService.GetPool.
func (s *Server) GetPool(ctx context.Context, req *allocatorv1.GetPoolRequest) (*allocatorv1.GetPoolResponse, error) {
	id, err := poolID("name", req.GetName(), false)
	if err != nil {
		return nil, s.fail(err)
	}
	annotate(ctx, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("plexus.pool", id)}
	})
	if err := s.svc.Sync(ctx); err != nil {
		return nil, s.fail(err)
	}
	v, err := s.svc.GetPool(id)
	if err != nil {
		return nil, s.fail(err)
	}
	return &allocatorv1.GetPoolResponse{Pool: poolTo(v)}, nil
}

// ListPools implements AllocatorService.ListPools.
func (s *Server) ListPools(ctx context.Context, req *allocatorv1.ListPoolsRequest) (*allocatorv1.ListPoolsResponse, error) {
	size, err := pagination.Size(req.GetPageSize())
	if err != nil {
		return nil, s.fail(&decide.FieldError{Field: "page_size", Reason: "INVALID_PAGE_SIZE", Message: err.Error()})
	}
	var after string
	if err := pagination.Decode(req.GetPageToken(), &after); err != nil {
		return nil, s.fail(&decide.FieldError{Field: "page_token", Reason: "INVALID_PAGE_TOKEN", Message: err.Error()})
	}
	if err := s.svc.Sync(ctx); err != nil {
		return nil, s.fail(err)
	}
	views, next := s.svc.ListPools(after, size)
	resp := &allocatorv1.ListPoolsResponse{}
	for _, v := range views {
		resp.Pools = append(resp.Pools, poolTo(v))
	}
	if next != "" {
		resp.NextPageToken = pagination.Encode(next)
	}
	return resp, nil
}

// UpdatePool implements AllocatorService.UpdatePool.
func (s *Server) UpdatePool(ctx context.Context, req *allocatorv1.UpdatePoolRequest) (*allocatorv1.UpdatePoolResponse, error) {
	id, err := poolID("pool.name", req.GetPool().GetName(), false)
	if err != nil {
		return nil, s.fail(err)
	}
	annotate(ctx, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("plexus.pool", id)}
	})
	if err := s.access.ManagePools(s.callers.of(ctx)); err != nil {
		return nil, s.failAt(ctx, id, err)
	}
	spec, err := specFrom(req.GetPool())
	if err != nil {
		return nil, s.fail(err)
	}
	var mask decide.UpdateMask
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		mask = decide.UpdateMask{CIDRs: true, Reserved: true, ReuseDelay: true, Labels: true, AllowOverlap: true}
	}
	for _, p := range paths {
		switch p {
		case "cidrs":
			mask.CIDRs = true
		case "reserved":
			mask.Reserved = true
		case "reuse_delay":
			mask.ReuseDelay = true
		case "labels":
			mask.Labels = true
		case "allow_overlap":
			mask.AllowOverlap = true
		case "cluster_quota":
			mask.ClusterQuota = true
		default:
			return nil, s.fail(&decide.FieldError{Field: "update_mask", Reason: "INVALID_UPDATE_MASK", Message: fmt.Sprintf("field %s cannot be updated", decide.Clip(p))})
		}
	}
	if mask.CIDRs && !req.GetAllowLocalRanges() {
		// Only CIDRs the pool does not hold yet are judged: a pool made
		// with the allowance can still be read and written back whole.
		cur, _ := s.svc.GetPool(id)
		if err := localRanges(spec.CIDRs, cur.CIDRs...); err != nil {
			return nil, s.fail(err)
		}
	}
	v, outside, err := s.svc.UpdatePool(ctx, id, spec, mask, req.GetPool().GetEtag(), req.GetForce())
	if err != nil {
		return nil, s.fail(err)
	}
	resp := &allocatorv1.UpdatePoolResponse{Pool: poolTo(v)}
	for _, a := range outside {
		resp.OutOfRange = append(resp.OutOfRange, s.allocationTo(a))
	}
	return resp, nil
}

// DeletePool implements AllocatorService.DeletePool.
func (s *Server) DeletePool(ctx context.Context, req *allocatorv1.DeletePoolRequest) (*allocatorv1.DeletePoolResponse, error) {
	id, err := poolID("name", req.GetName(), false)
	if err != nil {
		return nil, s.fail(err)
	}
	annotate(ctx, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("plexus.pool", id)}
	})
	if err := s.access.ManagePools(s.callers.of(ctx)); err != nil {
		return nil, s.failAt(ctx, id, err)
	}
	n, err := s.svc.DeletePool(ctx, id, req.GetEtag(), req.GetForce(), req.GetAllowMissing())
	if err != nil {
		return nil, s.fail(err)
	}
	return &allocatorv1.DeletePoolResponse{Released: uint64(n)}, nil
}

func requestFrom(prefix string, r *allocatorv1.AllocateRequest) (decide.Request, error) {
	id, err := poolID(prefix+"pool", r.GetPool(), false)
	if err != nil {
		return decide.Request{}, err
	}
	req := decide.Request{Pool: id, Owner: ownerFrom(r.GetOwner()), RequestID: r.GetRequestId()}
	if r.GetAddress() != "" {
		addr, err := netparse.ParseAddr(r.GetAddress())
		if err != nil {
			return req, &decide.FieldError{Field: prefix + "address", Reason: "INVALID_ADDRESS", Message: err.Error(), Err: err}
		}
		req.Address = addr
	}
	return req, nil
}

// Allocate implements AllocatorService.Allocate.
func (s *Server) Allocate(ctx context.Context, req *allocatorv1.AllocateRequest) (*allocatorv1.AllocateResponse, error) {
	start := time.Now()
	annotate(ctx, func() []attribute.KeyValue {
		return append(ownerAttrs(req.GetOwner()), attribute.String("plexus.pool", req.GetPool()))
	})
	r, err := requestFrom("", req)
	if err != nil {
		return nil, s.fail(err)
	}
	caller := s.callers.of(ctx)
	if err := s.access.Allocate(caller, r.Owner); err != nil {
		return nil, s.failAt(ctx, r.Pool, err)
	}
	r.Creator = caller.Cluster
	a, created, err := s.svc.Allocate(ctx, r)
	if err != nil {
		return nil, s.fail(err)
	}
	annotate(ctx, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("plexus.address", a.Address.String()), attribute.Bool("plexus.created", created)}
	})
	if s.metrics != nil {
		s.metrics.latency.WithLabelValues(r.Pool).Observe(time.Since(start).Seconds())
	}
	return &allocatorv1.AllocateResponse{Allocation: s.allocationTo(a), Created: created}, nil
}

// BatchAllocate implements AllocatorService.BatchAllocate.
func (s *Server) BatchAllocate(ctx context.Context, req *allocatorv1.BatchAllocateRequest) (*allocatorv1.BatchAllocateResponse, error) {
	if n := len(req.GetRequests()); n > MaxBatch {
		return nil, s.fail(&decide.FieldError{Field: "requests", Reason: "BATCH_TOO_LARGE", Message: fmt.Sprintf("%d requests, at most %d", n, MaxBatch)})
	}
	annotate(ctx, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.Int("plexus.batch.size", len(req.GetRequests()))}
	})
	reqs := make([]decide.Request, len(req.GetRequests()))
	caller := s.callers.of(ctx)
	for i, r := range req.GetRequests() {
		var err error
		if reqs[i], err = requestFrom(fmt.Sprintf("requests[%d].", i), r); err != nil {
			return nil, s.fail(err)
		}
		if err := s.access.Allocate(caller, reqs[i].Owner); err != nil {
			return nil, s.failAt(ctx, reqs[i].Pool, fmt.Errorf("requests[%d]: %w", i, err))
		}
		reqs[i].Creator = caller.Cluster
	}
	out, err := s.svc.BatchAllocate(ctx, reqs, req.GetRequestId())
	if err != nil {
		return nil, s.fail(err)
	}
	resp := &allocatorv1.BatchAllocateResponse{Allocations: make([]*allocatorv1.Allocation, len(out))}
	for i, a := range out {
		resp.Allocations[i] = s.allocationTo(a)
	}
	return resp, nil
}

// GetAllocation implements AllocatorService.GetAllocation.
func (s *Server) GetAllocation(ctx context.Context, req *allocatorv1.GetAllocationRequest) (*allocatorv1.GetAllocationResponse, error) {
	id, addr, err := allocationName("name", req.GetName())
	if err != nil {
		return nil, s.fail(err)
	}
	annotate(ctx, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("plexus.pool", id), attribute.String("plexus.address", addr.String())}
	})
	if err := s.svc.Sync(ctx); err != nil {
		return nil, s.fail(err)
	}
	a, err := s.svc.GetAllocation(id, addr)
	if err != nil {
		return nil, s.fail(err)
	}
	if err := s.access.Read(s.callers.of(ctx), a.Owner); err != nil {
		return nil, s.failAt(ctx, id, err)
	}
	return &allocatorv1.GetAllocationResponse{Allocation: s.allocationTo(a)}, nil
}

type listPos struct {
	Pool    string `json:"p"`
	Address string `json:"a"`
}

// ListAllocations implements AllocatorService.ListAllocations.
func (s *Server) ListAllocations(ctx context.Context, req *allocatorv1.ListAllocationsRequest) (*allocatorv1.ListAllocationsResponse, error) {
	id, err := poolID("pool", req.GetPool(), true)
	if err != nil {
		return nil, s.fail(err)
	}
	annotate(ctx, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("plexus.pool", id)}
	})
	size, err := pagination.Size(req.GetPageSize())
	if err != nil {
		return nil, s.fail(&decide.FieldError{Field: "page_size", Reason: "INVALID_PAGE_SIZE", Message: err.Error()})
	}
	var pos listPos
	if err := pagination.Decode(req.GetPageToken(), &pos); err != nil {
		return nil, s.fail(&decide.FieldError{Field: "page_token", Reason: "INVALID_PAGE_TOKEN", Message: err.Error()})
	}
	var after allocation.Cursor
	if pos.Pool != "" {
		addr, err := netip.ParseAddr(pos.Address)
		if err != nil {
			return nil, s.fail(&decide.FieldError{Field: "page_token", Reason: "INVALID_PAGE_TOKEN", Message: "invalid page token"})
		}
		after = allocation.Cursor{Pool: pos.Pool, Address: addr}
	}
	f := allocation.Filter{Cluster: req.GetOwnerCluster(), Kind: req.GetOwnerKind(), Namespace: req.GetOwnerNamespace(), Name: req.GetOwnerName(), UID: req.GetOwnerUid()}
	if f.Scope, err = s.access.List(s.callers.of(ctx), f.Cluster); err != nil {
		return nil, s.failAt(ctx, id, err)
	}
	if err := s.svc.Sync(ctx); err != nil {
		return nil, s.fail(err)
	}
	out, next, err := s.svc.ListAllocations(id, f, after, size)
	if err != nil {
		return nil, s.fail(err)
	}
	resp := &allocatorv1.ListAllocationsResponse{Allocations: make([]*allocatorv1.Allocation, len(out))}
	for i, a := range out {
		resp.Allocations[i] = s.allocationTo(a)
	}
	if next.Pool != "" {
		resp.NextPageToken = pagination.Encode(listPos{Pool: next.Pool, Address: next.Address.String()})
	}
	return resp, nil
}

// Release implements AllocatorService.Release.
func (s *Server) Release(ctx context.Context, req *allocatorv1.ReleaseRequest) (*allocatorv1.ReleaseResponse, error) {
	r, err := releaseTarget(req)
	if err != nil {
		return nil, s.fail(err)
	}
	if req.GetOwner() != nil {
		annotate(ctx, func() []attribute.KeyValue { return ownerAttrs(req.GetOwner()) })
	}
	annotate(ctx, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("plexus.pool", r.Pool), attribute.Bool("plexus.guarded", req.GetEtag() != "" || req.GetOwnerUid() != "")}
	})
	r.Etag, r.OwnerUID, r.AllowMissing = req.GetEtag(), req.GetOwnerUid(), req.GetAllowMissing()
	// The owner a request names is checked first, so that a missing
	// allocation of another cluster's owner says nothing; the holder is
	// checked by the release itself, under the pool's lock.
	caller := s.callers.of(ctx)
	if req.GetOwner() != nil {
		if err := s.access.Release(caller, r.Owner); err != nil {
			return nil, s.failAt(ctx, r.Pool, err)
		}
	}
	r.Caller, r.Access = &caller, s.access
	a, ok, err := s.svc.Release(ctx, r)
	if err != nil {
		return nil, s.failAt(ctx, r.Pool, err)
	}
	resp := &allocatorv1.ReleaseResponse{}
	if ok {
		resp.Allocation = s.allocationTo(a)
	}
	return resp, nil
}

// releaseTarget reads what a release names: an allocation by name, or by
// pool and owner, or both ways at once when they agree (the pool here, the
// holder in the allocator). An owner needs a kind and a name.
func releaseTarget(req *allocatorv1.ReleaseRequest) (decide.ReleaseRequest, error) {
	var r decide.ReleaseRequest
	if req.GetName() == "" && (req.GetPool() == "" || req.GetOwner() == nil) {
		return r, &decide.FieldError{Field: "name", Reason: "REQUIRED", Message: "name, or pool and owner, are required"}
	}
	if o := req.GetOwner(); o != nil {
		if o.GetKind() == "" {
			return r, &decide.FieldError{Field: "owner.kind", Reason: "REQUIRED", Message: "an owner needs a kind"}
		}
		if o.GetName() == "" {
			return r, &decide.FieldError{Field: "owner.name", Reason: "REQUIRED", Message: "an owner needs a name"}
		}
		r.Owner = ownerFrom(o)
	}
	if req.GetPool() != "" {
		id, err := poolID("pool", req.GetPool(), false)
		if err != nil {
			return r, err
		}
		r.Pool = id
	}
	if req.GetName() != "" {
		id, addr, err := allocationName("name", req.GetName())
		if err != nil {
			return r, err
		}
		if r.Pool != "" && r.Pool != id {
			return r, &decide.FieldError{Field: "pool", Reason: "TARGET_MISMATCH",
				Message: fmt.Sprintf("pool %s disagrees with the pool of name (%s)", r.Pool, id)}
		}
		r.Pool, r.Address = id, addr
	}
	return r, nil
}

// countWatches sets the open-watches gauge to n.
func (s *Server) countWatches(n int64) {
	if s.metrics != nil {
		s.metrics.watches.Set(float64(n))
	}
}

// WatchAllocations implements AllocatorService.WatchAllocations.
func (s *Server) WatchAllocations(req *allocatorv1.WatchAllocationsRequest, stream grpc.ServerStreamingServer[allocatorv1.WatchAllocationsResponse]) error {
	id, err := poolID("pool", req.GetPool(), true)
	if err != nil {
		return s.fail(err)
	}
	if req.GetStartRevision() < 0 {
		return s.fail(&decide.FieldError{Field: "start_revision", Reason: "INVALID_REVISION", Message: "start_revision must not be negative"})
	}
	if err := s.access.Watch(s.callers.of(stream.Context())); err != nil {
		return s.failAt(stream.Context(), id, err)
	}
	release, err := s.admitWatch()
	if err != nil {
		return s.fail(err)
	}
	defer release()
	turnDone, sent := func() {}, func() {}
	if req.GetStartRevision() == 0 { // a snapshot to send
		sent = s.burst.sendingSnapshot()
		defer sent()
		if turnDone, err = s.turns.take(stream.Context()); err != nil {
			return err
		}
		defer turnDone()
	}
	ctx := stream.Context()
	w, err := s.svc.Watch(ctx, id, req.GetStartRevision())
	if err != nil {
		return s.fail(err)
	}
	defer w.Close()
	batch := req.GetBatchSnapshot()
	// The snapshot's events come through encodeAhead, the changes after
	// it straight from the watch: an open watch keeps no goroutine but
	// its own once its snapshot is sent.
	next := w.Next
	if req.GetStartRevision() == 0 {
		ahead := s.encodeAhead(ctx, w, batch)
		next = func(ctx context.Context) allocation.WatchEvent {
			if e, ok := <-ahead; ok {
				return e
			}
			return w.Next(ctx)
		}
	}
	for {
		e := next(ctx)
		if e.Err != nil {
			if err := ctx.Err(); err != nil {
				return err
			}
			return s.fail(e.Err)
		}
		if e.Synced {
			turnDone()
			sent()
		}
		if e.Chunk != nil {
			if err := s.sendChunk(stream, e.Chunk, batch); err != nil {
				return err
			}
			continue
		}
		if err := stream.Send(s.changeTo(e)); err != nil {
			return err
		}
	}
}

// admitWatch counts a new watch in, or refuses it beyond --max-watches;
// release counts it out.
func (s *Server) admitWatch() (release func(), err error) {
	n := s.watches.Add(1)
	if s.maxWatches > 0 && n > s.maxWatches {
		s.watches.Add(-1)
		return nil, apierr.New(codes.ResourceExhausted, ReasonTooManyWatches,
			fmt.Sprintf("%d watches are open, the most this allocator serves (--max-watches); retry later or on another replica", s.maxWatches), nil)
	}
	s.burst.opened(n)
	s.countWatches(n)
	return func() {
		n := s.watches.Add(-1)
		s.countWatches(n)
		s.burst.closed(n)
	}, nil
}

// changeTo is the message of a watch event that is not a chunk of the
// snapshot: Synced, or a change.
func (s *Server) changeTo(e allocation.WatchEvent) *allocatorv1.WatchAllocationsResponse {
	// A change's commit may hold more changes at its revision, still to
	// come: resuming from the revision before it repeats them rather
	// than missing them.
	resp := &allocatorv1.WatchAllocationsResponse{Revision: e.Revision, ResumeRevision: e.Revision - 1}
	switch {
	case e.Synced:
		resp.Type = allocatorv1.EventType_EVENT_TYPE_SYNCED
		resp.ResumeRevision = e.Revision
	case e.Type == store.EventDeleteAllocation:
		resp.Type = allocatorv1.EventType_EVENT_TYPE_DELETED
		resp.Allocation = s.allocationTo(e.Allocation)
	default:
		resp.Type = allocatorv1.EventType_EVENT_TYPE_ADDED
		resp.Allocation = s.allocationTo(e.Allocation)
	}
	return resp
}

// chunkEncoding keys a snapshot chunk's encoding: batched (one message)
// or not (a message per allocation).
type chunkEncoding bool

type encodedChunk struct {
	msgs []*rt.Encoded
	err  error
}

// sendChunk sends a chunk of a watch's snapshot. The chunk is encoded
// once for every watch that sends it (the watches of a pool that start
// together share their snapshot), and sent as encoded.
func (s *Server) sendChunk(stream grpc.ServerStream, c *allocation.SnapshotChunk, batch bool) error {
	enc := s.encoded(c, batch)
	if enc.err != nil {
		return s.fail(fmt.Errorf("encode a watch snapshot: %w", enc.err))
	}
	for _, m := range enc.msgs {
		if err := stream.SendMsg(m); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) encoded(c *allocation.SnapshotChunk, batch bool) encodedChunk {
	return c.Memo(chunkEncoding(batch), func(as []store.Allocation) any { return s.encodeChunk(as, batch) }).(encodedChunk)
}

// encodeAheadChunks is how many chunks of a snapshot are encoded ahead of
// the one being sent.
const encodeAheadChunks = 4

// encodeAhead reads a watch's snapshot and passes it on, encoding each
// chunk first, in a goroutine of its own: the encoding of a chunk overlaps
// the sending of those before it (and their decoding by the client). It
// closes its channel after the event that ends the snapshot (Synced, or an
// error), leaving the events after it to the watch, or when ctx ends.
func (s *Server) encodeAhead(ctx context.Context, w *allocation.Watcher, batch bool) <-chan allocation.WatchEvent {
	out := make(chan allocation.WatchEvent, encodeAheadChunks)
	go func() {
		defer close(out)
		for {
			e := w.Next(ctx)
			if e.Chunk != nil {
				s.encoded(e.Chunk, batch)
			}
			select {
			case out <- e:
			case <-ctx.Done():
				return
			}
			if e.Synced || e.Err != nil {
				return
			}
		}
	}()
	return out
}

func (s *Server) encodeChunk(as []store.Allocation, batch bool) encodedChunk {
	if out, ok := s.encodeChunkWire(as, batch); ok {
		return out
	}
	return s.encodeChunkMessages(as, batch)
}

// encodeChunkWire is encodeChunk through a wireEncoder: the same bytes,
// without building the messages. ok is false for a chunk it leaves to
// encodeChunkMessages (a string that is not UTF-8).
func (s *Server) encodeChunkWire(as []store.Allocation, batch bool) (out encodedChunk, ok bool) {
	var e wireEncoder
	outOfRange := func(a *store.Allocation) bool { return !s.svc.InRange(a.Pool, a.Address) }
	if batch {
		b, ok := e.appendSnapshot(make([]byte, 0, len(as)*wireSizeHint), as, outOfRange)
		if !ok {
			return out, false
		}
		return encodedChunk{msgs: []*rt.Encoded{rt.EncodedBytes(b)}}, true
	}
	out.msgs = make([]*rt.Encoded, len(as))
	for i := range as {
		b, ok := e.appendAdded(make([]byte, 0, wireSizeHint), &as[i], outOfRange(&as[i]))
		if !ok {
			return encodedChunk{}, false
		}
		out.msgs[i] = rt.EncodedBytes(b)
	}
	return out, true
}

// wireSizeHint is about the encoded size of one allocation's message.
const wireSizeHint = 160

// encodeChunkMessages is encodeChunk through the generated messages.
func (s *Server) encodeChunkMessages(as []store.Allocation, batch bool) encodedChunk {
	var out encodedChunk
	if batch {
		resp := &allocatorv1.WatchAllocationsResponse{Type: allocatorv1.EventType_EVENT_TYPE_ADDED, Snapshot: make([]*allocatorv1.Allocation, len(as))}
		for i, a := range as {
			resp.Snapshot[i] = s.allocationTo(a)
		}
		m, err := rt.Encode(resp)
		out.msgs, out.err = []*rt.Encoded{m}, err
		return out
	}
	out.msgs = make([]*rt.Encoded, len(as))
	for i, a := range as {
		out.msgs[i], out.err = rt.Encode(&allocatorv1.WatchAllocationsResponse{Type: allocatorv1.EventType_EVENT_TYPE_ADDED, Allocation: s.allocationTo(a), Revision: a.Revision})
		if out.err != nil {
			return out
		}
	}
	return out
}

// burstWatches is how many watches open at once make a burst; burstSettle
// is how long after the burst is down to a quarter its memory is released.
const (
	burstWatches = 64
	burstSettle  = time.Second
)

// burst notices a burst of watches ending and hands the memory they took
// back to the operating system at once. Left to itself, the runtime keeps
// the pages of a collected burst until its next collection, which an idle
// allocator makes only every two minutes, and then returns them slowly.
type burst struct {
	mu      sync.Mutex
	peak    int64
	running bool
	release func()
	// sending counts the watches sending their snapshots. From
	// burstWatches of them at once, the collector is restrained
	// (gctune.Restrain) until none is left: their garbage would
	// otherwise pile up to the tuner's headroom, and the runtime keep its
	// bookkeeping for that heap once it is collected.
	sending    int
	restrain   func() (release func())
	unrestrain func()
}

// sendingSnapshot counts a watch that is about to send its snapshot;
// done uncounts it, once it has sent it or ended (done may be called
// again).
func (b *burst) sendingSnapshot() (done func()) {
	b.mu.Lock()
	b.sending++
	if b.sending >= burstWatches && b.unrestrain == nil && b.restrain != nil {
		b.unrestrain = b.restrain()
	}
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.sending--
			if b.sending == 0 && b.unrestrain != nil {
				b.unrestrain()
				b.unrestrain = nil
			}
		})
	}
}

func (b *burst) opened(n int64) {
	b.mu.Lock()
	b.peak = max(b.peak, n)
	b.mu.Unlock()
}

// closed is told how many watches are left open; once a burst is down to
// a quarter, its memory is released, a moment later (the rest of the
// burst is usually closing too) and in the background (it collects).
func (b *burst) closed(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.peak < burstWatches || n > b.peak/4 || b.running {
		return
	}
	b.peak, b.running = n, true
	go func() {
		time.Sleep(burstSettle)
		b.release()
		b.mu.Lock()
		b.running = false
		b.mu.Unlock()
	}()
}

// ReasonTooManyWatches refuses a watch past --max-watches.
const ReasonTooManyWatches = "TOO_MANY_WATCHES"

// localPrefixes are the ranges whose addresses cannot be endpoints: the
// API server refuses them in an EndpointSlice and in an ExternalWorkload.
var localPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/24"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff02::/16"),
}

// localRanges refuses CIDRs that overlap a local range (LOCAL_RANGE),
// except those the pool already holds (held). A CIDR that does not parse is
// left to the pool's own validation.
func localRanges(cidrs []string, held ...string) error {
	for i, c := range cidrs {
		p, err := netparse.ParsePrefix(c)
		if err != nil || slices.Contains(held, p.String()) {
			continue
		}
		for _, l := range localPrefixes {
			if p.Overlaps(l) {
				return &decide.FieldError{Field: fmt.Sprintf("pool.cidrs[%d]", i), Reason: "LOCAL_RANGE",
					Message: fmt.Sprintf("%s overlaps %s, whose addresses cannot be endpoints; set allow_local_ranges to create it anyway", p, l)}
			}
		}
	}
	return nil
}
