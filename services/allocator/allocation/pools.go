package allocation

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math/big"
	"net/netip"
	"slices"
	"sort"

	"github.com/plexusnet/plexus/internal/netparse"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/ipam"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// PoolView is a pool with its live statistics.
type PoolView struct {
	store.Pool
	Family ipamFamily
	Stats  Stats
}

type ipamFamily int

// Address families of a pool.
const (
	FamilyIPv4 ipamFamily = 4
	FamilyIPv6 ipamFamily = 6
)

// Stats counts a pool's addresses.
type Stats struct {
	Capacity   *big.Int
	Allocated  uint64
	Free       *big.Int
	OutOfRange uint64
}

func indexConfig(p store.Pool) (ipam.Config, error) {
	cfg := ipam.Config{ReuseDelay: p.ReuseDelay}
	for _, c := range p.CIDRs {
		pfx, err := netparse.ParsePrefix(c)
		if err != nil {
			return cfg, err
		}
		cfg.CIDRs = append(cfg.CIDRs, pfx)
	}
	for _, r := range p.Reserved {
		rg, err := netparse.ParseRange(r)
		if err != nil {
			return cfg, err
		}
		cfg.Reserved = append(cfg.Reserved, rg)
	}
	return cfg, nil
}

// overlapping returns the id of a pool (other than self) whose CIDRs
// overlap any of cidrs, when either side forbids overlap. The caller holds
// s.mu.
func (s *Allocator) overlapping(self string, cidrs []string, allow bool) (string, error) {
	if s.cidrs == nil {
		s.cidrs = newCIDRIndex(s.pools)
	}
	skip := func(id string) bool {
		ps := s.pools[id]
		return id == self || ps == nil || (allow && ps.rec.AllowOverlap)
	}
	for _, c := range cidrs {
		pfx, err := netparse.ParsePrefix(c)
		if err != nil {
			continue // the spec's own validation refuses it
		}
		if id, o, ok := s.cidrs.overlap(pfx, skip); ok {
			return id, fmt.Errorf("%s overlaps %s of pool %s: %w", c, o, id, decide.ErrPoolOverlap)
		}
	}
	return "", nil
}

// CreatePool creates a pool.
func (s *Allocator) CreatePool(ctx context.Context, id string, spec decide.PoolSpec) (PoolView, error) {
	return s.CreatePoolRequest(ctx, "", id, spec)
}

// CreatePoolRequest creates a pool under an idempotency key: the request
// id is recorded with the creation, so a retry with the same id and the
// same body gets the pool again, the same id with another body gets
// ErrRequestIDReused, and a pool that exists under another id (or none)
// gets ErrPoolExists.
func (s *Allocator) CreatePoolRequest(ctx context.Context, requestID, id string, spec decide.PoolSpec) (PoolView, error) {
	if err := decide.ValidatePoolID("pool_id", id); err != nil {
		return PoolView{}, err
	}
	if len(requestID) > 128 {
		return PoolView{}, decide.Invalid("request_id", "INVALID_REQUEST_ID", "request_id must be at most 128 characters")
	}
	spec, err := spec.Normalize()
	if err != nil {
		return PoolView{}, err
	}
	key := decide.PoolRequestKey(id, spec)
	if v, ok, err := s.replayPool(ctx, requestID, id, key); ok || err != nil {
		return v, err
	}
	// Check the new pool against every pool created so far, through any
	// replica (and this one's own, which its follower may not have
	// applied yet).
	if err := s.Sync(ctx); err != nil {
		return PoolView{}, err
	}
	var v PoolView
	err = s.fresh(ctx, func() (err error) { v, err = s.createPool(ctx, requestID, id, key, spec); return err })
	if errors.Is(err, decide.ErrPoolExists) && requestID != "" {
		// The same request may have won through another replica.
		if v, ok, rerr := s.replayPool(ctx, requestID, id, key); ok || rerr != nil {
			return v, rerr
		}
	}
	return v, err
}

