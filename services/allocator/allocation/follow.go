package allocation

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// WithFollow makes the Allocator follow the store's watch from the revision
// it was rebuilt at (see Follow). Needed when other allocator replicas
// commit to the same store (etcd): without it this replica's free-space
// index would not know their allocations, and every one of its proposals
// for an address they hold would lose its transaction.
func WithFollow() Option { return func(s *Allocator) { s.follow = true } }

// followRetry bounds the wait between two attempts to re-establish the
// watch after it ended with an error other than compaction.
const followRetry = 2 * time.Second

// followBatch is how many events the follower takes from its watch at a
// time.
const followBatch = 256

// Follow applies the store's changes to the in-memory state until ctx ends:
// allocations, releases, quarantines and pool changes committed by other
// replicas, and this replica's own commits again (they are recognised by
// their revision and change nothing). When the history it needs is
// compacted away it takes a new snapshot and rebuilds. New starts it when
// the Allocator was built WithFollow; it returns when ctx ends.
//
// Applying an event is idempotent and never undoes a newer state: every
// record carries the revision of the commit that wrote it, and an event
// older than what a pool or allocation already shows is dropped.
func (s *Allocator) Follow(ctx context.Context) {
	from := s.rev
	for ctx.Err() == nil {
		events, err := s.store.WatchCursor(ctx, from, "")
		if err == nil {
			from, err = s.apply(ctx, events, from)
			events.Close()
		}
		switch {
		case ctx.Err() != nil, errors.Is(err, store.ErrClosed):
			return
		case errors.Is(err, store.ErrCompacted):
			s.logger.Warn("the store no longer holds the history the follower needs; rebuilding from a snapshot", "revision", from, "err", err)
			s.rebuilds.Add(1)
			rev, rerr := s.rebuild(ctx)
			if rerr != nil {
				s.logger.Error("rebuild from snapshot", "err", rerr)
				sleep(ctx, s.followRetry)
				continue
			}
			from = rev
		case errors.Is(err, store.ErrTooSlow):
			// What it missed is still kept, or an etcd watch of its
			// own reaches back to it: no reason to wait.
			s.logger.Warn("follower fell behind the store's watch; resuming where it was", "revision", from, "err", err)
			s.watchRestarts.Add(1)
		case err != nil:
			s.logger.Warn("store watch ended; resuming", "revision", from, "err", err)
			s.watchRestarts.Add(1)
			sleep(ctx, s.followRetry)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// apply handles the watch's events until it ends and returns the last
// revision applied and the error that ended it.
func (s *Allocator) apply(ctx context.Context, events store.Cursor, from int64) (int64, error) {
	buf := make([]store.Event, 0, followBatch)
	for {
		var err error
		buf, err = events.Next(ctx, buf[:0])
		for _, ev := range buf {
			s.applyEvent(ev)
			from = ev.Revision
		}
		if err != nil {
			return from, err
		}
	}
}

func (s *Allocator) applyEvent(ev store.Event) {
	if ev.Last {
		// Only once the whole commit is in: Sync's waiters read next.
		defer s.followed.advance(ev.Revision)
	}
	switch ev.Type {
	case store.EventPutPool:
		s.applyPutPool(*ev.Pool)
	case store.EventDeletePool:
		s.applyDeletePool(*ev.Pool, ev.Revision)
	case store.EventPutAllocation:
		s.withPool(ev.Allocation.Pool, func(ps *poolState) { s.applyPutAllocation(ps, *ev.Allocation) })
	case store.EventDeleteAllocation:
		s.withPool(ev.Allocation.Pool, func(ps *poolState) { s.applyDeleteAllocation(ps, *ev.Allocation) })
	case store.EventPutQuarantine:
		q := *ev.Quarantine
		s.withPool(q.Pool, func(ps *poolState) {
			// Already quarantined by the release itself, or handed out
			// again since: either way nothing to do.
			_ = ps.index.Quarantine(q.Address, q.Until)
		})
	}
}

// withPool runs fn under the pool's lock, if the pool exists.
func (s *Allocator) withPool(id string, fn func(ps *poolState)) {
	s.mu.RLock()
	ps, ok := s.pools[id]
	s.mu.RUnlock()
	if !ok {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if !ps.deleted {
		fn(ps)
	}
}

func (s *Allocator) applyPutPool(p store.Pool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps, ok := s.pools[p.ID]
	if !ok {
		fresh, err := newPoolState(p, 0)
		if err != nil {
			s.logger.Error("pool from the store not applied", "pool", p.ID, "err", err)
			return
		}
		s.scatter(fresh)
		s.pools[p.ID] = fresh
		s.cidrs.replace(p.ID, nil, p.CIDRs)
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p.Revision <= ps.rec.Revision {
		return
	}
	if p.Deleting && !ps.rec.Deleting {
		// Another replica began to delete the pool: it changes nothing
		// else (markDeleting), and no index is worth rebuilding for the
		// allocations it is about to release.
		ps.rec = p
		return
	}
	// Another replica updated the pool: rebuild its index with every
	// allocation restored, as UpdatePool does. Reservations in flight
	// here carry the old pool revision in their transaction and fail.
	fresh, err := newPoolState(p, 0)
	if err != nil {
		s.logger.Error("pool update from the store not applied", "pool", p.ID, "err", err)
		return
	}
	ps.held.Addrs(func(addr netip.Addr) bool {
		if err := fresh.index.Restore(addr); err != nil {
			s.logger.Warn("restore allocation in updated pool", "pool", p.ID, "address", addr, "err", err)
		}
		return true
	})
	fresh.index.CopyQuarantine(ps.index)
	s.cidrs.replace(p.ID, ps.rec.CIDRs, p.CIDRs)
	ps.rec, ps.index = p, fresh.index
	s.scatter(ps)
}

func (s *Allocator) applyDeletePool(p store.Pool, rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps, ok := s.pools[p.ID]
	if !ok {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.rec.Revision >= rev {
		return // created again since
	}
	ps.deleted = true
	delete(s.pools, p.ID)
	s.cidrs.replace(p.ID, ps.rec.CIDRs, nil)
	if ps.rec.Deleting {
		// A large pool, released in chunks (see drain): what it held
		// is garbage now.
		go releaseMemory()
	}
}

// applyPutAllocation records an allocation committed by any replica. The
// caller holds ps.mu.
func (s *Allocator) applyPutAllocation(ps *poolState, a store.Allocation) {
	cur, held := ps.held.Revision(a.Address)
	if held && cur >= a.Revision {
		return
	}
	// The same address under a newer record (a rebind to a new uid)
	// replaces the old record and its owner's link.
	if !held {
		if err := ps.index.Restore(a.Address); err != nil {
			// Taken in the index already: this replica's own reservation of
			// the same address, in flight. If it is this commit, the record
			// is the one the reservation is about to put; if another
			// replica's, the reservation's transaction fails, and the
			// failure must not free the address (see allocateOnce).
			s.logger.Debug("followed allocation already taken in the index", "pool", a.Pool, "address", a.Address, "err", err)
		}
	}
	s.put(ps, &a)
}

// applyDeleteAllocation forgets a released allocation. The caller holds
// ps.mu.
func (s *Allocator) applyDeleteAllocation(ps *poolState, a store.Allocation) {
	cur, held := ps.held.Revision(a.Address)
	if !held || (a.Revision != 0 && cur > a.Revision) {
		return // gone already, or allocated again since
	}
	ps.held.Delete(a.Address)
	if err := ps.index.Release(a.Address, s.now()); err != nil {
		s.logger.Warn("index release of a followed delete", "pool", a.Pool, "address", a.Address, "err", err)
	}
}

// rebuild replaces the whole in-memory state with a new snapshot of the
// store and returns its revision. Requests in flight finish against the
// pool states they hold; their commits reach the new state through the
// watch that follows from the snapshot.
func (s *Allocator) rebuild(ctx context.Context) (int64, error) {
	fresh, err := load(ctx, s.store, s.now, s.logger)
	if err != nil {
		return 0, fmt.Errorf("rebuild: %w", err)
	}
	// Runs after the unlock: the old state is garbage then.
	defer releaseMemory()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ps := range s.pools {
		if _, ok := fresh.pools[id]; !ok {
			ps.mu.Lock()
			ps.deleted = true
			ps.mu.Unlock()
		}
	}
	for _, ps := range fresh.pools {
		s.scatter(ps)
	}
	s.pools, s.cidrs = fresh.pools, nil
	s.followed.advance(fresh.rev)
	return fresh.rev, nil
}

// scatter puts a pool's next-free cursor at a random address of the pool
// when other replicas share the store, so the replicas' searches start
// far apart instead of all proposing the pool's lowest free address and
// losing each other's transactions. Alone on its store a replica keeps the
// cursor where it is. The caller holds ps.mu (or owns ps).
func (s *Allocator) scatter(ps *poolState) {
	if !s.follow {
		return
	}
	cidrs := ps.index.CIDRs()
	if len(cidrs) == 0 {
		return
	}
	if err := ps.index.SetCursor(randomAddr(cidrs[rand.IntN(len(cidrs))])); err != nil {
		s.logger.Warn("scatter cursor", "pool", ps.rec.ID, "err", err)
	}
}

// randomAddr is a uniformly random address of p (of its last 64 bits, for
// a larger IPv6 prefix).
func randomAddr(p netip.Prefix) netip.Addr {
	host := p.Addr().BitLen() - p.Bits()
	if host == 0 {
		return p.Addr()
	}
	off := rand.Uint64()
	if host < 64 {
		off &= 1<<host - 1
	}
	b := p.Addr().As16()
	binary.BigEndian.PutUint64(b[8:], binary.BigEndian.Uint64(b[8:])|off)
	a := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		a = a.Unmap()
	}
	return a
}

// syncLimit bounds how long Sync waits for the follower.
const syncLimit = 2 * time.Second

// Sync waits until the in-memory state holds every commit the store held
// when it was called, by any replica, so that a read made after it
// includes every change acknowledged before it: a replica's answers are
// then as fresh as the store's. It does nothing for a Allocator that does
// not follow its store (all commits are its own). It fails when the store
// cannot tell its revision (ErrStoreUnavailable) or the follower does not
// reach it within syncLimit (ErrBehind): the caller is better served by
// another replica than by an answer that may be stale.
func (s *Allocator) Sync(ctx context.Context) error {
	if !s.follow {
		return nil
	}
	ctx, span := tracer.Start(ctx, "allocation.Sync")
	defer span.End()
	err := s.sync(ctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

func (s *Allocator) sync(ctx context.Context) error {
	rev, err := s.store.Revision(ctx)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return fmt.Errorf("read the store's revision: %w: %w", decide.ErrStoreUnavailable, err)
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int64("plexus.store.revision", rev))
	return s.applied(ctx, rev)
}

// applied waits until the in-memory state holds every commit up to rev
// (at once for a Allocator alone on its store, which makes every commit
// itself), or fails with ErrBehind after syncLimit.
func (s *Allocator) applied(ctx context.Context, rev int64) error {
	if !s.follow {
		return nil
	}
	err := s.followed.wait(ctx, rev, syncLimit)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return fmt.Errorf("applied revision %d, the store is at %d: %w", s.followed.load(), rev, decide.ErrBehind)
	}
	return nil
}

// progress is the revision the follower has applied, with a wait for it
// to reach a given one.
type progress struct {
	mu  sync.Mutex
	rev int64
	// moved is closed (and cleared) when rev moves; made by the first
	// waiter, so advancing costs nothing while nobody waits.
	moved chan struct{}
}

func (p *progress) advance(rev int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rev <= p.rev {
		return
	}
	p.rev = rev
	if p.moved != nil {
		close(p.moved)
		p.moved = nil
	}
}

func (p *progress) load() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rev
}

// wait returns nil once rev is reached, or an error when ctx ends or limit
// passes first.
func (p *progress) wait(ctx context.Context, rev int64, limit time.Duration) error {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		p.mu.Lock()
		if p.rev >= rev {
			p.mu.Unlock()
			return nil
		}
		if p.moved == nil {
			p.moved = make(chan struct{})
		}
		moved := p.moved
		p.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return context.DeadlineExceeded
		}
	}
}
