package allocation_test

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/services/allocator/allocation"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/ipam"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/etcd"
)

// countedEtcd counts a replica's whole-store snapshots and pages.
type countedEtcd struct {
	*etcd.Store
	snapshots, pages atomic.Int32
}

func (c *countedEtcd) Snapshot(ctx context.Context) (*store.Snapshot, error) {
	c.snapshots.Add(1)
	return c.Store.Snapshot(ctx)
}

func (c *countedEtcd) PageAllocations(ctx context.Context, rev int64, pool string, after store.AllocationKey, limit int) (store.Page, error) {
	c.pages.Add(1)
	return c.Store.PageAllocations(ctx, rev, pool, after, limit)
}

// seedStore commits n allocations of pool from first on, 30 to a
// transaction (within etcd's default --max-txn-ops).
func seedStore(t *testing.T, st store.Store, pool string, first netip.Addr, n int) {
	t.Helper()
	a := first
	for done := 0; done < n; {
		var ops []store.Op
		for ; done < n && len(ops) < 30; done++ {
			ops = append(ops, store.Op{Kind: store.OpPutAllocation, Allocation: &store.Allocation{Pool: pool, Address: a, Owner: owner(fmt.Sprintf("%s-%d", pool, done))}})
			a = a.Next()
		}
		_, err := st.Commit(t.Context(), store.Txn{Ops: ops})
		require.NoError(t, err)
	}
}

// readSnapshot reads a watch's snapshot up to Synced.
func readSnapshot(t *testing.T, w *allocation.Watcher) (int64, []store.Allocation, int, error) {
	t.Helper()
	var (
		out    []store.Allocation
		chunks int
	)
	for {
		e := w.Next(t.Context())
		switch {
		case e.Err != nil:
			return 0, out, chunks, e.Err
		case e.Synced:
			return e.Revision, out, chunks, nil
		case e.Chunk != nil:
			out = append(out, e.Chunk.Allocations...)
			chunks++
		default:
			t.Fatalf("an event before Synced: %+v", e)
		}
	}
}

// pagedReplicas are two replicas on etcd, the second's store counted,
// with pools "a", "b" and "c" (IPv6) holding allocations in eleven
// chunks: two runs read from the store.
func pagedReplicas(t *testing.T) (a, b *allocation.Allocator, counted *countedEtcd, st *etcd.Store) {
	t.Helper()
	rs, stores := replicasOf(t, 2, func(i int, st store.Store) store.Store {
		if i == 0 {
			return st
		}
		counted = &countedEtcd{Store: st.(*etcd.Store)}
		return counted
	})
	a, b = rs[0], rs[1]
	ctx := t.Context()
	for id, cidr := range map[string]string{"a": "10.0.0.0/20", "b": "10.1.0.0/20", "c": "fd00::/112"} {
		_, err := a.CreatePool(ctx, id, decide.PoolSpec{CIDRs: []string{cidr}})
		require.NoError(t, err)
	}
	seedStore(t, stores[0], "a", netip.MustParseAddr("10.0.0.10"), 5000)
	seedStore(t, stores[0], "c", netip.MustParseAddr("fd00::10"), 40)
	seedStore(t, stores[0], "b", netip.MustParseAddr("10.1.0.10"), 300)
	require.NoError(t, b.Sync(ctx))
	return a, b, counted, stores[0]
}