// replayPool answers a CreatePool whose request id was recorded before:
// the pool when the record is of this very request, ErrRequestIDReused
// when it is of another; ok=false when the id is new (or none).
func (s *Allocator) replayPool(ctx context.Context, requestID, id, key string) (PoolView, bool, error) {
	if requestID == "" {
		return PoolView{}, false, nil
	}
	rec, ok, err := s.store.GetRequest(ctx, requestID)
	if err != nil || !ok {
		return PoolView{}, false, err
	}
	if len(rec.Allocations) != 1 || rec.Allocations[0] != key {
		return PoolView{}, false, fmt.Errorf("request %s: %w", decide.Clip(requestID), decide.ErrRequestIDReused)
	}
	if err := s.applied(ctx, rec.Revision); err != nil {
		return PoolView{}, false, fmt.Errorf("request %s: %w", decide.Clip(requestID), err)
	}
	v, err := s.GetPool(id)
	if err != nil {
		return PoolView{}, false, fmt.Errorf("request %s created pool %s, which is gone since: %w", decide.Clip(requestID), id, err)
	}
	return v, true, nil
}

func (s *Allocator) createPool(ctx context.Context, requestID, id, key string, spec decide.PoolSpec) (PoolView, error) {
	now := s.now().UTC()
	rec := store.Pool{ID: id, CIDRs: spec.CIDRs, Reserved: spec.Reserved, ReuseDelay: spec.ReuseDelay,
		Labels: spec.Labels, AllowOverlap: spec.AllowOverlap, ClusterQuota: spec.ClusterQuota, CreateTime: now, UpdateTime: now}
	ps, err := newPoolState(rec, 0)
	if err != nil {
		return PoolView{}, &decide.FieldError{Field: "pool.cidrs", Reason: "INVALID_CIDR", Message: err.Error(), Err: err}
	}
	// Pool changes are rare; holding the pools lock across the commit keeps
	// the overlap check and the creation atomic.
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pools[id]; ok {
		return PoolView{}, fmt.Errorf("pool %q: %w", id, decide.ErrPoolExists)
	}
	if _, err := s.overlapping(id, rec.CIDRs, rec.AllowOverlap); err != nil {
		return PoolView{}, err
	}
	txn := store.Txn{
		Conds: append([]store.Cond{{Kind: store.CondPoolAbsent, Pool: id}}, s.poolsSeen()...),
		Ops:   []store.Op{{Kind: store.OpPutPool, Pool: &rec}},
	}
	if requestID != "" {
		txn.Ops = append(txn.Ops, store.Op{Kind: store.OpPutRequest, Request: &store.Request{ID: requestID, Allocations: []string{key}}})
	}
	rev, err := s.commit(ctx, txn)
	if errors.Is(err, store.ErrConflict) {
		if s.follow {
			// Another replica created this pool, or another one, since
			// the overlap check's view: fresh decides again.
			return PoolView{}, fmt.Errorf("create pool %s: the pools changed meanwhile: %w", id, decide.ErrConflict)
		}
		return PoolView{}, fmt.Errorf("pool %q: %w", id, decide.ErrPoolExists)
	}
	if err != nil {
		return PoolView{}, fmt.Errorf("create pool %s: %w", id, err)
	}
	ps.rec.Revision = rev
	s.scatter(ps)
	s.pools[id] = ps
	s.cidrs.replace(id, nil, rec.CIDRs)
	return ps.view(), nil
}

func (ps *poolState) view() PoolView {
	st := ps.index.Stats()
	v := PoolView{Pool: ps.rec, Family: FamilyIPv4, Stats: Stats{Capacity: st.Capacity, Allocated: uint64(ps.held.Len()), Free: st.Free, OutOfRange: st.OutOfRange}}
	if !ps.index.Is4() {
		v.Family = FamilyIPv6
	}
	v.Pool.CIDRs = slices.Clone(ps.rec.CIDRs)
	v.Pool.Reserved = slices.Clone(ps.rec.Reserved)
	v.Pool.Labels = maps.Clone(ps.rec.Labels)
	return v
}

