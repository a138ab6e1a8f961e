package allocation_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/services/allocator/allocation"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/internal/storetest"
	"github.com/plexusnet/plexus/services/allocator/ipam"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/etcd"
)

// replicas starts n allocation services on one etcd prefix, each with its
// own client, following the store as the allocator does with --store etcd.
func replicas(t *testing.T, n int) []*allocation.Allocator {
	t.Helper()
	out, _ := replicasOf(t, n, nil)
	return out
}

// replicasOf is replicas with each store passed through wrap (when not
// nil) and the stores returned too.
func replicasOf(t *testing.T, n int, wrap func(i int, st store.Store) store.Store, opts ...allocation.Option) ([]*allocation.Allocator, []*etcd.Store) {
	t.Helper()
	e := kubetest.StartEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var (
		out    []*allocation.Allocator
		stores []*etcd.Store
	)
	for i := range n {
		st, err := etcd.Open(etcd.Config{Endpoints: e.Endpoints(), Prefix: "/plexus-test/"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		stores = append(stores, st)
		var use store.Store = st
		if wrap != nil {
			use = wrap(i, st)
		}
		svc, err := allocation.New(ctx, allocation.Traced(use), append([]allocation.Option{allocation.WithFollow()}, opts...)...)
		require.NoError(t, err)
		out = append(out, svc)
	}
	return out, stores
}

// allocations lists every allocation a replica knows of, as address →
// owner name.
func allocations(t *testing.T, svc *allocation.Allocator, pool string) map[netip.Addr]string {
	t.Helper()
	list, _, err := svc.ListAllocations(pool, allocation.Filter{}, allocation.Cursor{}, 1<<20)
	require.NoError(t, err)
	out := map[netip.Addr]string{}
	for _, a := range list {
		out[a.Address] = a.Owner.Name
	}
	return out
}

func TestReplicasFollowEachOther(t *testing.T) {
	ctx := context.Background()
	rs := replicas(t, 2)
	a, b := rs[0], rs[1]

	// A pool created through one replica is served by the other.
	_, err := a.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/29"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := b.GetPool("p"); return err == nil }, 10*time.Second, 10*time.Millisecond)

	// b's index learns a's allocation: b hands out the next address, not
	// the same one, and the same owner gets a's address back from b.
	x, _, err := a.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x")})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(allocations(t, b, "p")) == 1 }, 10*time.Second, 10*time.Millisecond)
	y, _, err := b.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("y")})
	require.NoError(t, err)
	require.NotEqual(t, x.Address, y.Address)
	again, created, err := b.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x")})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, x.Address, again.Address)

	// A release through b frees the address in a too.
	_, _, err = b.Release(ctx, decide.ReleaseRequest{Pool: "p", Address: x.Address, Etag: decide.Etag(x.Revision)})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, ok := allocations(t, a, "p")[x.Address]; return !ok }, 10*time.Second, 10*time.Millisecond)
	z, _, err := a.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("z"), Address: x.Address})
	require.NoError(t, err, "the released address is free again on the other replica")
	require.Equal(t, x.Address, z.Address)

	// A pool deleted through b is gone from a.
	_, err = b.CreatePool(ctx, "gone", decide.PoolSpec{CIDRs: []string{"10.0.9.0/29"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := a.GetPool("gone"); return err == nil }, 10*time.Second, 10*time.Millisecond)
	_, err = b.DeletePool(ctx, "gone", "", false, false)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := a.GetPool("gone")
		return errors.Is(err, decide.ErrPoolNotFound)
	}, 10*time.Second, 10*time.Millisecond)

	// A pool update through a reaches b.
	_, _, err = a.UpdatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/29", "10.0.1.0/29"}}, decide.UpdateMask{CIDRs: true}, "", false)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		v, err := b.GetPool("p")
		return err == nil && len(v.CIDRs) == 2
	}, 10*time.Second, 10*time.Millisecond)
}

