package storetest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// Compactor drops a store's event history up to rev, as etcd's compaction
// does. Every store implements it so the suite can reach ErrCompacted.
type Compactor interface {
	Compact(ctx context.Context, rev int64) error
}

// Option configures Run.
type Option func(*config)

type config struct {
	reopen          func(t *testing.T, s store.Store) store.Store
	history         int
	sharedRevisions bool
	pastRevisions   bool
	retention       time.Duration
	openRetention   func(t *testing.T) store.Store
}

// WithReopen runs the persistence tests: reopen closes s and opens the
// same durable store again.
func WithReopen(reopen func(t *testing.T, s store.Store) store.Store) Option {
	return func(c *config) { c.reopen = reopen }
}

// WithHistory tells the suite that open keeps only the last events of
// history, so a watcher that does not read while many more commits happen
// must end with an error wrapping store.ErrCompacted.
func WithHistory(events int) Option {
	return func(c *config) { c.history = events }
}

// WithSharedRevisions tells the suite that the store may give commits made
// at once one revision (store.Store allows it); the suite then does not
// require a revision of its own for each commit.
func WithSharedRevisions() Option {
	return func(c *config) { c.sharedRevisions = true }
}

// WithPastRevisions tells the suite that the store keeps the revisions
// before its current one until it compacts them (etcd), so it reads pages
// at a past revision; a store without (bolt) must refuse one with
// store.ErrCompacted.
func WithPastRevisions() Option {
	return func(c *config) { c.pastRevisions = true }
}

// WithRequestRetention runs the request retention test: open returns a
// fresh, empty store that keeps request records for retention instead of
// store.DefaultRequestRetention, which no test can wait out. The test
// takes about twice retention; etcd cannot keep a record for less than
// about two seconds.
func WithRequestRetention(retention time.Duration, open func(t *testing.T) store.Store) Option {
	return func(c *config) { c.retention, c.openRetention = retention, open }
}

// Run runs the conformance suite. open returns a fresh, empty store and
// arranges for it to be closed when the test ends.
func Run(t *testing.T, open func(t *testing.T) store.Store, opts ...Option) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	tests := []struct {
		name string
		run  func(t *testing.T, s store.Store)
	}{
		{"EmptyStore", testEmptyStore},
		{"RoundTrip", testRoundTrip},
		{"SnapshotPool", testSnapshotPool},
		{"Conditions", testConditions},
		{"PoolsUnchangedSince", testPoolsUnchangedSince},
		{"RangeFree", testRangeFree},
		{"FailedConditionWritesNothing", testFailedConditionWritesNothing},
		{"RevisionsIncreaseByOne", testRevisionsIncreaseByOne},
		{"AllocationEtag", testAllocationEtag},
		{"OwnerIndex", testOwnerIndex},
		{"DeletePoolCascades", testDeletePoolCascades},
		{"PutAllocationClearsQuarantine", testPutAllocationClearsQuarantine},
		{"DeleteMissingIsNoOp", testDeleteMissingIsNoOp},
		{"ManyReleases", testManyReleases},
		{"Requests", testRequests},
		{"InvalidTxn", testInvalidTxn},
		{"CanceledContext", testCanceledContext},
		{"SnapshotIsConsistent", testSnapshotIsConsistent},
		{"WatchFromZero", testWatchFromZero},
		{"WatchFromRevision", testWatchFromRevision},
		{"WatchFromFutureRevision", testWatchFromFutureRevision},
		{"WatchCompacted", testWatchCompacted},
		{"WatchCancel", testWatchCancel},
		{"ConcurrentAllocationAbsent", func(t *testing.T, s store.Store) { testConcurrentAllocationAbsent(t, s, cfg.sharedRevisions) }},
		{"ConcurrentOwnerAbsent", testConcurrentOwnerAbsent},
		{"ConcurrentAllocateRelease", testConcurrentAllocateRelease},
		{"SlowWatcher", func(t *testing.T, s store.Store) { testSlowWatcher(t, s, cfg.history) }},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, open(t)) })
	}
	t.Run("PageAllocations", func(t *testing.T) { testPageAllocations(t, open(t), cfg.pastRevisions) })
	t.Run("StreamSnapshot", func(t *testing.T) { testStreamSnapshot(t, open(t)) })
	if cfg.openRetention != nil {
		t.Run("RequestRetention", func(t *testing.T) { testRequestRetention(t, cfg.openRetention(t), cfg.retention) })
	}
	if cfg.reopen != nil {
		t.Run("Persistence", func(t *testing.T) { testPersistence(t, open(t), cfg.reopen) })
		t.Run("PersistenceOfDeletes", func(t *testing.T) { testPersistenceOfDeletes(t, open(t), cfg.reopen) })
	}
}

