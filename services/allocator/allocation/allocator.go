// Package allocation is the allocator's service layer: pools, allocations,
// idempotency, guarded release and watch, on top of the pure free-space
// index (package ipam) and a durable store (package store). It knows nothing
// of gRPC; the server package is a thin adapter around it.
//
// Every pool has an in-memory index and a mutex. An allocation first
// reserves an address in the index under the pool's mutex, then commits to
// the store outside of it, so concurrent requests reach the store together
// and are committed as one group. A failed commit gives the address back.
package allocation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/held"
	"github.com/plexusnet/plexus/services/allocator/ipam"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// Allocator is the allocator. It is safe for concurrent use.
type Allocator struct {
	store  store.Store
	now    func() time.Time
	logger *slog.Logger

	mu    sync.RWMutex
	pools map[string]*poolState
	// cidrs indexes the pools' CIDRs for the overlap check, kept in step
	// with pools under mu; nil after a rebuild of the state, until the
	// next check builds it.
	cidrs *cidrIndex

	// follow is set by WithFollow; rev is the revision the state was
	// rebuilt at, followed the last revision the follower applied.
	follow   bool
	rev      int64
	followed progress
	// followRetry is how long the follower waits to watch again after
	// an error (followRetry; tests set less or more).
	followRetry time.Duration

	// snapshots are shared by watches that start together.
	snapshots snapshots
	// deleteChunk is how many allocations a forced deletion releases per
	// commit (deleteChunk; tests set less).
	deleteChunk int

	// counters are read by Counters (metrics).
	conflicts, watchRestarts, rebuilds atomic.Uint64
}

// Option configures a Allocator.
type Option func(*Allocator)

// WithClock sets the clock (tests).
func WithClock(now func() time.Time) Option { return func(s *Allocator) { s.now = now } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(s *Allocator) { s.logger = l } }

type poolState struct {
	mu      sync.Mutex
	rec     store.Pool
	index   *ipam.Pool
	deleted bool
	// held holds the committed allocations, by address and by owner.
	held *held.Table
	// pending holds in-flight allocations by owner key, so a concurrent
	// request for the same owner waits for the first one's result.
	pending map[string]*pendingAlloc
	// pendingClusters counts pending by the cluster each is charged to
	// (decide.ChargedCluster): with what held counts, what a cluster
	// quota weighs.
	pendingClusters map[string]int
	// releasing holds addresses whose release is being committed; the
	// channel closes when it is done.
	releasing map[netip.Addr]chan struct{}
	// gate lets a watch snapshot find the pool with no commit between
	// the store and held.
	gate gate
	// deletion is the forced deletion in chunks under way here, if any.
	deletion *deletion
}

// usable returns the error that refuses a new allocation in the pool, if
// any: it is deleted, or being deleted. The caller holds ps.mu.
func (ps *poolState) usable() error {
	switch {
	case ps.deleted:
		return fmt.Errorf("pool %q: %w", ps.rec.ID, decide.ErrPoolNotFound)
	case ps.rec.Deleting:
		return fmt.Errorf("pool %q is being deleted: it is gone once its allocations are released (a deletion cut short is finished by DeletePool with force, or by repair): %w", ps.rec.ID, decide.ErrPoolDeleting)
	}
	return nil
}

type pendingAlloc struct {
	done  chan struct{}
	alloc store.Allocation
	err   error
}

// New rebuilds the in-memory state from the store and returns the Allocator.
// Built WithFollow, it also follows the store's changes until ctx ends.
func New(ctx context.Context, st store.Store, opts ...Option) (*Allocator, error) {
	s := &Allocator{store: st, now: time.Now, logger: slog.Default(), pools: map[string]*poolState{}, followRetry: followRetry, deleteChunk: deleteChunk}
	for _, o := range opts {
		o(s)
	}
	l, err := load(ctx, st, s.now, s.logger)
	if err != nil {
		return nil, err
	}
	// A store that prepares itself for commits in the background (the
	// bolt store builds its index while the snapshot above is read)
	// has done so before the allocator counts as started.
	if err := st.Ready(ctx); err != nil {
		return nil, fmt.Errorf("store not ready for commits: %w", err)
	}
	s.pools, s.rev, s.cidrs = l.pools, l.rev, nil
	s.followed.advance(l.rev)
	go releaseMemory() // not in the way of serving
	for _, ps := range s.pools {
		s.scatter(ps)
	}
	if s.follow {
		go s.Follow(ctx)
	}
	return s, nil
}

// releaseMemory returns to the operating system what loading a snapshot
// of the store took and no longer needs: the decoded snapshot is several
// times the size of the state kept from it, and the runtime would
// otherwise hand those pages back only slowly, so a restarted allocator
// would sit at its peak for minutes.
func releaseMemory() { debug.FreeOSMemory() }

// loaded is the in-memory state rebuilt from a snapshot.
type loaded struct {
	pools map[string]*poolState
	rev   int64
}