// TestReplicasNeverHandOutAnAddressTwice: two replicas, 16 clients each,
// allocate and release on a pool of 14 addresses for many rounds (so the
// pool is often full, and the replicas often race for its last address). A model
// of who holds what (an owner gives its address up before it releases
// it) is checked at every allocation; at the end both replicas agree.
func TestReplicasNeverHandOutAnAddressTwice(t *testing.T) {
	ctx := context.Background()
	rs := replicas(t, 2)
	_, err := rs[0].CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/28"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := rs[1].GetPool("p"); return err == nil }, 10*time.Second, 10*time.Millisecond)

	var (
		mu        sync.Mutex
		holder    = map[netip.Addr]string{}
		allocs    int
		exhausted int
		lost      int
	)
	const clients, rounds = 16, 40
	var wg sync.WaitGroup
	for r, svc := range rs {
		for c := range clients {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(r), uint64(c)))
				for i := range rounds {
					name := fmt.Sprintf("r%d-c%d-%d", r, c, i)
					a, _, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner(name)})
					if errors.Is(err, ipam.ErrExhausted) || errors.Is(err, decide.ErrConflict) {
						mu.Lock()
						if errors.Is(err, ipam.ErrExhausted) {
							exhausted++
						} else {
							lost++
						}
						mu.Unlock()
						continue
					}
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					other, taken := holder[a.Address]
					holder[a.Address] = name
					allocs++
					mu.Unlock()
					assert.False(t, taken, "%s handed to %s while %s holds it", a.Address, name, other)
					time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond) // load: hold the address a moment
					mu.Lock()
					delete(holder, a.Address)
					mu.Unlock()
					_, _, err = svc.Release(ctx, decide.ReleaseRequest{Pool: "p", Address: a.Address, Etag: decide.Etag(a.Revision)})
					if !assert.NoError(t, err) {
						return
					}
				}
			})
		}
	}
	wg.Wait()
	t.Logf("%d allocations, %d refused as the pool was full, %d lost to the other replica after every retry", allocs, exhausted, lost)
	require.Positive(t, allocs)
	require.Less(t, lost, (allocs+exhausted+lost)/20, "retries after a lost transaction find a free address")
	require.Eventually(t, func() bool {
		return len(allocations(t, rs[0], "p")) == 0 && len(allocations(t, rs[1], "p")) == 0
	}, 10*time.Second, 10*time.Millisecond, "both replicas see every release")
	for _, svc := range rs {
		v, err := svc.GetPool("p")
		require.NoError(t, err)
		require.Zero(t, v.Stats.Allocated, "the index agrees")
	}
}

// cutWatch is a store whose first watch ends with an error once cut is
// closed, as a watch does when etcd's connection breaks.
type cutWatch struct {
	*etcd.Store
	cut     chan struct{}
	watches atomic.Int32
	// err is what the watch ends with ("connection to etcd lost" when
	// nil).
	err error
}

func (c *cutWatch) WatchCursor(ctx context.Context, from int64, pool string) (store.Cursor, error) {
	if c.watches.Add(1) > 1 {
		return c.Store.WatchCursor(ctx, from, pool)
	}
	wctx, cancel := context.WithCancel(ctx)
	in, err := storetest.Watch(wctx, c.Store, from)
	if err != nil {
		cancel()
		return nil, err
	}
	out := make(chan store.Event)
	go func() {
		defer close(out)
		defer cancel()
		for {
			select {
			case ev, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			case <-c.cut:
				select {
				case out <- store.Event{Err: cmp.Or(c.err, errors.New("connection to etcd lost"))}:
				case <-ctx.Done():
				}
				return
			}
		}
	}()
	return store.ChanCursor(out), nil
}

// TestFollowerResumesAtOnceWhenTooSlow: a follower cut off as too slow
// watches again at once, from where it was (what it missed is still
// kept), where after another error it waits before it tries again (here
// an hour: b would not catch up).
func TestFollowerResumesAtOnceWhenTooSlow(t *testing.T) {
	ctx := context.Background()
	cut := &cutWatch{cut: make(chan struct{}), err: fmt.Errorf("watcher fell 6000 events behind: %w", store.ErrTooSlow)}
	rs, _ := replicasOf(t, 2, func(i int, st store.Store) store.Store {
		if i == 0 {
			return st
		}
		cut.Store = st.(*etcd.Store)
		return cut
	}, allocation.WithFollowRetry(time.Hour))
	a, b := rs[0], rs[1]
	_, err := a.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/29"}})
	require.NoError(t, err)
	require.NoError(t, b.Sync(ctx))

	close(cut.cut)
	require.Eventually(t, func() bool { return b.Counters().WatchRestarts == 1 }, 10*time.Second, time.Millisecond)
	x, _, err := a.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x")})
	require.NoError(t, err)
	syncCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, b.Sync(syncCtx), "b watches again at once")
	require.Equal(t, map[netip.Addr]string{x.Address: "x"}, allocations(t, b, "p"))
	require.Zero(t, b.Counters().Rebuilds)
}

