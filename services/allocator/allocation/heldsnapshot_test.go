package allocation_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/allocation"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/bolt"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
)

// recorder keeps every successful commit's changes to allocations, by
// revision: the state of a pool at any revision can be replayed from it.
type recorder struct {
	store.Store
	mu  sync.Mutex
	log []recorded
	// snapshots counts the store snapshots taken.
	snapshots int
}

type recorded struct {
	rev  int64
	put  bool
	pool string
	addr netip.Addr
	name string
}

func (r *recorder) Commit(ctx context.Context, txn store.Txn) (int64, error) {
	rev, err := r.Store.Commit(ctx, txn)
	if err != nil {
		return rev, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, op := range txn.Ops {
		switch op.Kind {
		case store.OpPutAllocation:
			r.log = append(r.log, recorded{rev: rev, put: true, pool: op.Allocation.Pool, addr: op.Allocation.Address, name: op.Allocation.Owner.Name})
		case store.OpDeleteAllocation:
			r.log = append(r.log, recorded{rev: rev, pool: op.PoolID, addr: op.Address})
		}
	}
	return rev, nil
}

func (r *recorder) Snapshot(ctx context.Context) (*store.Snapshot, error) {
	r.mu.Lock()
	r.snapshots++
	r.mu.Unlock()
	return r.Store.Snapshot(ctx)
}

// stateAt replays pool's allocations ("-": every pool's) up to and
// including rev.
func (r *recorder) stateAt(pool string, rev int64) map[netip.Addr]string {
	r.mu.Lock()
	log := append([]recorded(nil), r.log...)
	r.mu.Unlock()
	sort.SliceStable(log, func(i, j int) bool { return log[i].rev < log[j].rev })
	state := map[netip.Addr]string{}
	for _, c := range log {
		if c.rev > rev || (c.pool != pool && pool != "-") {
			continue
		}
		if c.put {
			state[c.addr] = c.name
		} else {
			delete(state, c.addr)
		}
	}
	return state
}

// TestWatchSnapshotFromMemoryIsExact: a watch of one pool, or of every
// pool, takes its snapshot from the allocator's memory, not from the
// store, while allocations and releases commit concurrently in several
// pools; what it sends before SYNCED at revision R is exactly the state at
// R in the store's own history (no commit in flight missed, none after R
// included), and the changes after it bring it to the final state.
func TestWatchSnapshotFromMemoryIsExact(t *testing.T) {
	for _, pool := range []string{"p", "-"} {
		t.Run("pool="+pool, func(t *testing.T) { testWatchSnapshotFromMemoryIsExact(t, pool) })
	}
}

func testWatchSnapshotFromMemoryIsExact(t *testing.T, watched string) {
	defer allocation.SetSnapshotReuse(0)()
	bs, err := bolt.Open(t.TempDir() + "/a.db")
	require.NoError(t, err)
	t.Cleanup(func() { _ = bs.Close() })
	rec := &recorder{Store: bs}
	svc, _ := newService(t, rec)
	loaded := rec.snapshots // the one New loads from
	ctx := context.Background()
	_, err = svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}})
	require.NoError(t, err)
	_, err = svc.CreatePool(ctx, "other", decide.PoolSpec{CIDRs: []string{"10.1.0.0/24"}})
	require.NoError(t, err)
	_, err = svc.CreatePool(ctx, "empty", decide.PoolSpec{CIDRs: []string{"10.2.0.0/24"}})
	require.NoError(t, err)

	stop := make(chan struct{})
	var workers sync.WaitGroup
	for w := range 8 {
		workers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for {
				select {
				case <-stop:
					return
				default:
				}
				pool := "p"
				if rng.IntN(4) == 0 {
					pool = "other"
				}
				o := owner(fmt.Sprintf("o%d", rng.IntN(150)))
				if rng.IntN(2) == 0 {
					_, _, _ = svc.Allocate(ctx, decide.Request{Pool: pool, Owner: o})
				} else {
					_, _, _ = svc.Release(ctx, decide.ReleaseRequest{Pool: pool, Owner: o, AllowMissing: true})
				}
			}
		})
	}

	type taken struct {
		rev  int64
		seen map[netip.Addr]string
	}
	var snaps []taken
	for range 60 {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		events, err := svc.Watch(wctx, watched, 0)
		require.NoError(t, err)
		seen := map[netip.Addr]string{}
		for e := range events.All(wctx) {
			require.NoError(t, e.Err)
			if e.Synced {
				snaps = append(snaps, taken{rev: e.Revision, seen: seen})
				break
			}
			for _, a := range e.Chunk.Allocations {
				seen[a.Address] = a.Owner.Name
			}
		}
		cancel()
		time.Sleep(5 * time.Millisecond) // load pacing: the writers commit between two snapshots
	}

	// One more watch that follows the changes to the end.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := svc.Watch(wctx, watched, 0)
	require.NoError(t, err)
	live := map[netip.Addr]string{}
	var synced int64
	for e := range events.All(wctx) {
		require.NoError(t, e.Err)
		if e.Synced {
			synced = e.Revision
			break
		}
		for _, a := range e.Chunk.Allocations {
			live[a.Address] = a.Owner.Name
		}
	}
	close(stop)
	workers.Wait()

	require.Len(t, snaps, 60)
	distinct := map[int64]bool{}
	for i, s := range snaps {
		require.Equal(t, rec.stateAt(watched, s.rev), s.seen, "snapshot %d at revision %d", i, s.rev)
		distinct[s.rev] = true
	}
	require.Greater(t, len(distinct), 30, "the snapshots were taken while the pool changed")
	require.Equal(t, loaded, rec.snapshots, "a watch decoded the store")

	final, _, err := svc.ListAllocations(watched, allocation.Filter{}, allocation.Cursor{}, 1000)
	require.NoError(t, err)
	want := map[netip.Addr]string{}
	for _, a := range final {
		want[a.Address] = a.Owner.Name
	}
	require.Equal(t, rec.stateAt(watched, 1<<62), want)
	dctx, dcancel := context.WithTimeout(wctx, 10*time.Second)
	defer dcancel()
	for !equal(live, want) {
		e := events.Next(dctx)
		if dctx.Err() != nil {
			t.Fatalf("the watch did not reach the final state: %d allocations, want %d", len(live), len(want))
		}
		require.NoError(t, e.Err)
		require.Greater(t, e.Revision, synced)
		if e.Type == store.EventDeleteAllocation {
			delete(live, e.Allocation.Address)
		} else {
			live[e.Allocation.Address] = e.Allocation.Owner.Name
		}
	}
}

