package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	bbolt "go.etcd.io/bbolt"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/internal/storetest"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/internal/record"
)

func openTemp(t *testing.T, opts ...Option) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "allocator.db"), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func reopen(t *testing.T, s store.Store, opts ...Option) store.Store {
	t.Helper()
	b := s.(*Store)
	require.NoError(t, b.Close())
	s2, err := Open(b.Path(), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s2.Close() })
	return s2
}

func TestConformance(t *testing.T) {
	const history = 256
	storetest.Run(t, func(t *testing.T) store.Store {
		return openTemp(t, WithHistory(history))
	}, storetest.WithHistory(history), storetest.WithReopen(func(t *testing.T, s store.Store) store.Store {
		return reopen(t, s, WithHistory(history))
	}), storetest.WithRequestRetention(testRetention, func(t *testing.T) store.Store {
		return openTemp(t, withRequestRetention(testRetention))
	}))
}

func TestConformanceDefaultOptions(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t) })
}

func alloc(pool, addr, name string) *store.Allocation {
	return &store.Allocation{Pool: pool, Address: netip.MustParseAddr(addr), Owner: decide.Owner{Kind: "Pod", Namespace: "ns", Name: name}}
}

func putAlloc(a *store.Allocation) store.Op {
	return store.Op{Kind: store.OpPutAllocation, Allocation: a}
}

// enqueue hands txns to the committer as one batch, the way concurrent
// Commits arriving during a write would be, and waits for the results.
func enqueue(t *testing.T, s *Store, ctxs []context.Context, txns []store.Txn) []*pending {
	t.Helper()
	ps := make([]*pending, len(txns))
	for i, tx := range txns {
		require.NoError(t, tx.Validate())
		ps[i] = &pending{ctx: ctxs[i], txn: tx, done: make(chan struct{})}
	}
	s.qmu.Lock()
	s.queue = append(s.queue, ps...)
	s.qmu.Unlock()
	s.kick <- struct{}{}
	for _, p := range ps {
		<-p.done
	}
	return ps
}

// TestBatchEvaluatesInOrder: within one batch, each transaction's
// conditions see the transactions before it; a failed one changes nothing
// and takes no revision.
func TestBatchEvaluatesInOrder(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	base, err := s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: "p"}}}})
	require.NoError(t, err)
	before := s.Stats()
	addr := netip.MustParseAddr("10.0.0.1")
	absent := store.Cond{Kind: store.CondAllocationAbsent, Pool: "p", Address: addr}
	canceled, cancel := context.WithCancel(ctx)
	cancel()

	ps := enqueue(t, s,
		[]context.Context{ctx, ctx, ctx, canceled, ctx, ctx},
		[]store.Txn{
			{Conds: []store.Cond{absent}, Ops: []store.Op{putAlloc(alloc("p", "10.0.0.1", "a"))}},
			{Conds: []store.Cond{absent}, Ops: []store.Op{putAlloc(alloc("p", "10.0.0.1", "b"))}},
			{
				Conds: []store.Cond{{Kind: store.CondAllocationRevision, Pool: "p", Address: addr, Revision: base + 1}},
				Ops:   []store.Op{{Kind: store.OpDeleteAllocation, PoolID: "p", Address: addr}},
			},
			{Ops: []store.Op{putAlloc(alloc("p", "10.0.0.9", "canceled"))}},
			{Conds: []store.Cond{absent}, Ops: []store.Op{putAlloc(alloc("p", "10.0.0.1", "d"))}},
			{Conds: []store.Cond{absent}, Ops: []store.Op{putAlloc(alloc("p", "10.0.0.1", "e"))}},
		})
	revs := make([]int64, len(ps))
	for i, p := range ps {
		revs[i] = p.rev
	}
	require.Equal(t, []int64{base + 1, 0, base + 2, 0, base + 3, 0}, revs)
	require.NoError(t, ps[0].err)
	require.ErrorIs(t, ps[1].err, store.ErrConflict)
	require.NoError(t, ps[2].err)
	require.ErrorIs(t, ps[3].err, context.Canceled)
	require.NoError(t, ps[4].err)
	require.ErrorIs(t, ps[5].err, store.ErrConflict)

	after := s.Stats()
	require.Equal(t, before.Batches+1, after.Batches, "one batch, one disk write")
	require.Equal(t, before.Txns+5, after.Txns)
	require.Equal(t, before.Conflicts+2, after.Conflicts)

	snap, err := s.Snapshot(ctx)
	require.NoError(t, err)
	require.Equal(t, base+3, snap.Revision)
	require.Len(t, snap.Allocations, 1)
	require.Equal(t, "d", snap.Allocations[0].Owner.Name)

	ch, err := storetest.Watch(ctx, s, base)
	require.NoError(t, err)
	var got []string
	for range 3 {
		ev := <-ch
		got = append(got, fmt.Sprint(ev.Revision, " ", ev.Type, " ", ev.Allocation.Owner.Name))
	}
	require.Equal(t, []string{
		fmt.Sprint(base+1, " ", store.EventPutAllocation, " a"),
		fmt.Sprint(base+2, " ", store.EventDeleteAllocation, " a"),
		fmt.Sprint(base+3, " ", store.EventPutAllocation, " d"),
	}, got)
}