// TestFollowerRebuildsAfterCompaction: b's watch breaks, and while it is
// down a allocates, deletes a pool, and the history is compacted past
// where b stopped, in etcd and in b's store's memory. b's follower cannot
// resume the watch, takes a new snapshot instead, and serves what a wrote;
// the counters tell both.
func TestFollowerRebuildsAfterCompaction(t *testing.T) {
	testFollowerAfterCompaction(t, true)
}

// TestFollowerResumesFromSharedHistory: the same, but only etcd's history
// is compacted (as etcd's auto-compaction does). b's store kept every event
// since in the history its shared watch feeds, so b's follower resumes
// from there: no snapshot, same result.
func TestFollowerResumesFromSharedHistory(t *testing.T) {
	testFollowerAfterCompaction(t, false)
}

func testFollowerAfterCompaction(t *testing.T, inMemoryToo bool) {
	ctx := context.Background()
	cut := &cutWatch{cut: make(chan struct{})}
	rs, stores := replicasOf(t, 2, func(i int, st store.Store) store.Store {
		if i == 0 {
			return st
		}
		cut.Store = st.(*etcd.Store)
		return cut
	})
	a, b := rs[0], rs[1]
	_, err := a.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/29"}})
	require.NoError(t, err)
	_, err = a.CreatePool(ctx, "q", decide.PoolSpec{CIDRs: []string{"10.0.1.0/29"}})
	require.NoError(t, err)
	require.NoError(t, b.Sync(ctx))
	_, err = b.GetPool("q")
	require.NoError(t, err)

	close(cut.cut)
	require.Eventually(t, func() bool { return b.Counters().WatchRestarts == 1 }, 10*time.Second, time.Millisecond)
	x, _, err := a.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x")})
	require.NoError(t, err)
	_, err = a.DeletePool(ctx, "q", "", false, false)
	require.NoError(t, err)
	rev, err := stores[0].Revision(ctx)
	require.NoError(t, err)
	require.NoError(t, stores[0].Compact(ctx, rev))
	if inMemoryToo {
		require.NoError(t, stores[1].Compact(ctx, rev))
	}
	require.Zero(t, b.Counters().Rebuilds, "b was not watching while a wrote")

	if inMemoryToo {
		require.Eventually(t, func() bool { return b.Counters().Rebuilds == 1 }, 10*time.Second, 10*time.Millisecond)
	}
	// b resumes its watch after a backoff, which a loaded machine can
	// stretch past one Sync's bound (ErrBehind): ask again until it has.
	for deadline := time.Now().Add(30 * time.Second); ; {
		err := b.Sync(ctx)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, decide.ErrBehind)
		require.True(t, time.Now().Before(deadline), "b did not resume: %v", err)
	}
	require.Equal(t, map[netip.Addr]string{x.Address: "x"}, allocations(t, b, "p"))
	_, err = b.GetPool("q")
	require.ErrorIs(t, err, decide.ErrPoolNotFound)
	n := b.Counters()
	require.GreaterOrEqual(t, n.Revision, rev)
	require.Equal(t, uint64(1), n.WatchRestarts)
	if !inMemoryToo {
		require.Zero(t, n.Rebuilds, "b resumed from its store's history")
	}

	// b follows again: a's next allocation reaches it, and b does not
	// hand the same address out.
	y, _, err := a.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("y")})
	require.NoError(t, err)
	require.NoError(t, b.Sync(ctx))
	require.Equal(t, map[netip.Addr]string{x.Address: "x", y.Address: "y"}, allocations(t, b, "p"))
	z, _, err := b.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("z")})
	require.NoError(t, err)
	require.NotContains(t, []netip.Addr{x.Address, y.Address}, z.Address)
}