// load rebuilds the pools and their indexes from the store's snapshot,
// filing each allocation as the store hands it over (in any order), so
// that no more than the store's page of them is held beside the state
// built (on etcd a million decoded allocations took ~300 MB more at start
// and after each rebuild). The pools' tables grow as they fill.
func load(ctx context.Context, st store.Store, clock func() time.Time, logger *slog.Logger) (*loaded, error) {
	pools := map[string]*poolState{}
	var (
		n       int
		last    string
		ps      *poolState
		orphans map[string]int // allocations of pools that do not exist
	)
	rev, quarantine, err := st.StreamSnapshot(ctx, func(all []store.Pool, held []int) error {
		for i, p := range all {
			ps, err := newPoolState(p, held[i])
			if err != nil {
				return fmt.Errorf("rebuild pool %s: %w", p.ID, err)
			}
			pools[p.ID] = ps
		}
		return nil
	}, func(a *store.Allocation) error {
		if n == 0 || a.Pool != last {
			last, ps = a.Pool, pools[a.Pool]
		}
		n++
		if ps == nil {
			if orphans == nil {
				orphans = map[string]int{}
			}
			orphans[a.Pool]++
			return nil
		}
		if err := ps.index.Restore(a.Address); err != nil {
			return fmt.Errorf("rebuild pool %s: restore %s: %w", a.Pool, a.Address, err)
		}
		if err := ps.held.Put(a); err != nil {
			return fmt.Errorf("rebuild pool %s: %w", a.Pool, err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load store snapshot: %w", err)
	}
	orphaned := 0
	for pool, k := range orphans {
		logger.Warn("allocations of unknown pool ignored", "pool", pool, "allocations", k)
		orphaned += k
	}
	restoreQuarantine(pools, quarantine, clock(), logger)
	logger.Info("allocator state rebuilt", "pools", len(pools), "allocations", n-orphaned, "revision", rev)
	return &loaded{pools: pools, rev: rev}, nil
}

// restoreQuarantine puts the quarantine records still in force into their
// pools' indexes.
func restoreQuarantine(pools map[string]*poolState, qs []store.Quarantine, now time.Time, logger *slog.Logger) {
	for _, q := range qs {
		ps, ok := pools[q.Pool]
		if !ok || !q.Until.After(now) {
			continue
		}
		if err := ps.index.Quarantine(q.Address, q.Until); err != nil {
			logger.Warn("quarantine record ignored", "pool", q.Pool, "address", q.Address, "err", err)
		}
	}
}

// newPoolState returns the state of pool p, sized for n allocations.
func newPoolState(p store.Pool, n int) (*poolState, error) {
	cfg, err := indexConfig(p)
	if err != nil {
		return nil, err
	}
	idx, err := ipam.New(cfg)
	if err != nil {
		return nil, err
	}
	return &poolState{
		rec:     p,
		index:   idx,
		held:    held.New(p.ID, idx.Family() == 4, n),
		pending: map[string]*pendingAlloc{},

		pendingClusters: map[string]int{},
		releasing:       map[netip.Addr]chan struct{}{},
	}, nil
}

// put records a committed allocation; the caller holds ps.mu.
func (s *Allocator) put(ps *poolState, a *store.Allocation) {
	if err := ps.held.Put(a); err != nil {
		// The index refused it as well: an address of the other
		// family can only come from a store written by something else.
		s.logger.Error("allocation not held", "pool", a.Pool, "address", a.Address, "err", err)
	}
}

// installOwn records an allocation this Allocator has just committed. A
// follower may have applied that commit already, and commits after it too
// (a release through another replica, say): the state is then the
// follower's, and putting the record back would resurrect what is gone.
// The caller holds ps.mu.
func (s *Allocator) installOwn(ps *poolState, a *store.Allocation) {
	if s.follow && s.followed.load() >= a.Revision {
		return
	}
	if rev, ok := ps.held.Revision(a.Address); ok && rev > a.Revision {
		return
	}
	s.put(ps, a)
}

func (s *Allocator) pool(id string) (*poolState, error) {
	s.mu.RLock()
	ps, ok := s.pools[id]
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("pool %q: %w", id, decide.ErrPoolNotFound)
	}
	return ps, nil
}

// Allocate hands out one address. It is idempotent per (pool, owner key):
// an owner that already holds an address gets it back with created=false.
func (s *Allocator) Allocate(ctx context.Context, req decide.Request) (store.Allocation, bool, error) {
	if err := req.Validate(""); err != nil {
		return store.Allocation{}, false, err
	}
	if req.RequestID != "" {
		if got, ok, err := s.replay(ctx, req.RequestID, []decide.Request{req}); err != nil || ok {
			if err != nil {
				return store.Allocation{}, false, err
			}
			return got[0], false, nil
		}
	}
	var (
		a       store.Allocation
		created bool
	)
	err := s.fresh(ctx, func() error {
		var err error
		a, created, err = retry(ctx, s, func() (store.Allocation, bool, error) { return s.allocateOnce(ctx, req) })
		return err
	})
	return a, created, err
}

// allocateOnce decides req on the pool's state and carries the decision
// out: an answer from what the pool holds, a wait, a rebind, or a new
// address committed to the store.
func (s *Allocator) allocateOnce(ctx context.Context, req decide.Request) (store.Allocation, bool, error) {
	ps, err := s.pool(req.Pool)
	if err != nil {
		return store.Allocation{}, false, err
	}
	now := s.now()
	key := req.Owner.Key() // before the lock, which every call of the pool waits for
	ps.mu.Lock()
	if err := ps.gate.pass(ctx, &ps.mu); err != nil {
		ps.mu.Unlock()
		return store.Allocation{}, false, err
	}
	if err := ps.usable(); err != nil {
		ps.mu.Unlock()
		return store.Allocation{}, false, err
	}
	held, heldRec := ps.holding(req.Owner)
	pending := ps.pending[key]
	step, err := decide.Allocate(req, held, pending != nil)
	switch {
	case err != nil:
		ps.mu.Unlock()
		return store.Allocation{}, false, err
	case step == decide.Keep:
		ps.mu.Unlock()
		return heldRec, false, nil
	case step == decide.Rebind:
		return s.rebind(ctx, ps, heldRec, req.Owner, now)
	case step == decide.AwaitRelease:
		ch := ps.releasing[held.Address]
		ps.mu.Unlock()
		if err := wait(ctx, ch); err != nil {
			return store.Allocation{}, false, err
		}
		return store.Allocation{}, false, decide.ErrConflict
	case step == decide.AwaitPending:
		ps.mu.Unlock()
		if err := wait(ctx, pending.done); err != nil {
			return store.Allocation{}, false, err
		}
		if err := decide.Awaited(pending.err); err != nil {
			return store.Allocation{}, false, err
		}
		return pending.alloc, false, nil
	}
	return s.reserveAndCommit(ctx, ps, req, key, now)
}

// holding returns what ps holds for owner, for a decision, and its
// record; nil when nothing. The caller holds ps.mu.
func (ps *poolState) holding(owner decide.Owner) (*decide.Holding, store.Allocation) {
	addr, ok := ps.held.Owned(owner)
	if !ok {
		return nil, store.Allocation{}
	}
	a, _ := ps.held.Get(addr)
	return ps.holdingOf(a), a
}

// holdingOf is a held allocation as a decision sees it. The caller holds
// ps.mu.
func (ps *poolState) holdingOf(a store.Allocation) *decide.Holding {
	_, busy := ps.releasing[a.Address]
	return &decide.Holding{Pool: a.Pool, Address: a.Address, Owner: a.Owner, Revision: a.Revision, Releasing: busy}
}

// reserveAndCommit takes an address for req in the index and commits it,
// with req's request record if any; concurrent requests of the owner (key)
// wait for its answer meanwhile. The caller holds ps.mu; it is released.
func (s *Allocator) reserveAndCommit(ctx context.Context, ps *poolState, req decide.Request, key string, now time.Time) (store.Allocation, bool, error) {
	cluster := decide.ChargedCluster(req.Owner, req.Creator)
	if err := ps.quota(cluster, 0); err != nil {
		ps.mu.Unlock()
		return store.Allocation{}, false, err
	}
	addr, err := reserve(ps, req, now, "address")
	if err != nil {
		ps.mu.Unlock()
		return store.Allocation{}, false, err
	}
	p := &pendingAlloc{done: make(chan struct{})}
	ps.pending[key] = p
	ps.pendingClusters[cluster]++
	poolRev := ps.rec.Revision
	ps.gate.enter()
	ps.mu.Unlock()

	rec := store.Allocation{Pool: req.Pool, Address: addr, Owner: req.Owner, CreateTime: now.UTC(), RequestID: req.RequestID, CreatorCluster: req.Creator}
	txn := store.Txn{Conds: []store.Cond{{Kind: store.CondPoolRevision, Pool: req.Pool, Revision: poolRev}}}
	appendAllocTxn(&txn, rec)
	appendRequestTxn(&txn, req.RequestID, []store.Allocation{rec})
	rev, cerr := s.commit(ctx, txn)

	ps.mu.Lock()
	delete(ps.pending, key)
	if ps.pendingClusters[cluster]--; ps.pendingClusters[cluster] == 0 {
		delete(ps.pendingClusters, cluster)
	}
	if cerr != nil {
		s.unreserve(ps, addr, cerr)
		if errors.Is(cerr, store.ErrConflict) {
			cerr = fmt.Errorf("allocate %s in pool %s: %w", addr, req.Pool, decide.ErrConflict)
		}
		p.err = cerr
	} else {
		rec.Revision = rev
		s.installOwn(ps, &rec)
		p.alloc = rec
	}
	ps.gate.leave()
	ps.mu.Unlock()
	close(p.done)
	if cerr == nil {
		return rec, true, nil
	}
	if errors.Is(cerr, decide.ErrConflict) {
		if got, ok, err := s.wonBy(ctx, req.RequestID, []decide.Request{req}); err != nil || ok {
			return first(got), false, err
		}
	}
	return store.Allocation{}, false, cerr
}

// quota refuses one more address charged to cluster (decide.
// ChargedCluster) when the pool has a cluster quota and the cluster is
// charged it, with what it has committed, in flight and, in a batch,
// taken earlier in the batch (more). The caller holds ps.mu.
func (ps *poolState) quota(cluster string, more int) error {
	if ps.rec.ClusterQuota == 0 || cluster == "" {
		return nil
	}
	n := ps.held.ClusterLen(cluster) + ps.pendingClusters[cluster] + more
	return decide.CheckClusterQuota(ps.rec.ID, ps.rec.ClusterQuota, cluster, n)
}

// unreserve gives back an address whose commit failed with err, unless a
// followed commit of another replica holds it now. Lost to another
// replica (likely searching the same stretch of the pool), the next search
// starts elsewhere. The caller holds ps.mu.
func (s *Allocator) unreserve(ps *poolState, addr netip.Addr, err error) {
	if !ps.held.Has(addr) {
		_ = ps.index.Unallocate(addr)
	}
	if errors.Is(err, store.ErrConflict) {
		s.scatter(ps)
	}
}

// first is the first allocation of a replayed answer, if any.
func first(as []store.Allocation) store.Allocation {
	if len(as) == 0 {
		return store.Allocation{}
	}
	return as[0]
}

// rebind hands an owner's address to a new incarnation of the owner (same
// cluster, kind, namespace and name, new uid: a StatefulSet pod recreated,
// say). The allocation gets a new revision, so a guarded release by anyone
// who saw the old incarnation fails. The caller holds ps.mu; rebind
// releases it.
func (s *Allocator) rebind(ctx context.Context, ps *poolState, old store.Allocation, owner decide.Owner, now time.Time) (store.Allocation, bool, error) {
	rec := old
	rec.Owner = owner
	rec.CreateTime = now.UTC()
	rec.RequestID = ""
	ch := make(chan struct{})
	ps.releasing[old.Address] = ch
	ps.gate.enter()
	ps.mu.Unlock()
	r := rec
	rev, err := s.commit(ctx, store.Txn{
		Conds: []store.Cond{{Kind: store.CondAllocationRevision, Pool: old.Pool, Address: old.Address, Revision: old.Revision}},
		Ops:   []store.Op{{Kind: store.OpPutAllocation, Allocation: &r}},
	})
	ps.mu.Lock()
	delete(ps.releasing, old.Address)
	if err == nil {
		rec.Revision = rev
		s.installOwn(ps, &rec)
	}
	ps.gate.leave()
	ps.mu.Unlock()
	close(ch)
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return store.Allocation{}, false, fmt.Errorf("rebind %s to uid %s: %w", old.Address, owner.UID, decide.ErrConflict)
		}
		return store.Allocation{}, false, fmt.Errorf("rebind %s to uid %s: %w", old.Address, owner.UID, err)
	}
	s.logger.Info("allocation handed to a new incarnation of its owner", "pool", old.Pool, "address", old.Address, "owner", owner.Key(), "old_uid", old.Owner.UID, "uid", owner.UID)
	return rec, false, nil
}

