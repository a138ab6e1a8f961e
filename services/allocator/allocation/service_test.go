package allocation_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/allocation"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/ipam"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/bolt"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func newService(t *testing.T, st store.Store) (*allocation.Allocator, *clock) {
	t.Helper()
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	svc, err := allocation.New(context.Background(), st, allocation.WithClock(clk.Now))
	require.NoError(t, err)
	return svc, clk
}

func owner(name string) decide.Owner {
	return decide.Owner{Cluster: "a", Kind: "Pod", Namespace: "default", Name: name, UID: "uid-" + name}
}

func TestAllocateIdempotentPerOwner(t *testing.T) {
	ctx := context.Background()
	svc, _ := newService(t, memory.New())
	_, err := svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/29"}})
	require.NoError(t, err)

	a1, created, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x")})
	require.NoError(t, err)
	require.True(t, created)
	a2, created, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x")})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, a1.Address, a2.Address)
	require.Equal(t, a1.Revision, a2.Revision)

	// /29 has 6 usable addresses (network and broadcast excluded).
	for i := range 5 {
		_, _, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner(fmt.Sprint(i))})
		require.NoError(t, err)
	}
	_, _, err = svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("overflow")})
	require.ErrorIs(t, err, ipam.ErrExhausted)
	v, err := svc.GetPool("p")
	require.NoError(t, err)
	require.Equal(t, "6", v.Stats.Capacity.String())
	require.Equal(t, uint64(6), v.Stats.Allocated)
	require.Equal(t, "0", v.Stats.Free.String())
}

func TestGuardedRelease(t *testing.T) {
	ctx := context.Background()
	svc, _ := newService(t, memory.New())
	_, err := svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}})
	require.NoError(t, err)
	a, _, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x")})
	require.NoError(t, err)

	_, _, err = svc.Release(ctx, decide.ReleaseRequest{Pool: "p", Address: a.Address, Etag: "999999"})
	require.ErrorIs(t, err, decide.ErrEtagMismatch)
	_, _, err = svc.Release(ctx, decide.ReleaseRequest{Pool: "p", Address: a.Address, OwnerUID: "someone-else"})
	require.ErrorIs(t, err, decide.ErrOwnerMismatch)
	got, ok, err := svc.Release(ctx, decide.ReleaseRequest{Pool: "p", Address: a.Address, Etag: decide.Etag(a.Revision), OwnerUID: "uid-x"})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, a.Address, got.Address)

	_, _, err = svc.Release(ctx, decide.ReleaseRequest{Pool: "p", Address: a.Address})
	require.ErrorIs(t, err, decide.ErrAllocationNotFound)
	_, ok, err = svc.Release(ctx, decide.ReleaseRequest{Pool: "p", Address: a.Address, AllowMissing: true})
	require.NoError(t, err)
	require.False(t, ok)
}

func TestReuseDelaySurvivesRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	st, err := bolt.Open(path)
	require.NoError(t, err)
	svc, clk := newService(t, st)
	_, err = svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/30"}, ReuseDelay: time.Minute})
	require.NoError(t, err)
	a, _, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x")})
	require.NoError(t, err)
	_, _, err = svc.Release(ctx, decide.ReleaseRequest{Pool: "p", Address: a.Address})
	require.NoError(t, err)
	require.NoError(t, st.Close())

	st, err = bolt.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	svc, err = allocation.New(ctx, st, allocation.WithClock(clk.Now))
	require.NoError(t, err)
	// The /30 has two usable addresses; the released one is quarantined.
	b, _, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("y")})
	require.NoError(t, err)
	require.NotEqual(t, a.Address, b.Address)
	_, _, err = svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("z")})
	require.ErrorIs(t, err, ipam.ErrExhausted)
}