// pairWithPool starts two replicas and creates pool p with cidr through
// the first; the second serves it once Sync returns.
func pairWithPool(t *testing.T, cidr string) (a, b *allocation.Allocator) {
	t.Helper()
	rs := replicas(t, 2)
	a, b = rs[0], rs[1]
	_, err := a.CreatePool(context.Background(), "p", decide.PoolSpec{CIDRs: []string{cidr}})
	require.NoError(t, err)
	require.NoError(t, b.Sync(context.Background()))
	_, err = b.GetPool("p")
	require.NoError(t, err, "a pool created through the other replica")
	return a, b
}

// TestSyncReadsWhatAnyReplicaCommitted: after Sync, a replica's reads hold
// every commit acknowledged by another replica before it, at once, not
// eventually.
func TestSyncReadsWhatAnyReplicaCommitted(t *testing.T) {
	ctx := context.Background()
	a, b := pairWithPool(t, "10.0.0.0/24")
	for i := range 50 {
		got, _, err := a.Allocate(ctx, decide.Request{Pool: "p", Owner: owner(fmt.Sprint("o", i))})
		require.NoError(t, err)
		require.NoError(t, b.Sync(ctx))
		seen, err := b.GetAllocation("p", got.Address)
		require.NoError(t, err, "allocation %d, acknowledged by a", i)
		require.Equal(t, got.Revision, seen.Revision)

		_, _, err = a.Release(ctx, decide.ReleaseRequest{Pool: "p", Address: got.Address})
		require.NoError(t, err)
		require.NoError(t, b.Sync(ctx))
		_, err = b.GetAllocation("p", got.Address)
		require.ErrorIs(t, err, decide.ErrAllocationNotFound, "release %d, acknowledged by a", i)
	}
}

// TestRetryOnAnotherReplica: a request retried with the same request id
// on another replica, right after the first replica committed it, gets the
// first answer, not an error because the other replica has not applied the
// commit yet.
func TestRetryOnAnotherReplica(t *testing.T) {
	ctx := context.Background()
	a, b := pairWithPool(t, "10.0.0.0/24")
	for i := range 100 {
		req := decide.Request{Pool: "p", Owner: owner(fmt.Sprint("o", i)), RequestID: fmt.Sprint("req-", i)}
		first, _, err := a.Allocate(ctx, req)
		require.NoError(t, err)
		again, created, err := b.Allocate(ctx, req)
		require.NoError(t, err, "retry %d", i)
		require.False(t, created)
		require.Equal(t, first.Address, again.Address)
	}
}

// TestNegativeAnswersAreFresh: a replica refuses a request only on a state
// as fresh as the store. Right after another replica created a pool,
// released an address or deleted a pool, this one does not say the pool
// is missing, the address taken or the pool still there.
func TestNegativeAnswersAreFresh(t *testing.T) {
	ctx := context.Background()
	a, b := pairWithPool(t, "10.0.0.0/24")
	for i := range 30 {
		id := fmt.Sprint("q", i)
		cidr := fmt.Sprintf("10.1.%d.0/29", i)
		_, err := a.CreatePool(ctx, id, decide.PoolSpec{CIDRs: []string{cidr}})
		require.NoError(t, err)
		x, _, err := b.Allocate(ctx, decide.Request{Pool: id, Owner: owner("x")})
		require.NoError(t, err, "round %d: allocate in the pool just created through a", i)

		_, _, err = b.Release(ctx, decide.ReleaseRequest{Pool: id, Address: x.Address})
		require.NoError(t, err)
		y, _, err := a.Allocate(ctx, decide.Request{Pool: id, Owner: owner("y"), Address: x.Address})
		require.NoError(t, err, "round %d: the address b has just released", i)

		rebound, _, err := a.Allocate(ctx, decide.Request{Pool: id, Owner: decide.Owner{Cluster: "a", Kind: "Pod", Namespace: "default", Name: "y", UID: "uid-y2"}})
		require.NoError(t, err)
		require.Equal(t, y.Address, rebound.Address)
		_, _, err = b.Release(ctx, decide.ReleaseRequest{Pool: id, Address: y.Address, Etag: decide.Etag(rebound.Revision), OwnerUID: "uid-y2"})
		require.NoError(t, err, "round %d: release with the etag and uid of a's rebind", i)

		_, err = a.DeletePool(ctx, id, "", false, false)
		require.NoError(t, err)
		_, err = b.CreatePool(ctx, id, decide.PoolSpec{CIDRs: []string{cidr}})
		require.NoError(t, err, "round %d: create again the pool a has just deleted", i)
		_, err = b.DeletePool(ctx, id, "", false, false)
		require.NoError(t, err)
	}
}