// TestFollowerWatchOfEveryPoolReadsPages: a follower's watch of every
// pool reads the store a chunk at a time at one revision, not the whole
// store: what it sends is the store at that revision, commits made while
// it is sent come after Synced, and a watch that gets to a chunk the
// collector took reads it again at the same revision.
func TestFollowerWatchOfEveryPoolReadsPages(t *testing.T) {
	ctx := t.Context()
	a, b, counted, st := pagedReplicas(t)
	want, err := st.Snapshot(ctx)
	require.NoError(t, err)
	require.Len(t, want.Allocations, 5340)
	wholeBefore := counted.snapshots.Load()

	w1, err := b.Watch(ctx, "-", 0)
	require.NoError(t, err)
	defer w1.Close()
	w2, err := b.Watch(ctx, "-", 0)
	require.NoError(t, err)
	defer w2.Close()

	// Between the first chunk, read to fix the revision, and the rest.
	first := w1.Next(ctx)
	require.NotNil(t, first.Chunk)
	late, _, err := a.Allocate(ctx, decide.Request{Pool: "b", Owner: owner("late")})
	require.NoError(t, err)

	rev, got, chunks, err := readSnapshot(t, w1)
	require.NoError(t, err)
	got = append(first.Chunk.Allocations, got...)
	chunks++
	require.GreaterOrEqual(t, rev, want.Revision)
	require.Less(t, rev, late.Revision)
	require.Equal(t, want.Allocations, got, "the store at the snapshot's revision")
	require.Equal(t, 11, chunks)
	e := w1.Next(ctx)
	require.NoError(t, e.Err)
	require.Equal(t, store.EventPutAllocation, e.Type)
	require.Equal(t, late.Address, e.Allocation.Address, "a commit made while the snapshot is sent comes after it")

	require.Equal(t, int32(2), counted.pages.Load(), "two runs read")

	// w1 alone held the chunks of the first run; the second watch reads
	// them again in one run (and those of the last again if the
	// collector took them meanwhile), not a chunk at a time.
	runtime.GC()
	runtime.GC()
	pagesBefore := counted.pages.Load()
	rev2, got2, _, err := readSnapshot(t, w2)
	require.NoError(t, err)
	require.Equal(t, rev, rev2)
	require.Equal(t, want.Allocations, got2)
	reread := counted.pages.Load() - pagesBefore
	require.True(t, reread == 1 || reread == 2, "the first run read again, then maybe the last: %d reads", reread)
	require.Equal(t, wholeBefore, counted.snapshots.Load(), "no whole-store snapshot")
}

// TestFollowerWatchOfOnePoolReadsPages: so does a follower's watch of one
// pool, and it reads that pool's allocations alone.
func TestFollowerWatchOfOnePoolReadsPages(t *testing.T) {
	ctx := t.Context()
	_, b, counted, st := pagedReplicas(t)
	for pool, c := range map[string]struct{ chunks, pages int }{"a": {10, 2}, "b": {1, 1}, "c": {1, 1}} {
		wantRev, want := poolAt(t, st, pool)
		pagesBefore := counted.pages.Load()
		w, err := b.Watch(ctx, pool, 0)
		require.NoError(t, err)
		rev, got, n, err := readSnapshot(t, w)
		w.Close()
		require.NoError(t, err)
		require.Equal(t, wantRev, rev, "pool %s", pool)
		require.Equal(t, want, got, "pool %s", pool)
		require.Equal(t, c.chunks, n, "pool %s", pool)
		require.Equal(t, int32(c.pages), counted.pages.Load()-pagesBefore, "pool %s: a page per run of chunks", pool)
	}
}

// TestFollowerWatchSnapshotCompacted: when etcd compacts the revision of a
// follower's snapshot of every pool while it is sent, the watch ends
// with ErrRevisionTooOld, and the next watch takes a new snapshot rather
// than the shared one that can no longer be read.
func TestFollowerWatchSnapshotCompacted(t *testing.T) {
	ctx := t.Context()
	a, b, _, st := pagedReplicas(t)
	w, err := b.Watch(ctx, "-", 0)
	require.NoError(t, err)
	defer w.Close()
	require.NotNil(t, w.Next(ctx).Chunk)

	late, _, err := a.Allocate(ctx, decide.Request{Pool: "b", Owner: owner("late")})
	require.NoError(t, err)
	require.NoError(t, st.Compact(ctx, late.Revision))
	_, _, _, err = readSnapshot(t, w)
	require.ErrorIs(t, err, decide.ErrRevisionTooOld)
	require.ErrorIs(t, err, store.ErrCompacted)
	require.ErrorIs(t, w.Next(ctx).Err, decide.ErrRevisionTooOld, "and again after")

	again, err := b.Watch(ctx, "-", 0)
	require.NoError(t, err)
	defer again.Close()
	rev, got, _, err := readSnapshot(t, again)
	require.NoError(t, err)
	want, err := st.Snapshot(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, rev, late.Revision)
	require.Equal(t, want.Allocations, got)
}