func TestBatchAllOrNothing(t *testing.T) {
	ctx := context.Background()
	svc, _ := newService(t, memory.New())
	_, err := svc.CreatePool(ctx, "v4", decide.PoolSpec{CIDRs: []string{"10.0.0.0/30"}})
	require.NoError(t, err)
	_, err = svc.CreatePool(ctx, "v6", decide.PoolSpec{CIDRs: []string{"fd00::/120"}})
	require.NoError(t, err)

	out, err := svc.BatchAllocate(ctx, []decide.Request{{Pool: "v4", Owner: owner("svc")}, {Pool: "v6", Owner: owner("svc")}}, "")
	require.NoError(t, err)
	require.True(t, out[0].Address.Is4())
	require.True(t, out[1].Address.Is6())

	// v4 has one address left: a batch asking for two fails whole.
	_, err = svc.BatchAllocate(ctx, []decide.Request{{Pool: "v6", Owner: owner("a")}, {Pool: "v4", Owner: owner("a")}, {Pool: "v4", Owner: owner("b")}}, "")
	require.ErrorIs(t, err, ipam.ErrExhausted)
	list, _, err := svc.ListAllocations("v6", allocation.Filter{}, allocation.Cursor{}, 100)
	require.NoError(t, err)
	require.Len(t, list, 1, "the failed batch must not leave its v6 allocation behind")
}

func TestRequestIDReplay(t *testing.T) {
	ctx := context.Background()
	svc, _ := newService(t, memory.New())
	_, err := svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}})
	require.NoError(t, err)
	a, created, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x"), RequestID: "r1"})
	require.NoError(t, err)
	require.True(t, created)
	b, created, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x"), RequestID: "r1"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, a.Address, b.Address)
	_, _, err = svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("y"), RequestID: "r1"})
	require.ErrorIs(t, err, decide.ErrRequestIDReused)
}

func TestShrinkNeedsForce(t *testing.T) {
	ctx := context.Background()
	svc, _ := newService(t, memory.New())
	_, err := svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/30", "10.0.1.0/30"}})
	require.NoError(t, err)
	a, _, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x"), Address: netip.MustParseAddr("10.0.1.1")})
	require.NoError(t, err)
	_, _, err = svc.UpdatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/30"}}, decide.UpdateMask{CIDRs: true}, "", false)
	require.ErrorIs(t, err, decide.ErrCIDRInUse)
	v, outside, err := svc.UpdatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/30"}}, decide.UpdateMask{CIDRs: true}, "", true)
	require.NoError(t, err)
	require.Len(t, outside, 1)
	require.Equal(t, a.Address, outside[0].Address)
	require.Equal(t, uint64(1), v.Stats.OutOfRange)
	require.False(t, svc.InRange("p", a.Address))
	_, err = svc.DeletePool(ctx, "p", "", false, false)
	require.ErrorIs(t, err, decide.ErrPoolNotEmpty)
	n, err := svc.DeletePool(ctx, "p", "", true, false)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func TestPoolsMayNotOverlap(t *testing.T) {
	ctx := context.Background()
	svc, _ := newService(t, memory.New())
	_, err := svc.CreatePool(ctx, "a", decide.PoolSpec{CIDRs: []string{"10.0.0.0/16"}})
	require.NoError(t, err)
	_, err = svc.CreatePool(ctx, "b", decide.PoolSpec{CIDRs: []string{"10.0.1.0/24"}})
	require.ErrorIs(t, err, decide.ErrPoolOverlap)
	_, err = svc.CreatePool(ctx, "b", decide.PoolSpec{CIDRs: []string{"10.0.1.0/24"}, AllowOverlap: true})
	require.ErrorIs(t, err, decide.ErrPoolOverlap, "both pools must allow overlap")
}

// TestConcurrentAllocateRelease has 64 goroutines allocating and releasing
// on a small pool; a model checks that no address is ever held by two
// owners at once and that the store agrees with the index at the end.
func TestConcurrentAllocateRelease(t *testing.T) {
	for _, kind := range []string{"memory", "bolt"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			var st store.Store = memory.New()
			rounds := 300
			if kind == "bolt" {
				b, err := bolt.Open(filepath.Join(t.TempDir(), "a.db"))
				require.NoError(t, err)
				t.Cleanup(func() { _ = b.Close() })
				st = b
				rounds = 60
			}
			svc, _ := newService(t, st)
			_, err := svc.CreatePool(ctx, "small", decide.PoolSpec{CIDRs: []string{"10.1.0.0/26"}})
			require.NoError(t, err)

			var mu sync.Mutex
			holder := map[netip.Addr]string{}
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for g := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 7))
					for r := range rounds {
						o := owner(fmt.Sprintf("g%d-r%d", g, r))
						a, _, err := svc.Allocate(ctx, decide.Request{Pool: "small", Owner: o})
						if err != nil {
							continue // exhausted at times: 64 holders on 62 addresses
						}
						mu.Lock()
						if h, busy := holder[a.Address]; busy {
							mu.Unlock()
							errs <- fmt.Errorf("%s handed to %s while held by %s", a.Address, o.Name, h)
							return
						}
						holder[a.Address] = o.Name
						mu.Unlock()
						if rng.IntN(4) == 0 {
							time.Sleep(time.Duration(rng.IntN(100)) * time.Microsecond) // load: jitter between calls
						}
						mu.Lock()
						delete(holder, a.Address)
						mu.Unlock()
						if _, _, err := svc.Release(ctx, decide.ReleaseRequest{Pool: "small", Address: a.Address, OwnerUID: o.UID}); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			snap, err := st.Snapshot(ctx)
			require.NoError(t, err)
			require.Empty(t, snap.Allocations)
			v, err := svc.GetPool("small")
			require.NoError(t, err)
			require.Equal(t, uint64(0), v.Stats.Allocated)
			require.Equal(t, v.Stats.Capacity.String(), v.Stats.Free.String())
		})
	}
}