// TestPoolChangesSeeOtherReplicasAllocations: a pool that holds an
// allocation made through another replica is neither deleted nor stripped
// of the CIDR that holds it without force, however soon the change
// follows the allocation.
func TestPoolChangesSeeOtherReplicasAllocations(t *testing.T) {
	ctx := context.Background()
	a, b := pairWithPool(t, "10.0.0.0/24")
	for i := range 30 {
		id := fmt.Sprint("q", i)
		held, other := fmt.Sprintf("10.1.%d.0/29", i), fmt.Sprintf("10.2.%d.0/29", i)
		_, err := b.CreatePool(ctx, id, decide.PoolSpec{CIDRs: []string{held}})
		require.NoError(t, err)
		require.NoError(t, a.Sync(ctx))
		x, _, err := a.Allocate(ctx, decide.Request{Pool: id, Owner: owner("x")})
		require.NoError(t, err)

		update := func() {
			_, _, err := b.UpdatePool(ctx, id, decide.PoolSpec{CIDRs: []string{other}}, decide.UpdateMask{CIDRs: true}, "", false)
			require.ErrorIs(t, err, decide.ErrCIDRInUse, "round %d", i)
		}
		del := func() {
			_, err := b.DeletePool(ctx, id, "", false, false)
			require.ErrorIs(t, err, decide.ErrPoolNotEmpty, "round %d", i)
		}
		// Whichever comes first meets a replica that may not have
		// applied the allocation yet.
		if i%2 == 0 {
			update()
			del()
		} else {
			del()
			update()
		}

		require.NoError(t, a.Sync(ctx))
		got, err := a.GetAllocation(id, x.Address)
		require.NoError(t, err, "round %d: the allocation is still there", i)
		require.Equal(t, x.Revision, got.Revision)
	}
}

// slowSecond delays every event after the first of its revision, so a
// replica applies a commit of several allocations slowly.
type slowSecond struct{ *etcd.Store }

func (s slowSecond) WatchCursor(ctx context.Context, from int64, _ string) (store.Cursor, error) {
	in, err := storetest.Watch(ctx, s.Store, from)
	if err != nil {
		return nil, err
	}
	out := make(chan store.Event)
	go func() {
		defer close(out)
		var last int64
		for ev := range in {
			if ev.Revision != 0 && ev.Revision == last {
				time.Sleep(300 * time.Millisecond) // the delay under test: a commit's second event arrives late
			}
			last = ev.Revision
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return store.ChanCursor(out), nil
}

// TestWholeCommitsApplied: a replica has applied a revision only once it
// has applied every allocation of its commit, so neither a read after
// Sync nor a request_id retried there sees half of a batch.
func TestWholeCommitsApplied(t *testing.T) {
	ctx := context.Background()
	rs, _ := replicasOf(t, 2, func(i int, st store.Store) store.Store {
		if i == 1 {
			return slowSecond{st.(*etcd.Store)}
		}
		return st
	})
	a, b := rs[0], rs[1]
	_, err := a.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}})
	require.NoError(t, err)
	require.NoError(t, b.Sync(ctx))
	for i := range 3 {
		reqs := []decide.Request{{Pool: "p", Owner: owner(fmt.Sprint("x", i))}, {Pool: "p", Owner: owner(fmt.Sprint("y", i))}}
		first, err := a.BatchAllocate(ctx, reqs, fmt.Sprint("batch-", i))
		require.NoError(t, err)
		if i%2 == 0 {
			again, err := b.BatchAllocate(ctx, reqs, fmt.Sprint("batch-", i))
			require.NoError(t, err, "batch %d retried on b", i)
			require.Equal(t, first, again)
			continue
		}
		require.NoError(t, b.Sync(ctx))
		for _, want := range first {
			got, err := b.GetAllocation("p", want.Address)
			require.NoError(t, err, "batch %d read on b after Sync", i)
			require.Equal(t, want.Revision, got.Revision)
		}
	}
}

