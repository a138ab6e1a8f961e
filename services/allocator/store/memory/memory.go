// Package memory is a store.Store held in maps, for tests. It has the same
// semantics as the durable stores (it passes the same conformance suite)
// but keeps nothing across a restart.
package memory

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/internal/eventlog"
)

// Option configures a Store.
type Option func(*options)

type options struct {
	history int
}

// WithHistory sets how many events are kept for watches that start from
// a past revision (default 100,000).
func WithHistory(events int) Option {
	return func(o *options) { o.history = events }
}

// Store is an in-memory store.Store.
type Store struct {
	mu    sync.Mutex
	rev   int64
	pools map[string]*poolState
	// poolsChanged is the revision of the latest commit that put or
	// deleted a pool.
	poolsChanged int64
	requests     map[string]store.Request
	log          *eventlog.Log
	closed       bool

	// expiries lists the request records in the order they were put, so
	// Commit and GetRequest drop the ones past retention from its front:
	// amortized O(1) a call, with no scan of the records.
	expiries  []expiry
	retention time.Duration // how long a request record is kept
}

// expiry is one put of a request record. A later put of the same id
// makes it stale: the record then carries another revision.
type expiry struct {
	at  time.Time
	id  string
	rev int64
}

// poolState holds everything kept under one pool id. It exists while
// either the pool record or anything filed under it does: the store does
// not require a pool to exist before its allocations, as etcd could not
// enforce that without a condition.
type poolState struct {
	pool       *store.Pool
	allocs     map[netip.Addr]store.Allocation
	owners     map[string]map[netip.Addr]struct{}
	quarantine map[netip.Addr]store.Quarantine
}

func (ps *poolState) empty() bool {
	return ps.pool == nil && len(ps.allocs) == 0 && len(ps.quarantine) == 0
}

var _ store.Store = (*Store)(nil)

// New returns an empty store at revision 0.
func New(opts ...Option) *Store {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return &Store{
		pools:    make(map[string]*poolState),
		requests: make(map[string]store.Request),
		log:      eventlog.New(o.history, 0),

		retention: store.DefaultRequestRetention,
	}
}

// Snapshot implements store.Store.
func (s *Store) Snapshot(ctx context.Context) (*store.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	snap := &store.Snapshot{Revision: s.rev}
	for _, id := range slices.Sorted(maps.Keys(s.pools)) {
		ps := s.pools[id]
		if ps.pool != nil {
			snap.Pools = append(snap.Pools, clonePool(*ps.pool))
		}
		for _, a := range slices.SortedFunc(maps.Values(ps.allocs), func(x, y store.Allocation) int {
			return x.Address.Compare(y.Address)
		}) {
			snap.Allocations = append(snap.Allocations, a)
		}
		for _, q := range slices.SortedFunc(maps.Values(ps.quarantine), func(x, y store.Quarantine) int {
			return x.Address.Compare(y.Address)
		}) {
			snap.Quarantine = append(snap.Quarantine, q)
		}
	}
	return snap, nil
}

// SnapshotPool implements store.Store.
func (s *Store) SnapshotPool(ctx context.Context, pool string) (int64, []store.Allocation, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, nil, store.ErrClosed
	}
	var out []store.Allocation
	if ps := s.pools[pool]; ps != nil {
		out = slices.SortedFunc(maps.Values(ps.allocs), func(x, y store.Allocation) int { return x.Address.Compare(y.Address) })
	}
	return s.rev, out, nil
}

// GetRequest implements store.Store.
func (s *Store) GetRequest(ctx context.Context, id string) (store.Request, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.Request{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.Request{}, false, store.ErrClosed
	}
	s.expireRequests(time.Now())
	r, ok := s.requests[id]
	if !ok {
		return store.Request{}, false, nil
	}
	r.Allocations = slices.Clone(r.Allocations)
	return r, true, nil
}

// Commit implements store.Store.
func (s *Store) Commit(ctx context.Context, txn store.Txn) (int64, error) {
	if err := txn.Validate(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, store.ErrClosed
	}
	now := time.Now()
	s.expireRequests(now)
	for i, c := range txn.Conds {
		if !s.holds(c) {
			return 0, fmt.Errorf("condition %d (kind %d, pool %q): %w", i, c.Kind, c.Pool, store.ErrConflict)
		}
	}
	rev := s.rev + 1
	var events []store.Event
	for _, op := range txn.Ops {
		events = s.apply(op, rev, now, events)
	}
	s.rev = rev
	s.log.Append(events)
	return rev, nil
}

func (s *Store) holds(c store.Cond) bool {
	ps := s.pools[c.Pool]
	switch c.Kind {
	case store.CondPoolsUnchangedSince:
		return s.poolsChanged <= c.Revision
	case store.CondRangeFree:
		if ps == nil {
			return true
		}
		for a := range ps.allocs {
			if a.Is4() == c.Address.Is4() && !a.Less(c.Address) && !c.Last.Less(a) {
				return false
			}
		}
		return true
	case store.CondPoolAbsent:
		return ps == nil || ps.pool == nil
	case store.CondPoolRevision:
		return ps != nil && ps.pool != nil && ps.pool.Revision == c.Revision
	case store.CondAllocationAbsent:
		if ps == nil {
			return true
		}
		_, ok := ps.allocs[c.Address]
		return !ok
	case store.CondAllocationRevision:
		if ps == nil {
			return false
		}
		a, ok := ps.allocs[c.Address]
		return ok && a.Revision == c.Revision
	case store.CondOwnerAbsent:
		return ps == nil || len(ps.owners[c.OwnerKey]) == 0
	case store.CondPoolEmpty:
		return ps == nil || len(ps.allocs) == 0
	case store.CondRequestAbsent:
		_, ok := s.requests[c.RequestID]
		return !ok
	}
	return false // unreachable: Validate rejects unknown kinds
}