// TestOwnerRecreatedGetsAddressWithNewEtag: a recreated owner (same name,
// new uid) keeps the address, but the allocation gets a new etag and uid,
// so a guarded release by someone who saw the old incarnation fails.
func TestOwnerRecreatedGetsAddressWithNewEtag(t *testing.T) {
	ctx := context.Background()
	svc, _ := newService(t, memory.New())
	_, err := svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}})
	require.NoError(t, err)
	old, _, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("web-0")})
	require.NoError(t, err)
	reborn := owner("web-0")
	reborn.UID = "uid-new"
	got, created, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: reborn})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, old.Address, got.Address)
	require.Equal(t, "uid-new", got.Owner.UID)
	require.NotEqual(t, old.Revision, got.Revision)

	_, _, err = svc.Release(ctx, decide.ReleaseRequest{Pool: "p", Address: old.Address, Etag: decide.Etag(old.Revision), OwnerUID: old.Owner.UID})
	require.ErrorIs(t, err, decide.ErrEtagMismatch)

	out, err := svc.BatchAllocate(ctx, []decide.Request{{Pool: "p", Owner: owner("web-0")}}, "")
	require.NoError(t, err)
	require.Equal(t, old.Address, out[0].Address)
	require.Equal(t, "uid-web-0", out[0].Owner.UID, "a batch hands it over too")
}

// losing is a store that fails the next `lose` commits with ErrConflict,
// as if another writer had got there first, and writes nothing for them.
type losing struct {
	*bolt.Store
	lose atomic.Int32
}

func (l *losing) Commit(ctx context.Context, txn store.Txn) (int64, error) {
	if l.lose.Add(-1) >= 0 {
		return 0, store.ErrConflict
	}
	return l.Store.Commit(ctx, txn)
}

// TestLostTransactionsAreCounted: an allocation whose commit loses is
// tried again, and every lost commit is counted, whether the request
// then succeeds or gives up.
func TestLostTransactionsAreCounted(t *testing.T) {
	ctx := context.Background()
	st := &losing{Store: memory.New()}
	svc, _ := newService(t, st)
	_, err := svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/29"}})
	require.NoError(t, err)
	require.Zero(t, svc.Counters().Conflicts)

	st.lose.Store(2)
	_, _, err = svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x")})
	require.NoError(t, err, "tried again after losing twice")
	require.Equal(t, uint64(2), svc.Counters().Conflicts)

	st.lose.Store(100)
	_, _, err = svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("y")})
	require.ErrorIs(t, err, decide.ErrConflict, "gives up after its retries")
	n := svc.Counters()
	require.Equal(t, uint64(2+4), n.Conflicts, "one try and three retries alone on the store")
	require.Zero(t, n.WatchRestarts)
	require.Zero(t, n.Rebuilds)
}

// gatedCommit holds every commit until gate opens or the commit's context
// ends, and tells when a commit has entered.
type gatedCommit struct {
	store.Store
	gate    chan struct{}
	entered chan struct{}
}