// lateReturn holds one armed commit's answer back after it landed, as a
// slow network might, until the test lets it go.
type lateReturn struct {
	*etcd.Store
	armed   atomic.Bool
	landed  chan struct{}
	letItGo chan struct{}
}

func (l *lateReturn) Commit(ctx context.Context, txn store.Txn) (int64, error) {
	rev, err := l.Store.Commit(ctx, txn)
	if l.armed.CompareAndSwap(true, false) {
		close(l.landed)
		<-l.letItGo
	}
	return rev, err
}

// TestLateCommitAnswerDoesNotResurrect: while a's commit answer is on its
// way, a's follower applies that commit and a release of it made through
// b. a must not put the allocation back: the address is free, and the
// owner asking again gets a new one.
func TestLateCommitAnswerDoesNotResurrect(t *testing.T) {
	ctx := context.Background()
	late := &lateReturn{landed: make(chan struct{}), letItGo: make(chan struct{})}
	rs, stores := replicasOf(t, 2, func(i int, st store.Store) store.Store {
		if i == 0 {
			late.Store = st.(*etcd.Store)
			return late
		}
		return st
	})
	a, b := rs[0], rs[1]
	_, err := a.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}})
	require.NoError(t, err)
	require.NoError(t, b.Sync(ctx))

	late.armed.Store(true)
	done := make(chan store.Allocation)
	go func() {
		x, _, err := a.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x")})
		assert.NoError(t, err)
		done <- x
	}()
	<-late.landed
	require.NoError(t, b.Sync(ctx))
	list, _, err := b.ListAllocations("p", allocation.Filter{}, allocation.Cursor{}, 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	addr := list[0].Address
	_, _, err = b.Release(ctx, decide.ReleaseRequest{Pool: "p", Address: addr})
	require.NoError(t, err)
	require.NoError(t, a.Sync(ctx)) // a's follower has applied the commit and the release
	close(late.letItGo)
	require.Equal(t, addr, (<-done).Address)

	snap, err := stores[0].Snapshot(ctx)
	require.NoError(t, err)
	require.Empty(t, snap.Allocations)
	_, err = a.GetAllocation("p", addr)
	require.ErrorIs(t, err, decide.ErrAllocationNotFound, "released through b")
	again, created, err := a.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x")})
	require.NoError(t, err)
	require.True(t, created, "x holds nothing since the release")
	y, _, err := b.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("y"), Address: addr})
	require.NoError(t, err)
	require.NotEqual(t, y.Address, again.Address)
}

// TestFollowedPoolUpdateKeepsReuseDelay: a replica that follows another's
// pool update keeps the released addresses in their reuse delay.
func TestFollowedPoolUpdateKeepsReuseDelay(t *testing.T) {
	ctx := context.Background()
	rs := replicas(t, 2)
	a, b := rs[0], rs[1]
	_, err := a.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}, ReuseDelay: time.Hour})
	require.NoError(t, err)
	x, _, err := a.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x")})
	require.NoError(t, err)
	_, _, err = a.Release(ctx, decide.ReleaseRequest{Pool: "p", Address: x.Address})
	require.NoError(t, err)
	_, _, err = a.UpdatePool(ctx, "p", decide.PoolSpec{Labels: map[string]string{"k": "v"}}, decide.UpdateMask{Labels: true}, "", false)
	require.NoError(t, err)
	require.NoError(t, b.Sync(ctx))
	v, err := b.GetPool("p")
	require.NoError(t, err)
	require.Equal(t, "v", v.Labels["k"], "b has applied the update")
	_, _, err = b.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("y"), Address: x.Address})
	require.ErrorIs(t, err, ipam.ErrInReuseDelay)
}