// GetPool returns a pool.
func (s *Allocator) GetPool(id string) (PoolView, error) {
	ps, err := s.pool(id)
	if err != nil {
		return PoolView{}, err
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.view(), nil
}

// ListPools returns up to limit pools with ids after `after`, in id order,
// and the id to continue after ("" on the last page).
func (s *Allocator) ListPools(after string, limit int) ([]PoolView, string) {
	s.mu.RLock()
	ids := make([]string, 0, len(s.pools))
	for id := range s.pools {
		if id > after {
			ids = append(ids, id)
		}
	}
	states := make([]*poolState, 0, len(ids))
	sort.Strings(ids)
	if len(ids) > limit {
		ids = ids[:limit]
	}
	for _, id := range ids {
		states = append(states, s.pools[id])
	}
	more := len(s.pools) > 0 && len(ids) == limit && ids[len(ids)-1] != s.lastPoolID()
	s.mu.RUnlock()
	out := make([]PoolView, 0, len(states))
	for _, ps := range states {
		ps.mu.Lock()
		out = append(out, ps.view())
		ps.mu.Unlock()
	}
	if more {
		return out, ids[len(ids)-1]
	}
	return out, ""
}

func (s *Allocator) lastPoolID() string {
	last := ""
	for id := range s.pools {
		if id > last {
			last = id
		}
	}
	return last
}

// UpdatePool changes a pool. Removing a CIDR that holds allocations needs
// force; the allocations left outside are returned.
func (s *Allocator) UpdatePool(ctx context.Context, id string, spec decide.PoolSpec, mask decide.UpdateMask, etag string, force bool) (PoolView, []store.Allocation, error) {
	// Whether a CIDR still holds allocations is decided on every
	// allocation acknowledged so far, by any replica; the store checks
	// again for those committed meanwhile.
	if err := s.Sync(ctx); err != nil {
		return PoolView{}, nil, err
	}
	var (
		v       PoolView
		outside []store.Allocation
	)
	err := s.fresh(ctx, func() (err error) { v, outside, err = s.updatePool(ctx, id, spec, mask, etag, force); return err })
	return v, outside, err
}

func (s *Allocator) updatePool(ctx context.Context, id string, spec decide.PoolSpec, mask decide.UpdateMask, etag string, force bool) (PoolView, []store.Allocation, error) {
	ps, err := s.pool(id)
	if err != nil {
		return PoolView{}, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if err := decide.CheckEtag("pool "+id, ps.rec.Revision, etag); err != nil {
		return PoolView{}, nil, err
	}
	if ps.rec.Deleting {
		return PoolView{}, nil, ps.usable()
	}
	next := ps.rec
	cur := decide.PoolSpec{CIDRs: ps.rec.CIDRs, Reserved: ps.rec.Reserved, ReuseDelay: ps.rec.ReuseDelay, Labels: ps.rec.Labels, AllowOverlap: ps.rec.AllowOverlap,
		ClusterQuota: ps.rec.ClusterQuota}
	merged, err := decide.Update(cur, ps.index.Is4(), spec, mask)
	if err != nil {
		return PoolView{}, nil, err
	}
	if _, err := s.overlapping(id, merged.CIDRs, merged.AllowOverlap); err != nil {
		return PoolView{}, nil, err
	}
	next.CIDRs, next.Reserved, next.ReuseDelay, next.Labels, next.AllowOverlap = merged.CIDRs, merged.Reserved, merged.ReuseDelay, merged.Labels, merged.AllowOverlap
	next.ClusterQuota = merged.ClusterQuota
	next.UpdateTime = s.now().UTC()

	// Build the new index from scratch: pool updates are rare, and a fresh
	// index with the allocations restored is simplest to get right.
	fresh, err := newPoolState(next, 0)
	if err != nil {
		return PoolView{}, nil, &decide.FieldError{Field: "pool", Reason: "INVALID_CIDR", Message: err.Error(), Err: err}
	}
	outside, err := ps.restoreInto(fresh)
	if err != nil {
		return PoolView{}, nil, fmt.Errorf("update pool %s: %w", id, err)
	}
	if len(outside) > 0 && !force {
		return PoolView{}, nil, fmt.Errorf("update pool %s: %d allocations (first %s) would fall outside its CIDRs; use force: %w", id, len(outside), outside[0].Address, decide.ErrCIDRInUse)
	}
	conds := []store.Cond{{Kind: store.CondPoolRevision, Pool: id, Revision: ps.rec.Revision}}
	if mask.CIDRs || mask.AllowOverlap {
		conds = append(conds, s.poolsSeen()...)
	}
	if !force {
		// The allocations checked above are those committed so far; one
		// committed meanwhile (through another replica, or in flight
		// here) in a range the update removes fails the update.
		conds = append(conds, removedFree(id, ps.index.CIDRs(), fresh.index.CIDRs())...)
	}
	rev, err := s.commit(ctx, store.Txn{Conds: conds, Ops: []store.Op{{Kind: store.OpPutPool, Pool: &next}}})
	if errors.Is(err, store.ErrConflict) {
		return PoolView{}, nil, fmt.Errorf("update pool %s: the pool or its allocations changed meanwhile: %w", id, decide.ErrConflict)
	}
	if err != nil {
		return PoolView{}, nil, fmt.Errorf("update pool %s: %w", id, err)
	}
	next.Revision = rev
	s.cidrs.replace(id, ps.rec.CIDRs, next.CIDRs)
	ps.rec = next
	fresh.index.CopyQuarantine(ps.index)
	ps.index = fresh.index
	s.scatter(ps)
	sort.Slice(outside, func(i, j int) bool { return outside[i].Address.Less(outside[j].Address) })
	return ps.view(), outside, nil
}

// restoreInto takes every address ps holds in fresh's index, and returns
// the allocations that fall outside fresh's CIDRs but were inside ps's
// (held beyond the CIDRs already, they stay out of range). The caller
// holds ps.mu.
func (ps *poolState) restoreInto(fresh *poolState) ([]store.Allocation, error) {
	var outside []store.Allocation
	var err error
	ps.held.Addrs(func(addr netip.Addr) bool {
		if err = fresh.index.Restore(addr); err != nil {
			err = fmt.Errorf("restore %s: %w", addr, err)
			return false
		}
		if !fresh.index.Contains(addr) && ps.index.Contains(addr) {
			a, _ := ps.held.Get(addr)
			outside = append(outside, a)
		}
		return true
	})
	return outside, err
}

// poolsSeen is the condition that no pool changed after the revision up
// to which this replica has applied every commit: an overlap check made
// on its pools then holds in the store too. Alone on its store, the
// Allocator makes every pool change itself, under s.mu, and needs none. The
// caller holds s.mu, which the follower takes to apply a pool change.
func (s *Allocator) poolsSeen() []store.Cond {
	if !s.follow {
		return nil
	}
	return []store.Cond{{Kind: store.CondPoolsUnchangedSince, Revision: s.followed.load()}}
}

// removedFree is the condition that pool holds no allocation in the
// ranges that from covers and to does not.
func removedFree(pool string, from, to []netip.Prefix) []store.Cond {
	var conds []store.Cond
	for _, r := range decide.Removed(from, to) {
		conds = append(conds, store.Cond{Kind: store.CondRangeFree, Pool: pool, Address: r.First, Last: r.Last})
	}
	return conds
}

// DeletePool deletes a pool; with force its allocations go with it.
func (s *Allocator) DeletePool(ctx context.Context, id, etag string, force, allowMissing bool) (int, error) {
	var n int
	err := s.fresh(ctx, func() (err error) { n, err = s.deletePool(ctx, id, etag, force); return err })
	if allowMissing && errors.Is(err, decide.ErrPoolNotFound) {
		return 0, nil
	}
	return n, err
}

func (s *Allocator) deletePool(ctx context.Context, id, etag string, force bool) (int, error) {
	ps, err := s.pool(id)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	ps.mu.Lock()
	if err := decide.CheckEtag("pool "+id, ps.rec.Revision, etag); err != nil {
		ps.mu.Unlock()
		s.mu.Unlock()
		return 0, err
	}
	how, err := decide.DeletePool(id, ps.held.Len(), len(ps.pending), force, ps.deletion != nil, s.deleteChunk)
	if err != nil {
		ps.mu.Unlock()
		s.mu.Unlock()
		return 0, err
	}
	if how == decide.DeleteInChunks {
		// Other pools' requests go on meanwhile (see drain).
		d, err := s.startDeletion(ctx, id, ps)
		ps.mu.Unlock()
		s.mu.Unlock()
		if err != nil {
			return 0, err
		}
		select {
		case <-d.done:
			return d.released, d.err
		case <-ctx.Done():
			return 0, fmt.Errorf("delete pool %s: the deletion goes on after this call, the pool marked deleting until it is done: %w", id, ctx.Err())
		}
	}
	n, err := s.deleteLocked(ctx, id, ps, force)
	deleting := ps.rec.Deleting
	ps.mu.Unlock()
	s.mu.Unlock()
	if errors.Is(err, decide.ErrEtagMismatch) && deleting && s.deletedMeanwhile(ctx, ps) {
		return 0, nil // another replica finished the deletion first
	}
	return n, err
}

// deleteLocked commits the deletion of pool id (ps) and returns how many
// allocations went with it. The caller holds s.mu and ps.mu.
func (s *Allocator) deleteLocked(ctx context.Context, id string, ps *poolState, force bool) (int, error) {
	conds := []store.Cond{{Kind: store.CondPoolRevision, Pool: id, Revision: ps.rec.Revision}}
	if !force {
		// This replica may not have applied an allocation that another
		// one has just made: the store checks too.
		conds = append(conds, store.Cond{Kind: store.CondPoolEmpty, Pool: id})
	}
	_, err := s.commit(ctx, store.Txn{Conds: conds, Ops: []store.Op{{Kind: store.OpDeletePool, PoolID: id}}})
	if errors.Is(err, store.ErrConflict) {
		return 0, fmt.Errorf("delete pool %s: %w", id, decide.ErrEtagMismatch)
	}
	if err != nil {
		return 0, fmt.Errorf("delete pool %s: %w", id, err)
	}
	ps.deleted = true
	delete(s.pools, id)
	s.cidrs.replace(id, ps.rec.CIDRs, nil)
	if ps.rec.Deleting {
		go releaseMemory() // what a large pool held is garbage now
	}
	return ps.held.Len(), nil
}

// Filter selects allocations by owner fields; empty fields match all.
// Scope, when set, keeps only the owners of that cluster and of none
// (what a cluster-bound caller may see, decide.Access.List).
type Filter struct {
	Cluster, Kind, Namespace, Name, UID string
	Scope                               string
}

func (f Filter) match(o decide.Owner) bool {
	return (f.Scope == "" || o.Cluster == "" || o.Cluster == f.Scope) && (f.Cluster == "" || f.Cluster == o.Cluster) && (f.Kind == "" || f.Kind == o.Kind) &&
		(f.Namespace == "" || f.Namespace == o.Namespace) && (f.Name == "" || f.Name == o.Name) &&
		(f.UID == "" || f.UID == o.UID)
}

// Cursor is a position in the (pool, address) order of allocations.
type Cursor struct {
	Pool    string
	Address netip.Addr
}

// ListAllocations returns up to limit allocations after cursor in (pool,
// address) order, of pool (or every pool when pool is "-"), matching f,
// and the cursor of the next page (zero on the last page).
func (s *Allocator) ListAllocations(pool string, f Filter, after Cursor, limit int) ([]store.Allocation, Cursor, error) {
	var ids []string
	if pool == "-" {
		s.mu.RLock()
		for id := range s.pools {
			ids = append(ids, id)
		}
		s.mu.RUnlock()
		sort.Strings(ids)
	} else {
		if _, err := s.pool(pool); err != nil {
			return nil, Cursor{}, err
		}
		ids = []string{pool}
	}
	var out []store.Allocation
	for _, id := range ids {
		if id < after.Pool {
			continue
		}
		ps, err := s.pool(id)
		if err != nil {
			continue // deleted meanwhile
		}
		ps.mu.Lock()
		full := false
		var from netip.Addr
		if id == after.Pool {
			from = after.Address
		}
		ps.held.Ascend(from, func(a store.Allocation) bool {
			if a.Address == from || !f.match(a.Owner) {
				return true
			}
			if len(out) == limit {
				full = true
				return false
			}
			out = append(out, a)
			return true
		})
		if full {
			ps.mu.Unlock()
			last := out[len(out)-1]
			return out, Cursor{Pool: last.Pool, Address: last.Address}, nil
		}
		ps.mu.Unlock()
	}
	return out, Cursor{}, nil
}

// WatchEvent is one allocation event of a watch. Synced marks the end of
// the initial snapshot.
type WatchEvent struct {
	Type       store.EventType
	Allocation store.Allocation
	Revision   int64
	// Chunk carries the allocations of the snapshot, chunk by chunk,
	// before Synced; the event has no Type then.
	Chunk  *SnapshotChunk
	Synced bool
	Err    error
}

// Watch opens a watch of pool's allocation events ("-" for every pool):
// when fromRev is 0, a snapshot first (in chunks, then Synced with its
// revision), then every change after fromRev (or after the snapshot's
// revision). ctx bounds the watch. On a store that keeps its history in
// memory (bolt, and etcd from the history it keeps) a watch has no
// goroutine or buffer of its own: its reader pulls each event with Next.
func (s *Allocator) Watch(ctx context.Context, pool string, fromRev int64) (*Watcher, error) {
	if pool != "-" {
		if _, err := s.pool(pool); err != nil {
			return nil, err
		}
	}
	if fromRev > 0 {
		cur, err := s.currentRevision(ctx)
		if err != nil {
			return nil, err
		}
		if fromRev > cur {
			// A watch from there would wait, silent, for revisions
			// the store may never reach, and skip every change
			// before them.
			return nil, fmt.Errorf("start revision %d is after the store's current revision %d; resume from a revision this allocator sent, or 0 for a snapshot: %w", fromRev, cur, decide.ErrRevisionInFuture)
		}
	}
	w := &Watcher{pool: pool}
	var err error
	if w.events, err = s.watchFrom(ctx, pool, fromRev, &w.snap); err != nil {
		return nil, err
	}
	return w, nil
}

// watchBatch is how many store events a Watcher reads at a time.
const watchBatch = 32

// A Watcher is an open watch (Allocator.Watch). It is not safe for
// concurrent use.
type Watcher struct {
	pool string
	// snap is the snapshot still to send, chunk the next of its chunks.
	snap  *poolSnapshot
	chunk int
	// events are the store's; buf[pos:] those read and not yet returned.
	events store.Cursor
	buf    []store.Event
	pos    int
	// end is the error that ends the watch, returned once buf is drained.
	end error
}

// Next returns the watch's next event, waiting for one. An event with Err
// ends the watch: the store's reason, or ctx's error once ctx ends; every
// later call returns it again.
func (w *Watcher) Next(ctx context.Context) WatchEvent {
	if w.snap != nil {
		if err := ctx.Err(); err != nil {
			return WatchEvent{Err: err}
		}
		c, ok, err := w.snap.chunk(ctx, w.pool, w.chunk)
		if err != nil {
			if ctx.Err() != nil {
				return WatchEvent{Err: ctx.Err()}
			}
			w.end = snapshotError(w.snap.rev, err)
			w.snap = nil
			return WatchEvent{Err: w.end}
		}
		if ok {
			w.chunk++
			return WatchEvent{Chunk: c}
		}
		rev := w.snap.rev
		w.snap = nil
		return WatchEvent{Synced: true, Revision: rev}
	}
	for {
		for w.pos < len(w.buf) {
			e := w.buf[w.pos]
			w.buf[w.pos] = store.Event{} // the records it points to may go
			w.pos++
			if e.Allocation == nil || (w.pool != "-" && e.Allocation.Pool != w.pool) {
				continue
			}
			return WatchEvent{Type: e.Type, Allocation: *e.Allocation, Revision: e.Revision}
		}
		if w.end != nil {
			return WatchEvent{Err: w.end}
		}
		if w.buf == nil {
			w.buf = make([]store.Event, 0, watchBatch)
		}
		var err error
		w.buf, err = w.events.Next(ctx, w.buf[:0])
		w.pos = 0
		switch {
		case err == nil:
		case errors.Is(err, store.ErrCompacted):
			w.end = fmt.Errorf("%w: %w", decide.ErrRevisionTooOld, err)
		case errors.Is(err, store.ErrTooSlow):
			w.end = fmt.Errorf("%w: %w", decide.ErrWatchTooSlow, err)
		default:
			w.end = err
		}
	}
}

// Close lets go of what the store keeps for the watch. It may be called
// while another goroutine is in Next, which then ends.
func (w *Watcher) Close() { w.events.Close() }

// All yields the watch's events, up to and including the first with Err.
func (w *Watcher) All(ctx context.Context) iter.Seq[WatchEvent] {
	return func(yield func(WatchEvent) bool) {
		for {
			e := w.Next(ctx)
			if !yield(e) || e.Err != nil {
				return
			}
		}
	}
}

// watchFrom opens the store's watch after fromRev or, for fromRev 0,
// after a snapshot it sets in *snap: a shared recent one, or a fresh one
// when the store's history no longer reaches back to the shared one.
func (s *Allocator) watchFrom(ctx context.Context, pool string, fromRev int64, snap **poolSnapshot) (store.Cursor, error) {
	if fromRev != 0 {
		events, err := s.watchStore(ctx, fromRev, pool)
		if errors.Is(err, store.ErrCompacted) {
			return nil, fmt.Errorf("watch from revision %d: %w", fromRev, decide.ErrRevisionTooOld)
		}
		if err != nil {
			return nil, fmt.Errorf("watch: %w", err)
		}
		return events, nil
	}
	// Alone on its store, from memory; a follower, from the store in
	// pages.
	take := pagedSnapshot(s.store, pool)
	switch {
	case !s.follow && pool == "-":
		take = s.heldSnapshotAll()
	case !s.follow:
		take = s.heldSnapshot(pool)
	}
	// The snapshot holds every commit acknowledged before this call.
	atLeast, err := s.currentRevision(ctx)
	if err != nil {
		return nil, err
	}
	key := pool
	for fresh := false; ; fresh = true {
		sn, err := s.snapshots.get(ctx, key, atLeast, fresh, take)
		if err != nil {
			return nil, err
		}
		events, err := s.watchStore(ctx, sn.rev, pool)
		if errors.Is(err, store.ErrCompacted) && !fresh {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("watch: %w", err)
		}
		*snap = sn
		return events, nil
	}
}

// snapshotError is why a watch could not read the rest of its snapshot,
// taken at rev, from the store.
func snapshotError(rev int64, err error) error {
	if errors.Is(err, store.ErrCompacted) {
		return fmt.Errorf("the store compacted revision %d while this watch's snapshot, taken at it, was being sent; watch again from revision 0: %w: %w", rev, decide.ErrRevisionTooOld, err)
	}
	return fmt.Errorf("read the watch's snapshot at revision %d: %w: %w", rev, decide.ErrStoreUnavailable, err)
}

// watchStore opens the store's watch after fromRev, as a cursor: of
// pool's allocation events where the store can leave out the others, so
// that a watch of a quiet pool is not woken by every commit.
func (s *Allocator) watchStore(ctx context.Context, fromRev int64, pool string) (store.Cursor, error) {
	if pool == "-" {
		pool = ""
	}
	return s.store.WatchCursor(ctx, fromRev, pool)
}

// currentRevision is the store's revision: the latest commit of any
// replica when others share the store, else the latest this allocator
// made or loaded (alone on its store, every commit is its own).
func (s *Allocator) currentRevision(ctx context.Context) (int64, error) {
	if !s.follow {
		return s.followed.load(), nil
	}
	rev, err := s.store.Revision(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the store's revision: %w: %w", decide.ErrStoreUnavailable, err)
	}
	return rev, nil
}

// Pools returns the ids of every pool, sorted (metrics).
func (s *Allocator) Pools() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ids := slices.Collect(maps.Keys(s.pools))
	sort.Strings(ids)
	return ids
}
