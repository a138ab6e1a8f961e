package allocation_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/allocation"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/internal/storetest"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
)

// fill allocates n addresses in pool, to owners pod-0 .. pod-(n-1), in
// batches that etcd takes at its default limits.
func fill(t *testing.T, svc *allocation.Allocator, pool string, n int) {
	t.Helper()
	for i := 0; i < n; i += 32 {
		var reqs []decide.Request
		for j := i; j < min(n, i+32); j++ {
			reqs = append(reqs, decide.Request{Pool: pool, Owner: owner(fmt.Sprint("pod-", j))})
		}
		_, err := svc.BatchAllocate(context.Background(), reqs, "")
		require.NoError(t, err)
	}
}

// revisions reads a store's events from after rev until the deletion of
// pool, and returns them grouped by revision, in order.
func revisions(t *testing.T, st store.Store, rev int64, pool string) [][]store.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := storetest.Watch(ctx, st, rev)
	require.NoError(t, err)
	var out [][]store.Event
	var cur []store.Event
	for ev := range ch {
		require.NoError(t, ev.Err)
		cur = append(cur, ev)
		if !ev.Last {
			continue
		}
		out = append(out, cur)
		if ev.Type == store.EventDeletePool && ev.Pool.ID == pool {
			return out
		}
		cur = nil
	}
	t.Fatalf("no deletion of pool %s in the store's events: %v", pool, ctx.Err())
	return nil
}

func TestForcedDeletionReleasesInChunks(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	svc, err := allocation.New(ctx, st, allocation.WithDeleteChunk(10))
	require.NoError(t, err)
	_, err = svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}})
	require.NoError(t, err)
	_, err = svc.CreatePool(ctx, "small", decide.PoolSpec{CIDRs: []string{"10.1.0.0/24"}})
	require.NoError(t, err)
	fill(t, svc, "p", 35)
	fill(t, svc, "small", 10)
	before := svc.Counters().Revision

	n, err := svc.DeletePool(ctx, "p", "", true, false)
	require.NoError(t, err)
	require.Equal(t, 35, n)
	revs := revisions(t, st, before, "p")

	// The pool marked deleting, 10, 10, 10 and 5 releases, then the
	// pool alone.
	require.Len(t, revs, 6)
	require.Len(t, revs[0], 1)
	require.Equal(t, store.EventPutPool, revs[0][0].Type)
	require.True(t, revs[0][0].Pool.Deleting)
	released := 0
	for i, want := range []int{10, 10, 10, 5} {
		require.Len(t, revs[1+i], want)
		for _, ev := range revs[1+i] {
			require.Equal(t, store.EventDeleteAllocation, ev.Type)
			released++
		}
	}
	require.Equal(t, 35, released)
	require.Len(t, revs[5], 1)
	require.Equal(t, store.EventDeletePool, revs[5][0].Type)

	_, err = svc.GetPool("p")
	require.ErrorIs(t, err, decide.ErrPoolNotFound)
	// Its range is free again, and a pool of no more than a chunk still
	// goes in one commit.
	_, err = svc.CreatePool(ctx, "q", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}})
	require.NoError(t, err)
	before = svc.Counters().Revision
	n, err = svc.DeletePool(ctx, "small", "", true, false)
	require.NoError(t, err)
	require.Equal(t, 10, n)
	revs = revisions(t, st, before, "small")
	require.Len(t, revs, 1)
	require.Len(t, revs[0], 11)
}

// failingReleases fails every commit that only releases allocations
// while on is set, as a store that fails in the middle of a forced
// deletion does.
type failingReleases struct {
	store.Store
	on *atomic.Bool
}

var errInjected = errors.New("injected store failure")

func (f failingReleases) Commit(ctx context.Context, txn store.Txn) (int64, error) {
	if f.on.Load() && len(txn.Ops) > 0 && txn.Ops[0].Kind == store.OpDeleteAllocation && len(txn.Conds) == 1 && txn.Conds[0].Kind == store.CondPoolRevision {
		return 0, errInjected
	}
	return f.Store.Commit(ctx, txn)
}