// reserve takes an address in the index; the caller holds ps.mu. field
// names the request's address field, for errors that blame it.
func reserve(ps *poolState, req decide.Request, now time.Time, field string) (netip.Addr, error) {
	if req.Address.IsValid() {
		if req.Address.Is4() != ps.index.Is4() {
			return netip.Addr{}, &decide.FieldError{Field: field, Reason: "ADDRESS_FAMILY_MISMATCH",
				Message: fmt.Sprintf("%s is not of pool %s's family", req.Address, req.Pool), Err: decide.ErrFamilyMismatch}
		}
		if err := ps.index.AllocateAddr(req.Address, now); err != nil {
			err = fmt.Errorf("allocate %s in pool %s: %w", req.Address, req.Pool, err)
			if errors.Is(err, ipam.ErrOutOfRange) || errors.Is(err, ipam.ErrReserved) {
				// The caller asked for an address it can never get: bad
				// input in a field it chose, whose reason the error table
				// gives.
				return netip.Addr{}, &decide.FieldError{Field: field, Message: err.Error(), Err: err}
			}
			return netip.Addr{}, err
		}
		return req.Address, nil
	}
	addr, err := ps.index.AllocateNext(now)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("allocate in pool %s: %w", req.Pool, err)
	}
	return addr, nil
}

