package etcd

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// Every commit that puts or deletes a pool also puts pools-changed
// (keys.go), so CondPoolsUnchangedSince is one compare of that key's mod
// revision, where a compare over the pool keys has etcd read every one of
// them (11 ms beside 10,000 pools). The key stands for the pools only
// while every writer puts it, and versions before it did not: a replica
// of such a version, still running while the others roll, would create
// pools the key does not show.
//
// So a store trusts the key only as far as it can tell:
//   - when a commit first needs the condition, the key must be at least
//     as new as the newest pool key (the latest pool put carried it);
//   - every pool change its watches deliver after that must have put it
//     too (a read of the key at the change's revision).
//
// When the first fails (the store was last written by an older version)
// the commit compares every pool key, and the next guarded commit asks
// again: once a pool change of this version has put the key, it is
// trusted. When the second fails (an older version writes while this one
// runs) the store compares every pool key for the rest of its life, with
// a warning.
type poolMarks struct {
	// state is marksUnknown, marksUntrusted, marksTrusted or
	// marksDistrusted.
	state atomic.Int32
	// since is the revision trust was decided at: pool changes up to it
	// are accounted for. seen is the latest pool change queued for a
	// check, so several watches deliver each one once.
	since, seen atomic.Int64

	mu      sync.Mutex
	queue   []int64
	running bool
}

const (
	marksUnknown int32 = iota
	marksUntrusted
	marksTrusted
	marksDistrusted
)

// maxMarkChecks bounds the pool changes waiting for their check; beyond
// it (pools created by the thousand in a burst) the rest go unchecked.
const maxMarkChecks = 4096

// markCheckTimeout bounds one read of the key.
const markCheckTimeout = 5 * time.Second

// trustsMarks reports whether conds' CondPoolsUnchangedSince, if any, can
// be compared on pools-changed alone, deciding it at such a commit until
// it is trusted. A failed read decides nothing: that commit compares the
// pools.
func (s *Store) trustsMarks(ctx context.Context, conds []store.Cond) bool {
	needed := false
	for _, c := range conds {
		needed = needed || c.Kind == store.CondPoolsUnchangedSince
	}
	if !needed {
		return false
	}
	was := s.marks.state.Load()
	switch was {
	case marksTrusted:
		return true
	case marksDistrusted:
		return false
	}
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.k.poolsChanged()),
		clientv3.OpGet(s.k.pools(), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1),
			clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend)),
	).Commit()
	if err != nil {
		return false
	}
	marker, pools := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	if len(pools) == 0 || len(marker) == 1 && marker[0].ModRevision >= pools[0].ModRevision {
		s.marks.since.Store(resp.Header.Revision)
		s.marks.state.CompareAndSwap(was, marksTrusted)
		return s.marks.state.Load() == marksTrusted
	}
	if s.marks.state.CompareAndSwap(marksUnknown, marksUntrusted) {
		s.logger.Info("etcd store: the latest pool change was made by an older version, without pools-changed; new pools are checked against every pool key until a pool change puts it",
			"revision", resp.Header.Revision, "pool_revision", pools[0].ModRevision)
	}
	return false
}

// sawPoolChange queues a check that the commit at rev, which put or
// deleted a pool, put pools-changed too.
func (s *Store) sawPoolChange(rev int64) {
	m := &s.marks
	if m.state.Load() != marksTrusted || rev <= m.since.Load() {
		return
	}
	for {
		seen := m.seen.Load()
		if rev <= seen {
			return
		}
		if m.seen.CompareAndSwap(seen, rev) {
			break
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.queue) >= maxMarkChecks {
		s.logger.Debug("etcd store: too many pool changes waiting for their check; one goes unchecked", "revision", rev)
		return
	}
	m.queue = append(m.queue, rev)
	if m.running {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	m.running = true
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		s.checkMarks()
	}()
}

// checkMarks reads pools-changed at the revision of each queued pool
// change until none is left.
func (s *Store) checkMarks() {
	m := &s.marks
	for {
		m.mu.Lock()
		revs := m.queue
		m.queue = nil
		if len(revs) == 0 || s.isClosed() {
			m.running = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		for _, rev := range revs {
			if m.state.Load() != marksTrusted || s.isClosed() {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), markCheckTimeout)
			resp, err := s.cli.Get(ctx, s.k.poolsChanged(), clientv3.WithRev(rev))
			cancel()
			if err != nil {
				// Compacted already, or etcd away: this one cannot be
				// told, and the next may.
				s.logger.Debug("etcd store: could not check a pool change for pools-changed", "revision", rev, "err", err)
				continue
			}
			if len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != rev {
				s.distrustMarks(rev)
			}
		}
	}
}

// distrustMarks turns the compare of every pool key back on for good.
func (s *Store) distrustMarks(rev int64) {
	if s.marks.state.Swap(marksDistrusted) == marksDistrusted {
		return
	}
	s.logger.Warn("etcd store: a pool change did not put pools-changed, so a replica of a version before it writes to this store; new pools are checked against every pool key from now on (upgrade through the version before this one: docs/deploy.md, section 9)",
		"revision", rev)
}

// ComparesEveryPoolKey reports whether the store checks
// CondPoolsUnchangedSince over every pool key, having found a pool change
// made without pools-changed.
func (s *Store) ComparesEveryPoolKey() bool {
	st := s.marks.state.Load()
	return st == marksUntrusted || st == marksDistrusted
}