// Fixed times with nanoseconds, so an encoding that drops precision
// fails.
var (
	t0 = time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)
	t1 = time.Date(2025, 3, 5, 1, 2, 3, 987654321, time.UTC)
)

func newPool(id string, cidrs ...string) *store.Pool {
	return &store.Pool{
		ID:           id,
		CIDRs:        cidrs,
		Reserved:     []string{"10.0.0.0-10.0.0.9"},
		ReuseDelay:   90 * time.Second,
		Labels:       map[string]string{"team": "net", "tier": "gold"},
		AllowOverlap: true,
		CreateTime:   t0,
		UpdateTime:   t1,
	}
}

func owner(name, uid string) decide.Owner {
	return decide.Owner{Cluster: "east", Kind: "Pod", Namespace: "default", Name: name, UID: uid}
}

func newAlloc(pool, addr, name string) *store.Allocation {
	return &store.Allocation{
		Pool:       pool,
		Address:    netip.MustParseAddr(addr),
		Owner:      owner(name, "uid-"+name),
		CreateTime: t0,
		RequestID:  "req-" + name,
	}
}

func putPool(p *store.Pool) store.Op { return store.Op{Kind: store.OpPutPool, Pool: p} }

func putAlloc(a *store.Allocation) store.Op {
	return store.Op{Kind: store.OpPutAllocation, Allocation: a}
}

func delAlloc(pool, addr string) store.Op {
	return store.Op{Kind: store.OpDeleteAllocation, PoolID: pool, Address: netip.MustParseAddr(addr)}
}

func delPool(pool string) store.Op { return store.Op{Kind: store.OpDeletePool, PoolID: pool} }

func putQuarantine(pool, addr string) store.Op {
	return store.Op{Kind: store.OpPutQuarantine, Quarantine: &store.Quarantine{
		Pool: pool, Address: netip.MustParseAddr(addr), Until: t1,
	}}
}

func allocAbsent(pool, addr string) store.Cond {
	return store.Cond{Kind: store.CondAllocationAbsent, Pool: pool, Address: netip.MustParseAddr(addr)}
}

func ownerAbsent(pool string, o decide.Owner) store.Cond {
	return store.Cond{Kind: store.CondOwnerAbsent, Pool: pool, OwnerKey: o.Key()}
}

func txn(ops ...store.Op) store.Txn { return store.Txn{Ops: ops} }

func commit(t *testing.T, s store.Store, tx store.Txn) int64 {
	t.Helper()
	rev, err := s.Commit(t.Context(), tx)
	require.NoError(t, err)
	return rev
}

func requireConflict(t *testing.T, s store.Store, tx store.Txn) {
	t.Helper()
	before := snapshot(t, s)
	_, err := s.Commit(t.Context(), tx)
	require.ErrorIs(t, err, store.ErrConflict)
	require.Equal(t, before, snapshot(t, s), "a failed transaction must write nothing")
}

// holds reports whether cond holds, by committing a txn guarded by it
// that changes nothing.
func holds(t *testing.T, s store.Store, cond store.Cond) bool {
	t.Helper()
	_, err := s.Commit(t.Context(), store.Txn{
		Conds: []store.Cond{cond},
		Ops:   []store.Op{delAlloc("marker", "192.0.2.1")}, // deletes nothing
	})
	if errors.Is(err, store.ErrConflict) {
		return false
	}
	require.NoError(t, err)
	return true
}

func snapshot(t *testing.T, s store.Store) *store.Snapshot {
	t.Helper()
	snap, err := s.Snapshot(t.Context())
	require.NoError(t, err)
	return normSnapshot(snap)
}

// normSnapshot makes snapshots of different stores comparable with
// require.Equal: times in UTC without a monotonic reading, empty
// collections as nil.
func normSnapshot(s *store.Snapshot) *store.Snapshot {
	out := &store.Snapshot{Revision: s.Revision}
	for _, p := range s.Pools {
		out.Pools = append(out.Pools, normPool(p))
	}
	for _, a := range s.Allocations {
		out.Allocations = append(out.Allocations, normAlloc(a))
	}
	for _, q := range s.Quarantine {
		q.Until = normTime(q.Until)
		out.Quarantine = append(out.Quarantine, q)
	}
	return out
}