func appendAllocTxn(txn *store.Txn, rec store.Allocation) {
	txn.Conds = append(txn.Conds,
		store.Cond{Kind: store.CondAllocationAbsent, Pool: rec.Pool, Address: rec.Address},
		store.Cond{Kind: store.CondOwnerAbsent, Pool: rec.Pool, OwnerKey: rec.Owner.Key()},
	)
	r := rec
	txn.Ops = append(txn.Ops, store.Op{Kind: store.OpPutAllocation, Allocation: &r})
}

// appendRequestTxn records request id's answer, allocs, in txn, guarded
// by the id being new; nothing without an id.
func appendRequestTxn(txn *store.Txn, id string, allocs []store.Allocation) {
	if id == "" {
		return
	}
	keys := make([]string, len(allocs))
	for i, a := range allocs {
		keys[i] = allocKey(a.Pool, a.Address)
	}
	txn.Conds = append(txn.Conds, store.Cond{Kind: store.CondRequestAbsent, RequestID: id})
	txn.Ops = append(txn.Ops, store.Op{Kind: store.OpPutRequest, Request: &store.Request{ID: id, Allocations: keys}})
}

func allocKey(pool string, addr netip.Addr) string { return pool + "/" + addr.String() }

// replay answers a request id seen before with the allocations it made. It
// returns ok=false when the id is new.
func (s *Allocator) replay(ctx context.Context, id string, reqs []decide.Request) ([]store.Allocation, bool, error) {
	rec, ok, err := s.store.GetRequest(ctx, id)
	if err != nil || !ok {
		return nil, false, err
	}
	if len(rec.Allocations) != len(reqs) {
		return nil, false, fmt.Errorf("request %q: %w", id, decide.ErrRequestIDReused)
	}
	// Answered through another replica maybe, a moment ago: its
	// allocations are here once this replica has applied that commit.
	if err := s.applied(ctx, rec.Revision); err != nil {
		return nil, false, fmt.Errorf("request %q: %w", id, err)
	}
	out := make([]store.Allocation, len(reqs))
	for i, k := range rec.Allocations {
		if strings.HasPrefix(k, decide.PoolRequestPrefix) {
			return nil, false, fmt.Errorf("request %q created a pool: %w", id, decide.ErrRequestIDReused)
		}
		a, err := s.getByKey(k)
		if errors.Is(err, decide.ErrAllocationNotFound) {
			// Committed a moment ago by another request of this
			// replica, whose answer may not be in memory yet: once the
			// pool's commits in flight are, look again.
			if err := s.settleInFlight(ctx, k); err != nil {
				return nil, false, fmt.Errorf("request %q: %w", id, err)
			}
			a, err = s.getByKey(k)
		}
		if err != nil {
			return nil, false, fmt.Errorf("request %q answered before, but %s is gone: %w", id, k, err)
		}
		if !decide.Answers(decide.Holding{Pool: a.Pool, Address: a.Address, Owner: a.Owner, Revision: a.Revision}, reqs[i]) {
			return nil, false, fmt.Errorf("request %q: %w", id, decide.ErrRequestIDReused)
		}
		out[i] = a
	}
	return out, true, nil
}