// liveHeap is the heap the last collection found live.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// benchStore starts etcd with 95,000 allocations in 10 pools (50,000 in
// pool-0, 5,000 in each other) and returns what opens a store on it, and
// the pools' sizes.
func benchStore(b *testing.B) (open func() *etcd.Store, sizes map[string]int) {
	e := kubetest.StartEtcd(b, "--max-txn-ops=4096")
	ctx := b.Context()
	open = func() *etcd.Store {
		st, err := etcd.Open(etcd.Config{Endpoints: e.Endpoints(), Prefix: "/bench/"})
		require.NoError(b, err)
		b.Cleanup(func() { _ = st.Close() })
		return st
	}
	seeder := open()
	sizes = map[string]int{"pool-0": 50_000}
	for p := range 10 {
		id := fmt.Sprint("pool-", p)
		n := cmp.Or(sizes[id], 5_000)
		sizes[id] = n
		first := netip.AddrFrom4([4]byte{10, byte(p), 0, 1})
		_, err := seeder.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: id, CIDRs: []string{netip.PrefixFrom(first, 16).Masked().String()}}}}})
		require.NoError(b, err)
		for done := 0; done < n; {
			var ops []store.Op
			for ; done < n && len(ops) < 500; done++ {
				ops = append(ops, store.Op{Kind: store.OpPutAllocation, Allocation: &store.Allocation{Pool: id, Address: first,
					Owner: decide.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: fmt.Sprint("pod-", done), UID: fmt.Sprintf("%08x-0000-4000-8000-000000000000", done)}}})
				first = first.Next()
			}
			_, err := seeder.Commit(ctx, store.Txn{Ops: ops})
			require.NoError(b, err)
		}
	}
	return open, sizes
}

// BenchmarkFollowerLoad: a replica on etcd holding 95,000 allocations
// loads its state from the snapshot as it is decoded. peak-MB is the most heap in use above
// the level before, sampled every millisecond; held-MB what is live after.
func BenchmarkFollowerLoad(b *testing.B) {
	open, _ := benchStore(b)
	ctx := b.Context()
	for _, mode := range []string{"streamed"} {
		b.Run(mode, func(b *testing.B) {
			st := open()
			inUse := func() int64 {
				s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
				metrics.Read(s)
				return int64(s[0].Value.Uint64())
			}
			var peak, kept int64
			for b.Loop() {
				b.StopTimer()
				runtime.GC()
				base := inUse()
				var top atomic.Int64
				stop := make(chan struct{})
				var wg sync.WaitGroup
				wg.Go(func() {
					t := time.NewTicker(time.Millisecond)
					defer t.Stop()
					for {
						top.Store(max(top.Load(), inUse()))
						select {
						case <-stop:
							return
						case <-t.C:
						}
					}
				})
				b.StartTimer()
				svc, err := allocation.New(ctx, allocation.Traced(st))
				b.StopTimer()
				close(stop)
				wg.Wait()
				require.NoError(b, err)
				peak = max(peak, top.Load()-base)
				runtime.GC()
				kept = int64(liveHeap()) - base
				runtime.KeepAlive(svc)
				b.StartTimer()
			}
			b.ReportMetric(float64(peak)/1e6, "peak-MB")
			b.ReportMetric(float64(kept)/1e6, "held-MB")
		})
	}
}

// BenchmarkFollowerWatch: watches on a replica among others, on etcd
// holding 95,000 allocations in 10 pools (50,000 in pool-0, 5,000 in each
// other), of every pool and of pool-0, read a chunk at a time.
// held-MB is the most heap the watch held while it was sent, above what
// the replica held before it (live heap after a collection a quarter,
// half and three quarters of the way through).
func BenchmarkFollowerWatch(b *testing.B) {
	open, sizes := benchStore(b)
	ctx := b.Context()
	sizes["-"] = 95_000
	defer allocation.SetSnapshotReuse(0)()
	for _, pool := range []string{"-", "pool-0"} {
		for _, mode := range []struct {
			name string
			opts []allocation.Option
		}{{"paged", nil}} {
			b.Run(fmt.Sprintf("pool=%s/%s", pool, mode.name), func(b *testing.B) {
				svc, err := allocation.New(ctx, allocation.Traced(open()), append([]allocation.Option{allocation.WithFollow()}, mode.opts...)...)
				require.NoError(b, err)
				var peak int64
				chunks := sizes[pool] / allocation.ChunkSize
				for b.Loop() {
					b.StopTimer()
					runtime.GC()
					base := int64(liveHeap())
					b.StartTimer()
					w, err := svc.Watch(ctx, pool, 0)
					require.NoError(b, err)
					n := 0
					for {
						ev := w.Next(ctx)
						require.NoError(b, ev.Err)
						if ev.Synced {
							break
						}
						if n++; n%(chunks/4) == 0 && n < chunks {
							b.StopTimer()
							runtime.GC()
							peak = max(peak, int64(liveHeap())-base)
							b.StartTimer()
						}
					}
					require.Equal(b, (sizes[pool]+allocation.ChunkSize-1)/allocation.ChunkSize, n)
					w.Close()
				}
				b.ReportMetric(float64(peak)/1e6, "held-MB")
			})
		}
	}
}