func TestInterruptedDeletionLeavesThePoolDeleting(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	var failing atomic.Bool
	st := failingReleases{Store: mem, on: &failing}
	svc, err := allocation.New(ctx, st, allocation.WithDeleteChunk(10))
	require.NoError(t, err)
	_, err = svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}})
	require.NoError(t, err)
	_, err = svc.CreatePool(ctx, "other", decide.PoolSpec{CIDRs: []string{"10.1.0.0/24"}})
	require.NoError(t, err)
	fill(t, svc, "p", 25)
	fill(t, svc, "other", 3)
	held, _, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("pod-3")})
	require.NoError(t, err)

	failing.Store(true)
	_, err = svc.DeletePool(ctx, "p", "", true, false)
	require.ErrorIs(t, err, errInjected)
	failing.Store(false)

	// refused asserts that the pool refuses what would hand out or
	// change anything, and keeps its allocations.
	refused := func(svc *allocation.Allocator) {
		t.Helper()
		v, err := svc.GetPool("p")
		require.NoError(t, err)
		require.True(t, v.Deleting)
		require.EqualValues(t, 25, v.Stats.Allocated)
		_, _, err = svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("new")})
		require.ErrorIs(t, err, decide.ErrPoolDeleting)
		// An owner that holds an address does not get it back either.
		_, _, err = svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("pod-3")})
		require.ErrorIs(t, err, decide.ErrPoolDeleting)
		_, err = svc.BatchAllocate(ctx, []decide.Request{{Pool: "other", Owner: owner("x")}, {Pool: "p", Owner: owner("y")}}, "")
		require.ErrorIs(t, err, decide.ErrPoolDeleting)
		_, _, err = svc.UpdatePool(ctx, "p", decide.PoolSpec{Labels: map[string]string{"a": "b"}}, decide.UpdateMask{Labels: true}, "", false)
		require.ErrorIs(t, err, decide.ErrPoolDeleting)
		_, err = svc.DeletePool(ctx, "p", "", false, false)
		require.ErrorIs(t, err, decide.ErrPoolNotEmpty)
		// The pool's range stays taken while it holds addresses.
		_, err = svc.CreatePool(ctx, "q", decide.PoolSpec{CIDRs: []string{"10.0.0.0/25"}})
		require.ErrorIs(t, err, decide.ErrPoolOverlap)
	}
	refused(svc)
	// Nothing of the batch above was kept in the other pool.
	other, err := svc.GetPool("other")
	require.NoError(t, err)
	require.EqualValues(t, 3, other.Stats.Allocated)

	// A restart finds it as it was.
	svc, err = allocation.New(ctx, st, allocation.WithDeleteChunk(10))
	require.NoError(t, err)
	refused(svc)
	// Releases go on as before.
	rel, ok, err := svc.Release(ctx, decide.ReleaseRequest{Pool: "p", Address: held.Address})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, held.Address, rel.Address)

	// DeletePool with force finishes it, and the other pool is whole.
	n, err := svc.DeletePool(ctx, "p", "", true, false)
	require.NoError(t, err)
	require.Equal(t, 24, n)
	_, err = svc.GetPool("p")
	require.ErrorIs(t, err, decide.ErrPoolNotFound)
	snap, err := mem.Snapshot(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Allocations, 3)
	require.Len(t, snap.Pools, 1)
}

// tooLarge refuses transactions of more than max operations, as etcd
// does past its --max-txn-ops.
type tooLarge struct {
	store.Store
	max     int
	refused atomic.Int32
}

func (s *tooLarge) Commit(ctx context.Context, txn store.Txn) (int64, error) {
	if len(txn.Ops) > s.max {
		s.refused.Add(1)
		return 0, fmt.Errorf("%d operations: %w", len(txn.Ops), store.ErrTooLarge)
	}
	return s.Store.Commit(ctx, txn)
}