// wonBy answers requests whose commit lost its transaction, in case
// another request with the same id won it: with that request's result,
// with ErrRequestIDReused when it asked for something else, or ok=false.
func (s *Allocator) wonBy(ctx context.Context, id string, reqs []decide.Request) ([]store.Allocation, bool, error) {
	if id == "" {
		return nil, false, nil
	}
	got, ok, err := s.replay(ctx, id, reqs)
	switch {
	case errors.Is(err, decide.ErrRequestIDReused):
		return nil, false, err
	case err != nil || !ok:
		return nil, false, nil // lost to something else: the caller retries
	}
	return got, true, nil
}

// settleInFlight waits until the commits in flight in the pool of key (an
// allocation key) are installed in memory.
func (s *Allocator) settleInFlight(ctx context.Context, key string) error {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return nil
	}
	ps, err := s.pool(key[:i])
	if err != nil {
		return nil // gone: the caller's look finds nothing either
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if err := ps.gate.quiesce(ctx, &ps.mu); err != nil {
		return err
	}
	ps.gate.open()
	return nil
}

func (s *Allocator) getByKey(key string) (store.Allocation, error) {
	for i := len(key) - 1; i >= 0; i-- {
		if key[i] == '/' {
			addr, err := netip.ParseAddr(key[i+1:])
			if err != nil {
				return store.Allocation{}, err
			}
			return s.GetAllocation(key[:i], addr)
		}
	}
	return store.Allocation{}, decide.ErrAllocationNotFound
}

// BatchAllocate allocates every request or none. Requests for owners that
// already hold an address in the pool get that address back.
func (s *Allocator) BatchAllocate(ctx context.Context, reqs []decide.Request, requestID string) ([]store.Allocation, error) {
	if err := decide.ValidateBatch(reqs); err != nil {
		return nil, err
	}
	if requestID != "" {
		if got, ok, err := s.replay(ctx, requestID, reqs); err != nil || ok {
			return got, err
		}
	}
	var out []store.Allocation
	err := s.fresh(ctx, func() error {
		var err error
		out, _, err = retry(ctx, s, func() ([]store.Allocation, bool, error) {
			out, err := s.batchOnce(ctx, reqs, requestID)
			return out, false, err
		})
		return err
	})
	if errors.Is(err, store.ErrTooLarge) {
		return nil, &decide.FieldError{Field: "requests", Reason: "BATCH_TOO_LARGE", Err: err, Message: fmt.Sprintf(
			"%d requests are more than the store takes in one transaction; send fewer per batch (on etcd each takes 3 of --max-txn-ops, 128 by default, and about 600 bytes of --max-request-bytes)", len(reqs))}
	}
	return out, err
}