// TestFollowerWatchesReadPagesTogether: watches of every pool on a
// follower that read one paged snapshot at once, while the collector takes
// chunks they have all passed, each send the whole of it.
func TestFollowerWatchesReadPagesTogether(t *testing.T) {
	ctx := t.Context()
	_, b, counted, st := pagedReplicas(t)
	want, err := st.Snapshot(ctx)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range 8 {
		w, err := b.Watch(ctx, "-", 0)
		require.NoError(t, err)
		defer w.Close()
		wg.Go(func() {
			var got []store.Allocation
			for {
				e := w.Next(ctx)
				if !assert.NoError(t, e.Err) || e.Synced {
					break
				}
				got = append(got, e.Chunk.Allocations...)
				if i%2 == 0 {
					runtime.GC()
				}
			}
			assert.Equal(t, want.Allocations, got, "watch %d", i)
		})
	}
	wg.Wait()
	require.Positive(t, counted.pages.Load())
}

// TestStreamedLoadMatchesSnapshot: a replica that loads etcd's snapshot
// as it is decoded holds what the store's snapshot holds: every pool's
// allocations, the quarantine still in force, and nothing of a pool that
// has no record.
func TestStreamedLoadMatchesSnapshot(t *testing.T) {
	ctx := t.Context()
	_, _, _, st := pagedReplicas(t)
	kept := netip.MustParseAddr("10.1.9.9")
	_, err := st.Commit(ctx, store.Txn{Ops: []store.Op{
		{Kind: store.OpPutAllocation, Allocation: &store.Allocation{Pool: "ghost", Address: netip.MustParseAddr("10.9.0.1"), Owner: owner("ghost")}},
		{Kind: store.OpPutQuarantine, Quarantine: &store.Quarantine{Pool: "b", Address: kept, Until: time.Now().Add(time.Hour)}},
	}})
	require.NoError(t, err)

	streamed, err := allocation.New(ctx, allocation.Traced(st))
	require.NoError(t, err)
	snap, err := st.Snapshot(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c"}, streamed.Pools())
	var want []store.Allocation
	for _, a := range snap.Allocations {
		if a.Pool != "ghost" {
			want = append(want, a)
		}
	}
	for _, p := range snap.Pools {
		v, err := streamed.GetPool(p.ID)
		require.NoError(t, err)
		require.Equal(t, p, v.Pool, "pool %s", p.ID)
	}
	gotList, _, err := streamed.ListAllocations("-", allocation.Filter{}, allocation.Cursor{}, 10_000)
	require.NoError(t, err)
	require.Len(t, gotList, 5340)
	require.Equal(t, want, gotList)
	_, _, err = streamed.Allocate(ctx, decide.Request{Pool: "b", Owner: owner("wants-kept"), Address: kept})
	require.ErrorIs(t, err, ipam.ErrInReuseDelay, "the quarantine holds")
}

// poolAt reads pool's allocations from st, page by page, at one revision.
func poolAt(t *testing.T, st store.Store, pool string) (int64, []store.Allocation) {
	t.Helper()
	var (
		rev   int64
		out   []store.Allocation
		after store.AllocationKey
	)
	for {
		pg, err := st.PageAllocations(t.Context(), rev, pool, after, 0)
		require.NoError(t, err)
		rev = pg.Revision
		out = append(out, pg.Allocations...)
		if !pg.More {
			return rev, out
		}
		last := pg.Allocations[len(pg.Allocations)-1]
		after = store.AllocationKey{Pool: last.Pool, Address: last.Address}
	}
}