func (g *gatedCommit) Commit(ctx context.Context, txn store.Txn) (int64, error) {
	g.entered <- struct{}{}
	select {
	case <-g.gate:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return g.Store.Commit(ctx, txn)
}

// TestWaiterDoesNotInheritCancellation: a request for an owner whose
// allocation is already in flight waits for it; when the first request
// gives up, the second, whose own context is live, still gets an address.
func TestWaiterDoesNotInheritCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := &gatedCommit{Store: memory.New(), gate: make(chan struct{}), entered: make(chan struct{}, 16)}
		t.Cleanup(func() { st.Close() })
		close(st.gate)
		svc, _ := newService(t, st)
		_, err := svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}})
		require.NoError(t, err)
		<-st.entered
		st.gate = make(chan struct{})

		ctx1, cancel1 := context.WithCancel(ctx)
		first := make(chan error, 1)
		go func() {
			_, _, err := svc.Allocate(ctx1, decide.Request{Pool: "p", Owner: owner("x")})
			first <- err
		}()
		<-st.entered
		second := make(chan error, 1)
		go func() {
			_, _, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x")})
			second <- err
		}()
		// Every goroutine blocked: the first in its commit, the second
		// waiting on the first's answer (the first's is in flight, so
		// the second cannot have reserved an address of its own).
		synctest.Wait()
		require.Len(t, st.entered, 0, "the second request has not committed")
		cancel1()
		require.ErrorIs(t, <-first, context.Canceled)
		close(st.gate)
		require.NoError(t, <-second, "the second request's own context was never canceled")
	})
}

// TestPoolUpdateKeepsReuseDelay: released addresses stay out of reach for
// their reuse delay across a pool update, here one that changes labels only.
func TestPoolUpdateKeepsReuseDelay(t *testing.T) {
	ctx := context.Background()
	svc, _ := newService(t, memory.New())
	_, err := svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}, ReuseDelay: time.Hour})
	require.NoError(t, err)
	a, _, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x")})
	require.NoError(t, err)
	_, _, err = svc.Release(ctx, decide.ReleaseRequest{Pool: "p", Address: a.Address})
	require.NoError(t, err)
	_, _, err = svc.UpdatePool(ctx, "p", decide.PoolSpec{Labels: map[string]string{"k": "v"}}, decide.UpdateMask{Labels: true}, "", false)
	require.NoError(t, err)
	_, _, err = svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("y"), Address: a.Address})
	require.ErrorIs(t, err, ipam.ErrInReuseDelay)
}

// askedStore tells when a request id has been looked up.
type askedStore struct {
	*gatedCommit
	asked chan struct{}
}

func (a askedStore) GetRequest(ctx context.Context, id string) (store.Request, bool, error) {
	r, ok, err := a.gatedCommit.GetRequest(ctx, id)
	a.asked <- struct{}{}
	return r, ok, err
}

// TestRequestIDRaceAnswersReused: two different requests under one
// request id race past the look-up of the id; the one whose commit loses
// is told REQUEST_ID_REUSED, for an Allocate and for a BatchAllocate, not
// ABORTED after every retry.
func TestRequestIDRaceAnswersReused(t *testing.T) {
	ctx := context.Background()
	for _, batch := range []bool{false, true} {
		gated := &gatedCommit{Store: memory.New(), gate: make(chan struct{}), entered: make(chan struct{}, 64)}
		st := askedStore{gatedCommit: gated, asked: make(chan struct{}, 64)}
		close(gated.gate)
		svc, _ := newService(t, st)
		_, err := svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}})
		require.NoError(t, err)
		<-gated.entered
		gated.gate = make(chan struct{})
		errs := make(chan error, 2)
		start := func(name string) {
			go func() {
				req := decide.Request{Pool: "p", Owner: owner(name)}
				if batch {
					_, err := svc.BatchAllocate(ctx, []decide.Request{req}, "same-id")
					errs <- err
					return
				}
				req.RequestID = "same-id"
				_, _, err := svc.Allocate(ctx, req)
				errs <- err
			}()
		}
		start("x")
		<-st.asked
		<-gated.entered // x's commit waits at the gate
		start("y")
		<-st.asked // y found no record of the id
		close(gated.gate)
		first, second := <-errs, <-errs
		if first != nil {
			first, second = second, first
		}
		require.NoError(t, first, "batch=%v: one wins", batch)
		require.ErrorIs(t, second, decide.ErrRequestIDReused, "batch=%v", batch)
	}
}