// TestBatchOfOnlyConflictsWritesNothing: a batch in which every
// transaction fails takes no disk write.
func TestBatchOfOnlyConflictsWritesNothing(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	_, err := s.Commit(ctx, store.Txn{Ops: []store.Op{putAlloc(alloc("p", "10.0.0.1", "a"))}})
	require.NoError(t, err)
	before := s.Stats()
	held := store.Cond{Kind: store.CondAllocationAbsent, Pool: "p", Address: netip.MustParseAddr("10.0.0.1")}
	ps := enqueue(t, s, []context.Context{ctx, ctx}, []store.Txn{
		{Conds: []store.Cond{held}, Ops: []store.Op{putAlloc(alloc("p", "10.0.0.1", "b"))}},
		{Conds: []store.Cond{held}, Ops: []store.Op{putAlloc(alloc("p", "10.0.0.1", "c"))}},
	})
	for _, p := range ps {
		require.ErrorIs(t, p.err, store.ErrConflict)
	}
	require.Equal(t, before.Batches, s.Stats().Batches)
}

// TestBadRecordFailsOnlyItsTransaction: when a batch cannot be written (a
// corrupt record makes one transaction fail), the others still commit.
func TestBadRecordFailsOnlyItsTransaction(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	bad := netip.MustParseAddr("10.0.0.66")
	// The indexes are built (in the background) before the bad record
	// goes in behind their back.
	require.NoError(t, s.Ready(ctx))
	require.NoError(t, s.db.Update(func(tx *bbolt.Tx) error {
		rec := record.Encoder(nil).Str("p").Addr(bad)
		return tx.Bucket(bucketRecords).Put(recordKey(1000), append(rec, record.Version, 0xff))
	}))
	s.index.put("p", bad, 1000) // the committer is idle
	ps := enqueue(t, s, []context.Context{ctx, ctx, ctx}, []store.Txn{
		{Ops: []store.Op{putAlloc(alloc("p", "10.0.0.1", "a"))}},
		{Ops: []store.Op{{Kind: store.OpDeleteAllocation, PoolID: "p", Address: netip.MustParseAddr("10.0.0.66")}}},
		{Ops: []store.Op{putAlloc(alloc("p", "10.0.0.2", "c"))}},
	})
	require.NoError(t, ps[0].err)
	require.ErrorContains(t, ps[1].err, "decode allocation p/10.0.0.66")
	require.NoError(t, ps[2].err)
	require.Equal(t, ps[0].rev+1, ps[2].rev)
}