func TestDeletionChunksShrinkToWhatTheStoreTakes(t *testing.T) {
	ctx := context.Background()
	st := &tooLarge{Store: memory.New(), max: 1 << 20}
	svc, err := allocation.New(ctx, st, allocation.WithDeleteChunk(64))
	require.NoError(t, err)
	_, err = svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}})
	require.NoError(t, err)
	fill(t, svc, "p", 200)
	st.max = 12
	n, err := svc.DeletePool(ctx, "p", "", true, false)
	require.NoError(t, err)
	require.Equal(t, 200, n)
	// 64, 32 and 16 were refused once each; 8 went on from there.
	require.EqualValues(t, 3, st.refused.Load())
	_, err = svc.GetPool("p")
	require.ErrorIs(t, err, decide.ErrPoolNotFound)
}

// pauseRelease holds the first commit that only releases allocations
// until resume closes, and closes paused when it gets there.
type pauseRelease struct {
	store.Store
	once           sync.Once
	paused, resume chan struct{}
}

func (p *pauseRelease) Commit(ctx context.Context, txn store.Txn) (int64, error) {
	if len(txn.Ops) > 0 && txn.Ops[0].Kind == store.OpDeleteAllocation {
		p.once.Do(func() {
			close(p.paused)
			<-p.resume
		})
	}
	return p.Store.Commit(ctx, txn)
}

// TestReplicasDeleteALargePoolInChunks runs on etcd at its default
// limits (--max-txn-ops 128), where the deletion's first chunks are
// refused as too large.
func TestReplicasDeleteALargePoolInChunks(t *testing.T) {
	ctx := context.Background()
	pause := &pauseRelease{paused: make(chan struct{}), resume: make(chan struct{})}
	rs, stores := replicasOf(t, 2, func(i int, st store.Store) store.Store {
		if i == 0 {
			pause.Store = st
			return pause
		}
		return st
	})
	a, b := rs[0], rs[1]
	_, err := a.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/16"}})
	require.NoError(t, err)
	const n = 5000
	fill(t, a, "p", n)
	require.NoError(t, b.Sync(ctx))
	before := a.Counters().Revision

	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := a.DeletePool(ctx, "p", "", true, false)
		done <- result{n, err}
	}()
	<-pause.paused
	// Marked deleting, the pool refuses through the other replica too.
	require.NoError(t, b.Sync(ctx))
	v, err := b.GetPool("p")
	require.NoError(t, err)
	require.True(t, v.Deleting)
	require.EqualValues(t, n, v.Stats.Allocated)
	_, _, err = b.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("late")})
	require.ErrorIs(t, err, decide.ErrPoolDeleting)
	_, _, err = b.UpdatePool(ctx, "p", decide.PoolSpec{ReuseDelay: time.Second}, decide.UpdateMask{ReuseDelay: true}, "", false)
	require.ErrorIs(t, err, decide.ErrPoolDeleting)
	close(pause.resume)
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, n, r.n)

	revs := revisions(t, stores[1], before, "p")
	largest, releases := 0, 0
	for _, evs := range revs {
		largest = max(largest, len(evs))
		for _, ev := range evs {
			if ev.Type == store.EventDeleteAllocation {
				releases++
			}
		}
	}
	require.Equal(t, n, releases)
	require.LessOrEqual(t, largest, 64, "no commit larger than etcd takes")
	require.Len(t, revs[len(revs)-1], 1, "the pool's own deletion releases nothing more")

	require.NoError(t, b.Sync(ctx))
	_, err = b.GetPool("p")
	require.ErrorIs(t, err, decide.ErrPoolNotFound)
	require.Zero(t, b.Counters().Rebuilds)
	require.Zero(t, b.Counters().WatchRestarts)
}

// heldReleases holds every commit that only releases allocations until
// open closes, and counts them as they arrive.
type heldReleases struct {
	store.Store
	open    chan struct{}
	arrived atomic.Int32
}