func normPool(p store.Pool) store.Pool {
	p.CreateTime, p.UpdateTime = normTime(p.CreateTime), normTime(p.UpdateTime)
	if len(p.CIDRs) == 0 {
		p.CIDRs = nil
	}
	if len(p.Reserved) == 0 {
		p.Reserved = nil
	}
	if len(p.Labels) == 0 {
		p.Labels = nil
	}
	return p
}

func normAlloc(a store.Allocation) store.Allocation {
	a.CreateTime = normTime(a.CreateTime)
	return a
}

func normTime(t time.Time) time.Time { return t.UTC().Round(0) }

// describe renders an event for readable comparisons.
func describe(ev store.Event) string {
	switch {
	case ev.Err != nil:
		return "err: " + ev.Err.Error()
	case ev.Type == store.EventPutPool || ev.Type == store.EventDeletePool:
		if ev.Pool == nil {
			return fmt.Sprintf("%d type=%d pool=<nil>", ev.Revision, ev.Type)
		}
		return fmt.Sprintf("%d type=%d pool=%s rev=%d", ev.Revision, ev.Type, ev.Pool.ID, ev.Pool.Revision)
	case ev.Type == store.EventPutAllocation || ev.Type == store.EventDeleteAllocation:
		if ev.Allocation == nil {
			return fmt.Sprintf("%d type=%d allocation=<nil>", ev.Revision, ev.Type)
		}
		a := ev.Allocation
		return fmt.Sprintf("%d type=%d alloc=%s/%s owner=%s rev=%d", ev.Revision, ev.Type, a.Pool, a.Address, a.Owner.Name, a.Revision)
	case ev.Type == store.EventPutQuarantine:
		if ev.Quarantine == nil {
			return fmt.Sprintf("%d type=%d quarantine=<nil>", ev.Revision, ev.Type)
		}
		return fmt.Sprintf("%d type=%d quarantine=%s/%s", ev.Revision, ev.Type, ev.Quarantine.Pool, ev.Quarantine.Address)
	}
	return fmt.Sprintf("%d type=%d", ev.Revision, ev.Type)
}

const eventWait = 5 * time.Second

// receive reads exactly n events, failing on an Err event, a closed
// channel or a timeout.
func receive(t *testing.T, ch <-chan store.Event, n int) []store.Event {
	t.Helper()
	var got []store.Event
	timeout := time.After(eventWait)
	for len(got) < n {
		select {
		case ev, ok := <-ch:
			require.True(t, ok, "watch channel closed after %d of %d events", len(got), n)
			require.NoError(t, ev.Err, "watch ended after %d of %d events", len(got), n)
			got = append(got, ev)
		case <-timeout:
			require.FailNow(t, "timed out waiting for events", "got %d of %d", len(got), n)
		}
	}
	return got
}

// requireQuiet fails if ch delivers anything within a short while.
func requireQuiet(t *testing.T, ch <-chan store.Event) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if ok {
			require.FailNow(t, "unexpected event", describe(ev))
		}
		require.FailNow(t, "watch channel closed unexpectedly")
	case <-time.After(50 * time.Millisecond):
	}
}

func describeAll(evs []store.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = describe(ev)
	}
	return out
}

// Watch reads s's watch from rev (Store.WatchCursor, every pool) through
// a channel, as Pump does.
func Watch(ctx context.Context, s store.Store, from int64) (<-chan store.Event, error) {
	c, err := s.WatchCursor(ctx, from, "")
	if err != nil {
		return nil, err
	}
	return Pump(ctx, c), nil
}

// Sizes of what Pump holds: the channel's buffer and the events it reads
// from the cursor at a time.
const (
	PumpBuffer = 256
	PumpBatch  = 128
)

// Pump copies c's events into the channel it returns until ctx ends or
// after the event that carries the error ending the watch (Event.Err),
// then closes the channel and the cursor: a test reads a watch as a
// channel, with select and range.
func Pump(ctx context.Context, c store.Cursor) <-chan store.Event {
	out := make(chan store.Event, PumpBuffer)
	go func() {
		defer close(out)
		defer c.Close()
		batch := make([]store.Event, 0, PumpBatch)
		for {
			var err error
			batch, err = c.Next(ctx, batch[:0])
			for _, ev := range batch {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				if ctx.Err() == nil {
					select {
					case out <- store.Event{Err: err}:
					case <-ctx.Done():
					}
				}
				return
			}
		}
	}()
	return out
}