// TestGroupCommit: concurrent committers share disk writes.
func TestGroupCommit(t *testing.T) {
	s := openTemp(t)
	const committers, each = 64, 20
	var wg sync.WaitGroup
	errs := make(chan error, committers*each)
	for g := range committers {
		wg.Go(func() {
			for i := range each {
				addr := netip.AddrFrom4([4]byte{10, 0, byte(g), byte(i)})
				if _, err := s.Commit(t.Context(), store.Txn{Ops: []store.Op{putAlloc(alloc("p", addr.String(), "x"))}}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	st := s.Stats()
	require.Equal(t, uint64(committers*each), st.Txns)
	require.Less(t, st.Batches, st.Txns/2, "64 concurrent committers should average well over one transaction per disk write")
	t.Logf("%d txns in %d batches", st.Txns, st.Batches)
}

// TestAllocationCount: the count kept in the meta bucket (a capacity hint
// for snapshots) follows puts, replacements and deletions.
func TestAllocationCount(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	commit := func(ops ...store.Op) {
		_, err := s.Commit(ctx, store.Txn{Ops: ops})
		require.NoError(t, err)
	}
	commit(putAlloc(alloc("p", "10.0.0.1", "a")), putAlloc(alloc("p", "10.0.0.2", "b")), putAlloc(alloc("q", "10.0.0.1", "a")))
	commit(putAlloc(alloc("p", "10.0.0.1", "z")))
	commit(store.Op{Kind: store.OpDeleteAllocation, PoolID: "p", Address: netip.MustParseAddr("10.0.0.2")},
		store.Op{Kind: store.OpDeleteAllocation, PoolID: "p", Address: netip.MustParseAddr("10.0.0.3")})
	commit(putAlloc(alloc("p", "10.0.0.3", "c")), putAlloc(alloc("p", "10.0.0.4", "d")))
	commit(store.Op{Kind: store.OpDeletePool, PoolID: "q"})

	s2 := reopen(t, s).(*Store)
	snap, err := s2.Snapshot(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Allocations, 3)
	require.Equal(t, int64(3), s2.allocs)
}

func TestOpenRefusesOtherFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	db, err := bbolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		return b.Put(keyFormat, []byte{fileFormat + 1})
	}))
	require.NoError(t, db.Close())
	_, err = Open(path)
	require.ErrorContains(t, err, "not a store file of this version")

	notBolt := filepath.Join(t.TempDir(), "garbage.db")
	require.NoError(t, os.WriteFile(notBolt, bytes.Repeat([]byte("plexus"), 4096), 0o600))
	_, err = Open(notBolt)
	require.Error(t, err)
}

// withLockTimeout sets how long Open waits for another process to
// release the file, for a test that cannot wait DefaultLockTimeout.
func withLockTimeout(d time.Duration) Option { return func(o *options) { o.lockTimeout = d } }

func TestOpenLockedFile(t *testing.T) {
	s := openTemp(t)
	_, err := Open(s.Path(), withLockTimeout(50*time.Millisecond))
	require.ErrorContains(t, err, "locked by another process")
}

// TestOwnerIndexCollision: the owner index keys by a hash of the owner
// key; an entry whose hash matches but whose allocation belongs to
// another owner (a collision) must not count as the owner.
func TestOwnerIndexCollision(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	other := alloc("p", "10.0.0.7", "other")
	_, err := s.Commit(ctx, store.Txn{Ops: []store.Op{putAlloc(other)}})
	require.NoError(t, err)
	wanted := decide.Owner{Kind: "Pod", Namespace: "ns", Name: "wanted"}
	// A colliding entry: the hash of the wanted owner, the address of
	// another's allocation. (Between commits, the committer is idle.)
	s.index.addOwner(s.index.ownerHash("p", wanted.Key()), other.Address)
	absent := func(o decide.Owner) bool { return ownerAbsent(t, s, "p", o) }
	require.True(t, absent(wanted))
	require.False(t, absent(other.Owner))

	// The real entry for the owner is found past the colliding one.
	_, err = s.Commit(ctx, store.Txn{Ops: []store.Op{putAlloc(&store.Allocation{Pool: "p", Address: netip.MustParseAddr("10.0.0.9"), Owner: wanted})}})
	require.NoError(t, err)
	require.False(t, absent(wanted))
}

// ownerAbsent tells whether CondOwnerAbsent holds for o in pool, by
// committing a transaction that changes nothing under it.
func ownerAbsent(t *testing.T, s *Store, pool string, o decide.Owner) bool {
	t.Helper()
	_, err := s.Commit(t.Context(), store.Txn{
		Conds: []store.Cond{{Kind: store.CondOwnerAbsent, Pool: pool, OwnerKey: o.Key()}},
		Ops:   []store.Op{{Kind: store.OpDeleteAllocation, PoolID: pool, Address: netip.MustParseAddr("10.9.9.9")}},
	})
	if errors.Is(err, store.ErrConflict) {
		return false
	}
	require.NoError(t, err)
	return true
}

// sortAllocations puts allocs in a snapshot's order with the snapshot's
// order type: by pool, then address.
func sortAllocations(allocs []store.Allocation) {
	var o order
	for i := range allocs {
		allocs[i].Pool = o.add([]byte(allocs[i].Pool), allocs[i].Address)
	}
	o.apply(allocs)
}

// TestSortAllocations: whatever order the records come in, a snapshot's
// allocations end up by pool, then address, as a comparison sort puts
// them.
func TestSortAllocations(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for round := range 200 {
		var as []store.Allocation
		for range r.IntN(60) {
			p := fmt.Sprintf("p%d", r.IntN(5))
			as = append(as, store.Allocation{Pool: p, Address: netip.AddrFrom4([4]byte{10, 0, byte(r.IntN(3)), byte(r.IntN(256))})})
		}
		if round%3 == 0 { // mostly in order within a pool, as records come
			slices.SortStableFunc(as, func(x, y store.Allocation) int { return x.Address.Compare(y.Address) })
		}
		want := slices.Clone(as)
		slices.SortStableFunc(want, compareAllocations)
		sortAllocations(as)
		require.Equal(t, want, as, "round %d", round)
	}
}

// TestSnapshotSharesOwnerPrefixes: in a snapshot, the cluster, kind and
// namespace of consecutive owners that are equal are the same strings
// (the allocator compares them by pointer first); different ones stay
// as they were.
func TestSnapshotSharesOwnerPrefixes(t *testing.T) {
	s := openTemp(t)
	other := alloc("p", "10.0.0.3", "c")
	other.Owner.Namespace = "other"
	_, err := s.Commit(t.Context(), store.Txn{Ops: []store.Op{
		putAlloc(alloc("p", "10.0.0.1", "a")), putAlloc(alloc("p", "10.0.0.2", "b")), putAlloc(other),
	}})
	require.NoError(t, err)
	snap, err := s.Snapshot(t.Context())
	require.NoError(t, err)
	require.Len(t, snap.Allocations, 3)
	a, b, c := snap.Allocations[0].Owner, snap.Allocations[1].Owner, snap.Allocations[2].Owner
	require.Equal(t, []string{"a", "b", "c"}, []string{a.Name, b.Name, c.Name})
	require.Same(t, unsafe.StringData(a.Namespace), unsafe.StringData(b.Namespace))
	require.Same(t, unsafe.StringData(a.Kind), unsafe.StringData(c.Kind))
	require.Equal(t, "other", c.Namespace)
	require.Equal(t, "ns", b.Namespace)
}

// compareAllocations orders allocations as a snapshot does: by pool, then
// address.
func compareAllocations(x, y store.Allocation) int {
	if c := strings.Compare(x.Pool, y.Pool); c != 0 {
		return c
	}
	return x.Address.Compare(y.Address)
}