// TestRestartWithInterleavedPools: an allocator restarted on a bolt file
// whose allocations were written to several pools in turn (the store
// hands them back in that order, unsorted) holds each pool's allocations,
// in address order, and goes on allocating after them.
func TestRestartWithInterleavedPools(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	st, err := bolt.Open(path)
	require.NoError(t, err)
	svc, _ := newService(t, st)
	pools := []string{"c", "a", "b"}
	for i, p := range pools {
		_, err := svc.CreatePool(ctx, p, decide.PoolSpec{CIDRs: []string{fmt.Sprintf("10.%d.0.0/24", i)}})
		require.NoError(t, err)
	}
	want := map[string][]netip.Addr{}
	for i := range 30 {
		p := pools[i%3]
		a, _, err := svc.Allocate(ctx, decide.Request{Pool: p, Owner: owner(fmt.Sprint("o", i))})
		require.NoError(t, err)
		want[p] = append(want[p], a.Address)
	}
	require.NoError(t, st.Close())

	st, err = bolt.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	svc, err = allocation.New(ctx, st)
	require.NoError(t, err)
	for _, p := range pools {
		got, _, err := svc.ListAllocations(p, allocation.Filter{}, allocation.Cursor{}, 100)
		require.NoError(t, err)
		var addrs []netip.Addr
		for _, a := range got {
			addrs = append(addrs, a.Address)
		}
		require.Equal(t, want[p], addrs, p)
		next, _, err := svc.Allocate(ctx, decide.Request{Pool: p, Owner: owner("after-" + p)})
		require.NoError(t, err)
		require.NotContains(t, want[p], next.Address, "a restart hands out a free address")
	}
}

// TestRestartSkipsAllocationsOfUnknownPool: an allocation the store holds
// for a pool it does not is left out (and logged), between allocations of
// a pool that is there.
func TestRestartSkipsAllocationsOfUnknownPool(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	pool := &store.Pool{ID: "a", CIDRs: []string{"10.0.0.0/24"}}
	put := func(p, addr, name string) store.Op {
		return store.Op{Kind: store.OpPutAllocation, Allocation: &store.Allocation{Pool: p, Address: netip.MustParseAddr(addr), Owner: owner(name)}}
	}
	_, err := st.Commit(ctx, store.Txn{Ops: []store.Op{
		{Kind: store.OpPutPool, Pool: pool},
		put("a", "10.0.0.1", "x"),
		put("ghost", "10.9.0.1", "y"),
		put("a", "10.0.0.2", "z"),
	}})
	require.NoError(t, err)
	svc, _ := newService(t, st)
	got, _, err := svc.ListAllocations("a", allocation.Filter{}, allocation.Cursor{}, 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, []string{"x", "z"}, []string{got[0].Owner.Name, got[1].Owner.Name})
	_, _, err = svc.ListAllocations("ghost", allocation.Filter{}, allocation.Cursor{}, 10)
	require.Error(t, err)
}

// startingStore is a store that prepares itself for commits after it is
// opened, as the bolt store does.
type startingStore struct {
	store.Store
	streamed atomic.Int32
	ready    chan struct{}
}

func (s *startingStore) StreamSnapshot(ctx context.Context, pools func([]store.Pool, []int) error, alloc func(*store.Allocation) error) (int64, []store.Quarantine, error) {
	s.streamed.Add(1)
	return s.Store.StreamSnapshot(ctx, pools, alloc)
}

func (s *startingStore) Ready(ctx context.Context) error {
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestNewSeesThroughTracing: the allocator, given its store traced (as
// the service does), starts from the store's streamed snapshot and does
// not count as started before the store is ready for commits.
func TestNewSeesThroughTracing(t *testing.T) {
	st := &startingStore{Store: memory.New(), ready: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := allocation.New(t.Context(), allocation.Traced(st))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("started (%v) before the store was ready", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(st.ready)
	require.NoError(t, <-done)
	require.Equal(t, int32(1), st.streamed.Load(), "the snapshot was streamed")
}