func equal(a, b map[netip.Addr]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestWatchSnapshotChunks: a snapshot comes in chunks of ChunkSize in
// address order, each allocation once, for a pool's watch and a watch of
// every pool (its chunks run on from one pool into the next), both from
// memory; watches that start together share the chunks themselves.
func TestWatchSnapshotChunks(t *testing.T) {
	ctx := context.Background()
	svc, _ := newService(t, memory.New())
	_, err := svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/20"}})
	require.NoError(t, err)
	_, err = svc.CreatePool(ctx, "q", decide.PoolSpec{CIDRs: []string{"10.1.0.0/24"}})
	require.NoError(t, err)
	fill := func(pool string, from, n int) {
		reqs := make([]decide.Request, n)
		for i := range reqs {
			reqs[i] = decide.Request{Pool: pool, Owner: owner(fmt.Sprintf("%s%d", pool, from+i))}
		}
		_, err := svc.BatchAllocate(ctx, reqs, "")
		require.NoError(t, err)
	}
	chunks := func(pool string) [][]store.Allocation {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		events, err := svc.Watch(wctx, pool, 0)
		require.NoError(t, err)
		var out [][]store.Allocation
		for e := range events.All(wctx) {
			require.NoError(t, e.Err)
			if e.Synced {
				return out
			}
			out = append(out, e.Chunk.Allocations)
		}
		t.Fatal("no SYNCED")
		return nil
	}
	check := func(got [][]store.Allocation, sizes ...int) {
		t.Helper()
		var seen []store.Allocation
		for i, c := range got {
			require.Len(t, c, sizes[i], "chunk %d", i)
			seen = append(seen, c...)
		}
		require.Len(t, got, len(sizes))
		for i := 1; i < len(seen); i++ {
			require.True(t, seen[i-1].Pool < seen[i].Pool || (seen[i-1].Pool == seen[i].Pool && seen[i-1].Address.Less(seen[i].Address)), "order at %d", i)
		}
	}

	restore := allocation.SetSnapshotReuse(0)
	check(chunks("p"))
	fill("p", 0, 2*allocation.ChunkSize)
	check(chunks("p"), allocation.ChunkSize, allocation.ChunkSize)
	fill("p", 2*allocation.ChunkSize, 300)
	fill("q", 0, 100)
	check(chunks("p"), allocation.ChunkSize, allocation.ChunkSize, 300)
	check(chunks("q"), 100)
	check(chunks("-"), allocation.ChunkSize, allocation.ChunkSize, 1324+100-2*allocation.ChunkSize)

	// Watches that start within the reuse period share the chunks.
	restore()
	first := func() *allocation.SnapshotChunk {
		wctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		events, err := svc.Watch(wctx, "p", 0)
		require.NoError(t, err)
		e := events.Next(wctx)
		require.NotNil(t, e.Chunk)
		return e.Chunk
	}
	require.Same(t, first(), first())

	// A chunk no watch holds any more may be collected; a later watch of
	// the same snapshot gets it cut again, the same.
	before := chunks("p")
	runtime.GC()
	runtime.GC()
	require.Equal(t, before, chunks("p"))
}

// A watch shares a recent snapshot only when it holds every commit
// acknowledged before the watch began: an allocation made between two
// watches is in the second's snapshot (before SYNCED), not a change after
// it, while two watches with no commit between share one snapshot.
func TestWatchSnapshotHoldsWhatWasAcknowledgedBefore(t *testing.T) {
	svc, _ := newService(t, memory.New())
	ctx := context.Background()
	_, err := svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}})
	require.NoError(t, err)
	snapshot := func() (addrs []string, first *allocation.SnapshotChunk) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w, err := svc.Watch(wctx, "p", 0)
		require.NoError(t, err)
		for {
			e := w.Next(wctx)
			require.NoError(t, e.Err)
			if e.Synced {
				return addrs, first
			}
			require.NotNil(t, e.Chunk, "only the snapshot comes before SYNCED")
			if first == nil {
				first = e.Chunk
			}
			for _, a := range e.Chunk.Allocations {
				addrs = append(addrs, a.Address.String())
			}
		}
	}
	a, _, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("a")})
	require.NoError(t, err)
	got, c1 := snapshot()
	require.Equal(t, []string{a.Address.String()}, got)
	_, c2 := snapshot()
	require.Same(t, c1, c2, "no commit between: one snapshot shared")

	b, _, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("b")})
	require.NoError(t, err)
	got, c3 := snapshot()
	require.ElementsMatch(t, []string{a.Address.String(), b.Address.String()}, got)
	require.NotSame(t, c1, c3)
}