// batchOnce decides every request of a batch on the state of its pools,
// all locked (in name order, so batches never deadlock) through the
// commit: a batch is rare and large, and holding the locks keeps
// all-or-nothing simple.
func (s *Allocator) batchOnce(ctx context.Context, reqs []decide.Request, requestID string) ([]store.Allocation, error) {
	b, err := s.lockBatch(reqs)
	if err != nil {
		return nil, err
	}
	defer b.unlock()
	steps, err := decide.Batch(reqs, func(i int) (*decide.Holding, bool) {
		ps := b.states[reqs[i].Pool]
		h, _ := ps.holding(reqs[i].Owner)
		return h, ps.pending[reqs[i].Owner.Key()] != nil
	})
	if err != nil {
		return nil, err
	}
	for i, st := range steps {
		switch st {
		case decide.Rebind, decide.AwaitRelease:
			// Rare: let the single-request path hand the address over,
			// then decide the batch again.
			b.unlock()
			if _, _, err := s.Allocate(ctx, decide.Request{Pool: reqs[i].Pool, Owner: reqs[i].Owner, Creator: reqs[i].Creator}); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("owner %s changed incarnation: %w", reqs[i].Owner.Key(), decide.ErrConflict)
		case decide.AwaitPending:
			return nil, fmt.Errorf("owner %s has an allocation in flight in pool %s: %w", reqs[i].Owner.Key(), reqs[i].Pool, decide.ErrConflict)
		}
	}
	out, fresh, err := b.reserve(reqs, steps, requestID, s.now())
	if err != nil || len(fresh) == 0 {
		return out, err
	}
	txn := b.txn(out, fresh)
	appendRequestTxn(&txn, requestID, out)
	rev, err := s.commit(ctx, txn)
	if err != nil {
		b.rollback(out, fresh)
		b.unlock()
		if errors.Is(err, store.ErrConflict) {
			if got, ok, err := s.wonBy(ctx, requestID, reqs); err != nil || ok {
				return got, err
			}
			return nil, fmt.Errorf("batch allocate: %w", decide.ErrConflict)
		}
		return nil, fmt.Errorf("batch allocate: %w", err)
	}
	for _, i := range fresh {
		out[i].Revision = rev
		a := out[i]
		s.installOwn(b.states[a.Pool], &a)
	}
	return out, nil
}

// batch is the pools of a batch, locked.
type batch struct {
	ids    []string
	states map[string]*poolState
	locked bool
}

// lockBatch locks the pools of reqs in name order, refusing a batch into
// a pool that is gone or being deleted.
func (s *Allocator) lockBatch(reqs []decide.Request) (*batch, error) {
	b := &batch{states: map[string]*poolState{}}
	for _, r := range reqs {
		if _, ok := b.states[r.Pool]; ok {
			continue
		}
		ps, err := s.pool(r.Pool)
		if err != nil {
			return nil, err
		}
		b.states[r.Pool] = ps
		b.ids = append(b.ids, r.Pool)
	}
	sort.Strings(b.ids)
	for _, id := range b.ids {
		b.states[id].mu.Lock()
	}
	b.locked = true
	for _, id := range b.ids {
		if err := b.states[id].usable(); err != nil {
			b.unlock()
			return nil, err
		}
	}
	return b, nil
}

// unlock unlocks the batch's pools, once.
func (b *batch) unlock() {
	if !b.locked {
		return
	}
	b.locked = false
	for _, id := range b.ids {
		b.states[id].mu.Unlock()
	}
}

// reserve answers the requests decided Keep with what their owners hold
// and takes an address for those decided Reserve; fresh lists the latter.
// A refusal gives back what it took.
func (b *batch) reserve(reqs []decide.Request, steps []decide.Step, requestID string, now time.Time) (out []store.Allocation, fresh []int, err error) {
	out = make([]store.Allocation, len(reqs))
	var taken map[[2]string]int // by pool and owner cluster, for quotas
	for i, r := range reqs {
		ps := b.states[r.Pool]
		if steps[i] == decide.Keep {
			_, out[i] = ps.holding(r.Owner)
			continue
		}
		if ps.rec.ClusterQuota > 0 {
			if taken == nil {
				taken = map[[2]string]int{}
			}
			c := decide.ChargedCluster(r.Owner, r.Creator)
			k := [2]string{r.Pool, c}
			if err := ps.quota(c, taken[k]); err != nil {
				b.rollback(out, fresh)
				return nil, nil, fmt.Errorf("requests[%d]: %w", i, err)
			}
			taken[k]++
		}
		addr, err := reserve(ps, r, now, fmt.Sprintf("requests[%d].address", i))
		if err != nil {
			b.rollback(out, fresh)
			return nil, nil, fmt.Errorf("requests[%d]: %w", i, err)
		}
		out[i] = store.Allocation{Pool: r.Pool, Address: addr, Owner: r.Owner, CreateTime: now.UTC(), RequestID: requestID, CreatorCluster: r.Creator}
		fresh = append(fresh, i)
	}
	return out, fresh, nil
}