func (s *Store) state(pool string) *poolState {
	ps := s.pools[pool]
	if ps == nil {
		ps = &poolState{
			allocs:     make(map[netip.Addr]store.Allocation),
			owners:     make(map[string]map[netip.Addr]struct{}),
			quarantine: make(map[netip.Addr]store.Quarantine),
		}
		s.pools[pool] = ps
	}
	return ps
}

func (s *Store) apply(op store.Op, rev int64, now time.Time, events []store.Event) []store.Event {
	switch op.Kind {
	case store.OpPutPool:
		p := clonePool(*op.Pool)
		p.Revision = rev
		s.state(p.ID).pool = &p
		s.poolsChanged = rev
		ev := clonePool(p)
		events = append(events, store.Event{Type: store.EventPutPool, Revision: rev, Pool: &ev})

	case store.OpDeletePool:
		s.poolsChanged = rev
		ps := s.pools[op.PoolID]
		if ps == nil {
			return events
		}
		for _, addr := range slices.SortedFunc(maps.Keys(ps.allocs), netip.Addr.Compare) {
			a := ps.allocs[addr]
			events = append(events, store.Event{Type: store.EventDeleteAllocation, Revision: rev, Allocation: &a})
		}
		if ps.pool != nil {
			p := clonePool(*ps.pool)
			events = append(events, store.Event{Type: store.EventDeletePool, Revision: rev, Pool: &p})
		}
		delete(s.pools, op.PoolID)

	case store.OpPutAllocation:
		a := *op.Allocation
		a.Revision = rev
		ps := s.state(a.Pool)
		if old, ok := ps.allocs[a.Address]; ok {
			ps.unindex(old)
		}
		ps.allocs[a.Address] = a
		byAddr := ps.owners[a.Owner.Key()]
		if byAddr == nil {
			byAddr = make(map[netip.Addr]struct{}, 1)
			ps.owners[a.Owner.Key()] = byAddr
		}
		byAddr[a.Address] = struct{}{}
		delete(ps.quarantine, a.Address)
		events = append(events, store.Event{Type: store.EventPutAllocation, Revision: rev, Allocation: &a})

	case store.OpDeleteAllocation:
		ps := s.pools[op.PoolID]
		if ps == nil {
			return events
		}
		old, ok := ps.allocs[op.Address]
		if !ok {
			return events
		}
		ps.unindex(old)
		delete(ps.allocs, op.Address)
		if ps.empty() {
			delete(s.pools, op.PoolID)
		}
		events = append(events, store.Event{Type: store.EventDeleteAllocation, Revision: rev, Allocation: &old})

	case store.OpPutQuarantine:
		q := *op.Quarantine
		s.state(q.Pool).quarantine[q.Address] = q
		events = append(events, store.Event{Type: store.EventPutQuarantine, Revision: rev, Quarantine: &q})

	case store.OpPutRequest:
		r := *op.Request
		r.Allocations = slices.Clone(r.Allocations)
		r.Revision = rev
		s.requests[r.ID] = r
		s.expiries = append(s.expiries, expiry{at: now, id: r.ID, rev: rev})
	}
	return events
}

// expireRequests drops the request records put longer than the retention
// period before now, as the durable stores do, so tests against this
// store see records expire too.
func (s *Store) expireRequests(now time.Time) {
	n := 0
	for _, e := range s.expiries {
		if now.Sub(e.at) <= s.retention {
			break
		}
		if r, ok := s.requests[e.id]; ok && r.Revision == e.rev {
			delete(s.requests, e.id)
		}
		n++
	}
	// The array keeps the dropped entries until an append moves the rest;
	// their ids need not live that long.
	clear(s.expiries[:n])
	s.expiries = s.expiries[n:]
}

func (ps *poolState) unindex(a store.Allocation) {
	key := a.Owner.Key()
	byAddr := ps.owners[key]
	delete(byAddr, a.Address)
	if len(byAddr) == 0 {
		delete(ps.owners, key)
	}
}

// Watch implements store.Store.
func (s *Store) Watch(ctx context.Context, fromRev int64) (<-chan store.Event, error) {
	return s.log.Watch(ctx, fromRev)
}

// WatchCursor implements store.CursorStore.
func (s *Store) WatchCursor(_ context.Context, fromRev int64, pool string) (store.Cursor, error) {
	c, err := s.log.Cursor(fromRev, pool)
	if err != nil {
		return nil, err
	}
	return c, nil
}

var _ store.CursorStore = (*Store)(nil)

// Compact drops the event history up to rev, as etcd's compaction does,
// so tests can reach the ErrCompacted paths.
func (s *Store) Compact(_ context.Context, rev int64) error {
	s.log.Compact(rev)
	return nil
}

// Close implements store.Store.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.log.Close(store.ErrClosed)
	return nil
}

func clonePool(p store.Pool) store.Pool {
	p.CIDRs = slices.Clone(p.CIDRs)
	p.Reserved = slices.Clone(p.Reserved)
	p.Labels = maps.Clone(p.Labels)
	return p
}