func (h *heldReleases) Commit(ctx context.Context, txn store.Txn) (int64, error) {
	if len(txn.Ops) > 0 && txn.Ops[0].Kind == store.OpDeleteAllocation && len(txn.Conds) == 1 && txn.Conds[0].Kind == store.CondPoolRevision {
		h.arrived.Add(1)
		<-h.open
	}
	return h.Store.Commit(ctx, txn)
}

func TestDeletionOutlivesItsRequest(t *testing.T) {
	ctx := context.Background()
	st := &heldReleases{Store: memory.New(), open: make(chan struct{})}
	svc, err := allocation.New(ctx, st, allocation.WithDeleteChunk(10))
	require.NoError(t, err)
	_, err = svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}})
	require.NoError(t, err)
	fill(t, svc, "p", 35)

	// The client gives up; the deletion does not.
	short := func() error {
		ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := svc.DeletePool(ctx, "p", "", true, false)
		return err
	}
	require.ErrorIs(t, short(), context.DeadlineExceeded)
	v, err := svc.GetPool("p")
	require.NoError(t, err)
	require.True(t, v.Deleting)
	// A second call waits for the deletion under way: it starts no
	// chunk of its own (which would take the next ten addresses).
	require.ErrorIs(t, short(), context.DeadlineExceeded)
	require.EqualValues(t, 1, st.arrived.Load())

	close(st.open)
	require.Eventually(t, func() bool {
		_, err := svc.GetPool("p")
		return errors.Is(err, decide.ErrPoolNotFound)
	}, 10*time.Second, time.Millisecond)
	require.EqualValues(t, 4, st.arrived.Load(), "10, 10, 10 and 5, once")
	n, err := svc.DeletePool(ctx, "p", "", true, true)
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestReplicasFinishOneDeletionTogether: a deletion cut short is finished
// by a forced DeletePool through two replicas at once (an operator and
// repair, say), of a pool released in chunks and of one deleted in one
// commit. They release the same chunks, and the one whose deletion of the
// pool loses to the other's finds the pool gone: both succeed.
func TestReplicasFinishOneDeletionTogether(t *testing.T) {
	ctx := context.Background()
	rs, stores := replicasOf(t, 2, nil, allocation.WithDeleteChunk(32))
	for _, c := range []struct {
		pool, cidr string
		n          int
	}{{"chunks", "10.0.0.0/16", 1000}, {"one-commit", "10.1.0.0/16", 20}} {
		_, err := rs[0].CreatePool(ctx, c.pool, decide.PoolSpec{CIDRs: []string{c.cidr}})
		require.NoError(t, err)
		fill(t, rs[0], c.pool, c.n)
		// What a replica that stopped after marking the pool leaves.
		v, err := rs[0].GetPool(c.pool)
		require.NoError(t, err)
		marked := v.Pool
		marked.Deleting = true
		_, err = stores[0].Commit(ctx, store.Txn{
			Conds: []store.Cond{{Kind: store.CondPoolRevision, Pool: c.pool, Revision: marked.Revision}},
			Ops:   []store.Op{{Kind: store.OpPutPool, Pool: &marked}},
		})
		require.NoError(t, err)
		for _, r := range rs {
			require.NoError(t, r.Sync(ctx))
			v, err = r.GetPool(c.pool)
			require.NoError(t, err)
			require.True(t, v.Deleting)
			require.EqualValues(t, c.n, v.Stats.Allocated)
		}

		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, r := range rs {
			wg.Go(func() { _, errs[i] = r.DeletePool(ctx, c.pool, decide.Etag(v.Revision), true, false) })
		}
		wg.Wait()
		require.NoError(t, errs[0], "%s through the first replica", c.pool)
		require.NoError(t, errs[1], "%s through the second replica", c.pool)
		for _, r := range rs {
			require.NoError(t, r.Sync(ctx))
			_, err := r.GetPool(c.pool)
			require.ErrorIs(t, err, decide.ErrPoolNotFound)
		}
	}
	snap, err := stores[1].Snapshot(ctx)
	require.NoError(t, err)
	require.Empty(t, snap.Pools)
	require.Empty(t, snap.Allocations)
}