// rollback gives back the addresses reserve took.
func (b *batch) rollback(out []store.Allocation, fresh []int) {
	for _, i := range fresh {
		_ = b.states[out[i].Pool].index.Unallocate(out[i].Address)
	}
}

// txn is the batch's transaction: its pools unchanged, each fresh
// allocation put where its address and owner are free.
func (b *batch) txn(out []store.Allocation, fresh []int) store.Txn {
	var txn store.Txn
	for _, id := range b.ids {
		txn.Conds = append(txn.Conds, store.Cond{Kind: store.CondPoolRevision, Pool: id, Revision: b.states[id].rec.Revision})
	}
	for _, i := range fresh {
		appendAllocTxn(&txn, out[i])
	}
	return txn
}

// GetAllocation returns the allocation of addr in pool.
func (s *Allocator) GetAllocation(pool string, addr netip.Addr) (store.Allocation, error) {
	ps, err := s.pool(pool)
	if err != nil {
		return store.Allocation{}, err
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	a, ok := ps.held.Get(addr)
	if !ok {
		return store.Allocation{}, fmt.Errorf("%s in pool %s: %w", addr, pool, decide.ErrAllocationNotFound)
	}
	return a, nil
}

// InRange tells whether addr lies within pool's CIDRs.
func (s *Allocator) InRange(pool string, addr netip.Addr) bool {
	ps, err := s.pool(pool)
	if err != nil {
		return false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.index.Contains(addr)
}

// Release frees an allocation if its guards hold. It returns the released
// allocation, or ok=false when there was none and AllowMissing is set.
func (s *Allocator) Release(ctx context.Context, req decide.ReleaseRequest) (store.Allocation, bool, error) {
	var rec store.Allocation
	err := s.fresh(ctx, func() error {
		ps, err := s.pool(req.Pool)
		if err != nil {
			return err
		}
		for {
			rec, err = s.releaseOnce(ctx, ps, req)
			if !errors.Is(err, decide.ErrConflict) {
				return err
			}
			// A concurrent release of the same address finished: look
			// again.
		}
	})
	if req.AllowMissing && (errors.Is(err, decide.ErrPoolNotFound) || errors.Is(err, decide.ErrAllocationNotFound)) {
		return store.Allocation{}, false, nil
	}
	return rec, err == nil, err
}

func (s *Allocator) releaseOnce(ctx context.Context, ps *poolState, req decide.ReleaseRequest) (store.Allocation, error) {
	now := s.now()
	ps.mu.Lock()
	if err := ps.gate.pass(ctx, &ps.mu); err != nil {
		ps.mu.Unlock()
		return store.Allocation{}, err
	}
	var a store.Allocation
	found := false
	if req.Address.IsValid() {
		a, found = ps.held.Get(req.Address)
	} else if addr, ok := ps.held.Owned(req.Owner); ok {
		a, found = ps.held.Get(addr)
	}
	if !found {
		ps.mu.Unlock()
		return store.Allocation{}, fmt.Errorf("release in pool %s: %w", req.Pool, decide.ErrAllocationNotFound)
	}
	step, err := decide.Release(req, *ps.holdingOf(a))
	switch {
	case err != nil:
		ps.mu.Unlock()
		return store.Allocation{}, err
	case step == decide.AwaitRelease:
		ch := ps.releasing[a.Address]
		ps.mu.Unlock()
		if err := wait(ctx, ch); err != nil {
			return store.Allocation{}, err
		}
		return store.Allocation{}, decide.ErrConflict
	}
	rec := a
	txn := store.Txn{
		Conds: []store.Cond{{Kind: store.CondAllocationRevision, Pool: req.Pool, Address: rec.Address, Revision: rec.Revision}},
		Ops:   []store.Op{{Kind: store.OpDeleteAllocation, PoolID: req.Pool, Address: rec.Address}},
	}
	if d := ps.rec.ReuseDelay; d > 0 {
		txn.Ops = append(txn.Ops, store.Op{Kind: store.OpPutQuarantine, Quarantine: &store.Quarantine{Pool: req.Pool, Address: rec.Address, Until: now.Add(d).UTC()}})
	}
	// The address stays taken in the index while the release commits, so
	// no allocation can race it; other requests of the pool go on.
	ch := make(chan struct{})
	ps.releasing[rec.Address] = ch
	ps.gate.enter()
	ps.mu.Unlock()

	_, err = s.commit(ctx, txn)

	ps.mu.Lock()
	delete(ps.releasing, rec.Address)
	if err == nil {
		s.forget(ps, rec, now)
	}
	ps.gate.leave()
	ps.mu.Unlock()
	close(ch)
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return store.Allocation{}, fmt.Errorf("release %s: changed concurrently: %w", rec.Address, decide.ErrEtagMismatch)
		}
		return store.Allocation{}, fmt.Errorf("release %s: %w", rec.Address, err)
	}
	return rec, nil
}

// forget drops a released allocation from held and the index, unless the
// follower has already (the address may even be allocated again since).
// The caller holds ps.mu.
func (s *Allocator) forget(ps *poolState, a store.Allocation, now time.Time) {
	if cur, ok := ps.held.Revision(a.Address); ok && cur == a.Revision {
		ps.held.Delete(a.Address)
		if err := ps.index.Release(a.Address, now); err != nil {
			s.logger.Warn("index release", "pool", a.Pool, "address", a.Address, "err", err)
		}
	}
}

// commit commits txn to the store, counting the commits that lose their
// transaction to a concurrent writer. A Allocator alone on its store knows
// each commit it makes; a follower learns of its own through the watch,
// in order with the other replicas'.
func (s *Allocator) commit(ctx context.Context, txn store.Txn) (int64, error) {
	rev, err := s.store.Commit(ctx, txn)
	switch {
	case errors.Is(err, store.ErrConflict):
		s.conflicts.Add(1)
	case errors.Is(err, store.ErrUnconfirmed):
		// Not a fault of the request: the store may yet apply it, and a
		// retry with the same request id gets its answer.
		err = fmt.Errorf("%w: %w", decide.ErrStoreUnavailable, err)
	case err == nil && !s.follow:
		// Alone on the store, every commit is this Allocator's own.
		s.followed.advance(rev)
	}
	return rev, err
}

// Counters are running totals of the Allocator, for metrics.
type Counters struct {
	// Conflicts counts store commits that lost their transaction: to
	// another replica, or to a concurrent request of this one.
	Conflicts uint64
	// WatchRestarts counts the follower's store watches that ended with
	// an error and were started again; Rebuilds, the snapshots it took
	// because the history it needed was compacted away.
	WatchRestarts, Rebuilds uint64
	// Revision is the store revision up to which the in-memory state
	// holds every commit: the last one the follower applied, or alone
	// on the store the last one made.
	Revision int64
}

// Counters returns the Allocator's running totals.
func (s *Allocator) Counters() Counters {
	return Counters{
		Conflicts:     s.conflicts.Load(),
		WatchRestarts: s.watchRestarts.Load(),
		Rebuilds:      s.rebuilds.Load(),
		Revision:      s.followed.load(),
	}
}

// retry runs once, and again after a backoff while it loses its
// transaction (ErrConflict), up to conflictRetries times.
func retry[T any](ctx context.Context, s *Allocator, once func() (T, bool, error)) (T, bool, error) {
	for attempt := 0; ; attempt++ {
		v, ok, err := once()
		if errors.Is(err, decide.ErrConflict) && attempt < s.conflictRetries() {
			if err := s.backoff(ctx, attempt); err != nil {
				return v, false, err
			}
			continue
		}
		return v, ok, err
	}
}

// fresh runs op and, when the Allocator follows a shared store and op
// failed in a way that a state behind the store explains (a pool,
// allocation or free address that another replica has just created,
// changed or released), runs it once more after Sync. A replica thus
// refuses a request only on a state as fresh as the store, as it answers
// reads.
func (s *Allocator) fresh(ctx context.Context, op func() error) error {
	err := op()
	if err == nil || !s.follow || !staleable(err) {
		return err
	}
	if serr := s.Sync(ctx); serr != nil {
		return serr
	}
	return op()
}

// staleErrors are the refusals that may come from a state behind the
// store.
var staleErrors = []error{
	decide.ErrPoolNotFound, decide.ErrPoolExists, decide.ErrPoolOverlap, decide.ErrPoolNotEmpty, decide.ErrCIDRInUse,
	decide.ErrAllocationNotFound, decide.ErrEtagMismatch, decide.ErrOwnerMismatch, decide.ErrConflict,
	ipam.ErrInUse, ipam.ErrExhausted, ipam.ErrInReuseDelay,
}

func staleable(err error) bool {
	for _, e := range staleErrors {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// conflictRetries is how often Allocate tries again after losing its
// transaction. Alone on its store a replica loses only to its own
// concurrent requests; sharing it, it may lose to other replicas until the
// follower has brought their commits in.
func (s *Allocator) conflictRetries() int {
	if s.follow {
		return 8
	}
	return 3
}

// backoff waits before the next attempt: nothing alone on the store, a
// few milliseconds doubling per attempt when other replicas commit too,
// so the follower catches up with what made the attempt fail.
func (s *Allocator) backoff(ctx context.Context, attempt int) error {
	if !s.follow {
		return nil
	}
	select {
	case <-time.After(time.Millisecond << min(attempt, 6)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func wait(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
