package server_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	allocserver "github.com/plexusnet/plexus/services/allocator/server"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// countingStore counts the snapshots taken of the store.
type countingStore struct {
	store.Store
	snapshots, poolSnapshots atomic.Int64
}

func (c *countingStore) Snapshot(ctx context.Context) (*store.Snapshot, error) {
	c.snapshots.Add(1)
	return c.Store.Snapshot(ctx)
}

// PageAllocations counts a read of one pool's first page as a snapshot of
// the pool, and a read of every pool's as one of the store.
func (c *countingStore) PageAllocations(ctx context.Context, rev int64, pool string, after store.AllocationKey, limit int) (store.Page, error) {
	if after == (store.AllocationKey{}) {
		if pool == "" {
			c.snapshots.Add(1)
		} else {
			c.poolSnapshots.Add(1)
		}
	}
	return c.Store.PageAllocations(ctx, rev, pool, after, limit)
}

// seed allocates n addresses in pool, in batches.
func seed(t *testing.T, e *env, pool string, n int) {
	t.Helper()
	for done := 0; done < n; {
		batch := &allocatorv1.BatchAllocateRequest{}
		for ; done < n && len(batch.Requests) < 10000; done++ {
			batch.Requests = append(batch.Requests, &allocatorv1.AllocateRequest{Pool: "pools/" + pool, Owner: pod("ns", fmt.Sprintf("w-%d", done))})
		}
		_, err := e.client.BatchAllocate(ctx(t), batch)
		require.NoError(t, err)
	}
}

// TestManyWatchesShareOneSnapshot: 200 watches of a pool that start
// together on a store of 20,000 allocations do not decode the store (the
// snapshot comes from memory), and the heap stays far below what 200
// decoded copies would take; each gets its pool's snapshot and SYNCED.
// 50 watches of every pool decode the store a few times, not 50.
func TestManyWatchesShareOneSnapshot(t *testing.T) {
	var counted *countingStore
	e := start(t, withStore(func(s store.Store) store.Store { counted = &countingStore{Store: s}; return counted }))
	e.createPool(t, "big", poolV4("10.0.0.0/16"))
	e.createPool(t, "small", poolV4("10.1.0.0/24"))
	seed(t, e, "big", 20000)
	e.allocate(t, "small", pod("ns", "only"))

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // the heap's high-water mark while the watches start
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()

	before := counted.snapshots.Load()
	wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const watches = 200
	var wg sync.WaitGroup
	errs := make(chan error, watches)
	for range watches {
		wg.Go(func() {
			stream, err := e.client.WatchAllocations(wctx, &allocatorv1.WatchAllocationsRequest{Pool: "pools/small"})
			if err != nil {
				errs <- err
				return
			}
			got := 0
			for {
				ev, err := stream.Recv()
				if err != nil {
					errs <- err
					return
				}
				if ev.GetType() == allocatorv1.EventType_EVENT_TYPE_SYNCED {
					if got != 1 {
						errs <- fmt.Errorf("snapshot of %d allocations, want 1", got)
					}
					return
				}
				got++
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	taken := counted.snapshots.Load() - before
	require.Zero(t, taken, "watches of one pool decoded the store %d times: they are served from memory", taken)
	grew := int64(peak.Load()) - int64(base.HeapAlloc)
	t.Logf("%d watches: %d store snapshots, heap peak +%d MB", watches, taken, grew>>20)
	require.Less(t, grew, int64(150<<20), "heap grew by %d MB", grew>>20)

	// Watches of every pool ("-") decode the store, once for all of them.
	before = counted.snapshots.Load()
	for range 50 {
		wg.Go(func() {
			stream, err := e.client.WatchAllocations(wctx, &allocatorv1.WatchAllocationsRequest{Pool: "pools/-"})
			if !assert.NoError(t, err) {
				return
			}
			got := 0
			for {
				ev, err := stream.Recv()
				if !assert.NoError(t, err) {
					return
				}
				if ev.GetType() == allocatorv1.EventType_EVENT_TYPE_SYNCED {
					assert.Equal(t, 20001, got)
					return
				}
				got++
			}
		})
	}
	wg.Wait()
	taken = counted.snapshots.Load() - before
	require.LessOrEqual(t, taken, int64(5), "%d store snapshots for 50 watches of every pool started together", taken)
}

// TestWatchLimit: past --max-watches a watch is RESOURCE_EXHAUSTED with
// reason TOO_MANY_WATCHES; a closed watch frees its place.
func TestWatchLimit(t *testing.T) {
	e := start(t, withServer(allocserver.WithMaxWatches(2)))
	e.createPool(t, "p", poolV4("10.0.0.0/24"))
	open := func(c context.Context) (allocatorv1.AllocatorService_WatchAllocationsClient, error) {
		stream, err := e.client.WatchAllocations(c, &allocatorv1.WatchAllocationsRequest{Pool: "pools/p"})
		if err != nil {
			return nil, err
		}
		_, err = stream.Recv() // SYNCED of the empty pool, or the refusal
		return stream, err
	}
	c1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	_, err := open(c1)
	require.NoError(t, err)
	c2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	_, err = open(c2)
	require.NoError(t, err)

	_, err = open(ctx(t))
	requireStatus(t, err, codes.ResourceExhausted, "TOO_MANY_WATCHES", "")
	gauge := func() float64 {
		return sample(t, httpGet(t, "http://"+e.httpAddr+"/metrics"), "plexus_allocator_watches_open")
	}
	require.Equal(t, 2.0, gauge(), "the refused watch is not counted")

	cancel1()
	require.Eventually(t, func() bool { return gauge() == 1 }, 10*time.Second, 20*time.Millisecond, "a closed watch is no longer counted")
	require.Eventually(t, func() bool {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := open(c)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "a closed watch does not free its place")
}

// slowHistory is the event history of the slow-watch tests, and
// slowChanges the changes made while their watch does not read: enough
// to leave it more than half the history behind once the stream's
// buffers are full (the client's flow-control window fixed at 64 KiB;
// gRPC's dynamic window would hold up to 16 MiB), few enough that what
// it missed is still kept.
const (
	slowHistory = 6000
	slowChanges = 5000
)

// slowWatch opens a watch of pool p from its current revision, makes
// slowChanges allocations without reading it, then reads it to its end.
// It returns the events received and the error that ended the stream.
func slowWatch(ctx context.Context, c client) ([]*allocatorv1.WatchAllocationsResponse, error) {
	list, err := c.ListAllocations(ctx, &allocatorv1.ListAllocationsRequest{Pool: "pools/p"})
	if err != nil {
		return nil, err
	}
	stream, err := c.WatchAllocations(ctx, &allocatorv1.WatchAllocationsRequest{Pool: "pools/p", StartRevision: list.GetRevision()})
	if err != nil {
		return nil, err
	}
	for i := 0; i < slowChanges; i += 500 {
		batch := &allocatorv1.BatchAllocateRequest{}
		for j := i; j < i+500; j++ {
			batch.Requests = append(batch.Requests, &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: pod("slow", fmt.Sprint(j))})
		}
		if _, err := c.BatchAllocate(ctx, batch); err != nil {
			return nil, err
		}
	}
	var got []*allocatorv1.WatchAllocationsResponse
	for {
		ev, err := stream.Recv()
		if err != nil {
			return got, err
		}
		if ev.GetType() != allocatorv1.EventType_EVENT_TYPE_ADDED {
			continue // progress
		}
		got = append(got, ev)
		if len(got) > slowChanges {
			return got, errors.New("the slow watch was never cut off")
		}
	}
}

// A watch that does not read while the pool changes is cut off with
// RESOURCE_EXHAUSTED WATCH_TOO_SLOW before it falls out of the history:
// memory stays bounded, and resumed from the last resume_revision it
// received, it gets every later change, none twice.
func TestSlowWatchIsCutOffAndResumes(t *testing.T) {
	e := start(t, withHistory(slowHistory), withFixedWindow())
	e.createPool(t, "p", poolV4("10.0.0.0/16"))
	got, err := slowWatch(ctx(t), e.client)
	requireStatus(t, err, codes.ResourceExhausted, "WATCH_TOO_SLOW", "")
	require.Less(t, len(got), slowChanges, "cut off before it caught up")

	seen := map[string]int64{} // address → revision
	for _, ev := range got {
		_, dup := seen[ev.GetAllocation().GetAddress()]
		require.False(t, dup, "the first stream repeats %s", ev.GetAllocation().GetAddress())
		seen[ev.GetAllocation().GetAddress()] = ev.GetRevision()
	}
	// Resuming from resume_revision repeats the rest of that revision's
	// commit (a batch is one revision) rather than missing any of it.
	last := got[len(got)-1].GetResumeRevision()
	stream, err := e.client.WatchAllocations(ctx(t), &allocatorv1.WatchAllocationsRequest{Pool: "pools/p", StartRevision: last})
	require.NoError(t, err)
	for len(seen) < slowChanges {
		ev, err := stream.Recv()
		require.NoError(t, err, "after %d of %d allocations", len(seen), slowChanges)
		if ev.GetType() != allocatorv1.EventType_EVENT_TYPE_ADDED {
			continue
		}
		require.Greater(t, ev.GetRevision(), last, "the resumed stream starts after its start revision")
		addr := ev.GetAllocation().GetAddress()
		if rev, dup := seen[addr]; dup {
			require.Equal(t, last+1, rev, "only the commit of the resume point repeats, not %s", addr)
			continue
		}
		seen[addr] = ev.GetRevision()
	}
	require.Len(t, seen, slowChanges, "every allocation made while the watch was slow arrived once")
}

// TestBatchSnapshot: with batch_snapshot a watch gets the same snapshot
// as without, in ADDED messages of at most 512 allocations (snapshot
// field); either way the snapshot's messages say to resume from 0 (a new
// snapshot), and the changes after SYNCED are single events.
func TestBatchSnapshot(t *testing.T) {
	e := start(t)
	e.createPool(t, "p", poolV4("10.0.0.0/20"))
	seed(t, e, "p", 1300)

	read := func(batch bool) (got []string, messages int, synced *allocatorv1.WatchAllocationsResponse, stream allocatorv1.AllocatorService_WatchAllocationsClient) {
		stream, err := e.client.WatchAllocations(ctx(t), &allocatorv1.WatchAllocationsRequest{Pool: "pools/p", BatchSnapshot: batch})
		require.NoError(t, err)
		for {
			ev, err := stream.Recv()
			require.NoError(t, err)
			if ev.GetType() == allocatorv1.EventType_EVENT_TYPE_SYNCED {
				return got, messages, ev, stream
			}
			require.Equal(t, allocatorv1.EventType_EVENT_TYPE_ADDED, ev.GetType())
			require.Zero(t, ev.GetResumeRevision(), "a snapshot event says to resume from a new snapshot")
			messages++
			if batch {
				require.Nil(t, ev.GetAllocation())
				require.LessOrEqual(t, len(ev.GetSnapshot()), 512)
				for _, a := range ev.GetSnapshot() {
					got = append(got, a.GetAddress()+" "+a.GetOwner().GetName()+" "+a.GetEtag())
				}
			} else {
				require.Empty(t, ev.GetSnapshot())
				a := ev.GetAllocation()
				require.Equal(t, a.GetRevision(), ev.GetRevision())
				got = append(got, a.GetAddress()+" "+a.GetOwner().GetName()+" "+a.GetEtag())
			}
		}
	}
	single, n1, s1, _ := read(false)
	batched, n2, s2, stream := read(true)
	require.Len(t, single, 1300)
	require.Equal(t, single, batched)
	require.Equal(t, 1300, n1)
	require.Equal(t, 3, n2)
	require.Equal(t, s1.GetRevision(), s2.GetRevision())

	a := e.allocate(t, "p", pod("ns", "after"))
	ev, err := stream.Recv()
	require.NoError(t, err)
	require.Equal(t, allocatorv1.EventType_EVENT_TYPE_ADDED, ev.GetType())
	require.Equal(t, a.GetAddress(), ev.GetAllocation().GetAddress())
	require.Empty(t, ev.GetSnapshot())
}

// TestBurstOfWatchesReleasesMemory: the server tells its burst of the
// watches that open and close, and when a burst of watches is down to a
// quarter, the memory is released. When and how often (a few watches
// release nothing, a burst releases once) is TestBurst's, on fake time.
func TestBurstOfWatchesReleasesMemory(t *testing.T) {
	var released atomic.Int64
	e := start(t, withServer(allocserver.WithReleaseMemory(func() { released.Add(1) })))
	e.createPool(t, "p", poolV4("10.0.0.0/24"))
	open := func(n int) []context.CancelFunc {
		cancels := make([]context.CancelFunc, n)
		for i := range cancels {
			c, cancel := context.WithCancel(context.Background())
			cancels[i] = cancel
			stream, err := e.client.WatchAllocations(c, &allocatorv1.WatchAllocationsRequest{Pool: "pools/p"})
			require.NoError(t, err)
			ev, err := stream.Recv()
			require.NoError(t, err)
			require.Equal(t, allocatorv1.EventType_EVENT_TYPE_SYNCED, ev.GetType())
		}
		return cancels
	}
	closeAll := func(cancels []context.CancelFunc) {
		for _, c := range cancels {
			c()
		}
	}
	gauge := func() float64 {
		return sample(t, httpGet(t, "http://"+e.httpAddr+"/metrics"), "plexus_allocator_watches_open")
	}
	closeAll(open(10))
	require.Eventually(t, func() bool { return gauge() == 0 }, 5*time.Second, 10*time.Millisecond, "the server saw the watches close")

	burst := open(100)
	require.Equal(t, 100.0, gauge(), "a burst: 100 watches open at once")
	closeAll(burst)
	require.Eventually(t, func() bool { return released.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
}

// TestWatchCancelledMidSnapshotLetsGo: a client that goes away in the
// middle of a batched snapshot leaves no goroutine behind (the watch's,
// the one encoding ahead, the sender's).
func TestWatchCancelledMidSnapshotLetsGo(t *testing.T) {
	e := start(t)
	e.createPool(t, "p", poolV4("10.0.0.0/18"))
	seed(t, e, "p", 8000)
	base := runtime.NumGoroutine()
	for range 20 {
		c, cancel := context.WithCancel(context.Background())
		stream, err := e.client.WatchAllocations(c, &allocatorv1.WatchAllocationsRequest{Pool: "pools/p", BatchSnapshot: true})
		require.NoError(t, err)
		ev, err := stream.Recv()
		require.NoError(t, err)
		require.Len(t, ev.GetSnapshot(), 512)
		cancel()
	}
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= base+2 }, 10*time.Second, 20*time.Millisecond,
		"goroutines: %d, %d before the watches", runtime.NumGoroutine(), base)
}

// withStuckWatch starts a server with opts, pools big (8,000 allocations)
// and small (empty), and a watch of big whose client reads one message of
// its snapshot, then nothing (8,000 messages do not fit the flow-control
// window): it holds its turn until unstick ends it.
func withStuckWatch(t *testing.T, opts ...allocserver.Option) (e *env, unstick func()) {
	t.Helper()
	e = start(t, withFixedWindow(), withServer(opts...))
	e.createPool(t, "big", poolV4("10.0.0.0/18"))
	e.createPool(t, "small", poolV4("10.1.0.0/24"))
	seed(t, e, "big", 8000)
	stuckCtx, unstick := context.WithCancel(context.Background())
	stuck, err := e.client.WatchAllocations(stuckCtx, &allocatorv1.WatchAllocationsRequest{Pool: "pools/big"})
	require.NoError(t, err)
	_, err = stuck.Recv()
	require.NoError(t, err)
	return e, unstick
}

// TestSnapshotsTakeTurns: watches send their snapshots a few at a time; a
// watch waits for its turn, a closed watch gives its turn back, and a
// watch whose snapshot is not read in time loses its turn to the next.
func TestSnapshotsTakeTurns(t *testing.T) {
	for _, hold := range []time.Duration{time.Hour, 300 * time.Millisecond} {
		e, unstick := withStuckWatch(t, allocserver.WithSnapshotTurns(1, hold))
		defer unstick()

		syncs := func(c context.Context) error {
			stream, err := e.client.WatchAllocations(c, &allocatorv1.WatchAllocationsRequest{Pool: "pools/small"})
			if err != nil {
				return err
			}
			ev, err := stream.Recv()
			if err == nil && ev.GetType() != allocatorv1.EventType_EVENT_TYPE_SYNCED {
				return fmt.Errorf("first event %v, want SYNCED", ev.GetType())
			}
			return err
		}
		metrics := func() string { return httpGet(t, "http://"+e.httpAddr+"/metrics") }
		if hold == time.Hour {
			c, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			require.Equal(t, codes.DeadlineExceeded, status.Code(syncs(c)), "the turn is the stuck watch's")
			cancel()
			unstick()
			require.NoError(t, syncs(ctx(t)), "a watch that closes gives its turn back")
			require.Zero(t, sample(t, metrics(), "plexus_allocator_watch_turns_timed_out_total"))
			continue
		}
		require.NoError(t, syncs(ctx(t)), "the stuck watch's turn runs out")
		m := metrics()
		require.Equal(t, 1.0, sample(t, m, "plexus_allocator_watch_turns_timed_out_total"))
		require.Equal(t, 2.0, sample(t, m, "plexus_allocator_watch_turn_wait_seconds_count"))
		require.GreaterOrEqual(t, sample(t, m, "plexus_allocator_watch_turn_wait_seconds_sum"), 0.2)

		// A watch resumed from a revision has no snapshot to send, and no
		// turn to wait for.
		_, err := e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/small", Owner: &allocatorv1.Owner{Kind: "Pod", Namespace: "ns", Name: "late"}})
		require.NoError(t, err)
		turnsBefore := sample(t, metrics(), "plexus_allocator_watch_turn_wait_seconds_count")
		resumed, err := e.client.WatchAllocations(ctx(t), &allocatorv1.WatchAllocationsRequest{Pool: "pools/small", StartRevision: 1})
		require.NoError(t, err)
		ev, err := resumed.Recv()
		require.NoError(t, err)
		require.Equal(t, "late", ev.GetAllocation().GetOwner().GetName())
		require.Equal(t, turnsBefore, sample(t, metrics(), "plexus_allocator_watch_turn_wait_seconds_count"))
	}
}

// TestFollowerWatchReadsOnlyItsPool: a replica that shares its store
// (etcd) cannot take a watch's snapshot from memory; it reads the pool's
// own records from the store, once for the watches that start together,
// and never decodes the whole store for a watch of one pool.
func TestFollowerWatchReadsOnlyItsPool(t *testing.T) {
	var (
		counted *countingStore
		e       *env
	)
	e = start(t,
		withSharedStore(func(ctx context.Context) (int64, error) {
			return e.store.Revision(ctx)
		}),
		withStore(func(s store.Store) store.Store { counted = &countingStore{Store: s}; return counted }))
	e.createPool(t, "big", poolV4("10.0.0.0/16"))
	e.createPool(t, "small", poolV4("10.1.0.0/24"))
	seed(t, e, "big", 5000)
	e.allocate(t, "small", pod("ns", "a"))
	e.allocate(t, "small", pod("ns", "b"))

	before := counted.snapshots.Load()
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			stream, err := e.client.WatchAllocations(ctx(t), &allocatorv1.WatchAllocationsRequest{Pool: "pools/small"})
			if !assert.NoError(t, err) {
				return
			}
			var names []string
			for {
				ev, err := stream.Recv()
				if !assert.NoError(t, err) {
					return
				}
				if ev.GetType() == allocatorv1.EventType_EVENT_TYPE_SYNCED {
					assert.Equal(t, []string{"a", "b"}, names)
					return
				}
				names = append(names, ev.GetAllocation().GetOwner().GetName())
			}
		})
	}
	wg.Wait()
	require.Equal(t, before, counted.snapshots.Load(), "no whole-store snapshot for watches of one pool")
	require.Positive(t, counted.poolSnapshots.Load())
	require.LessOrEqual(t, counted.poolSnapshots.Load(), int64(5), "50 watches started together share the pool's snapshot")

	// What a watch misses between its snapshot and now comes after it.
	stream, err := e.client.WatchAllocations(ctx(t), &allocatorv1.WatchAllocationsRequest{Pool: "pools/small"})
	require.NoError(t, err)
	e.allocate(t, "small", pod("ns", "c"))
	var names []string
	for len(names) < 3 {
		ev, err := stream.Recv()
		require.NoError(t, err)
		if ev.GetType() != allocatorv1.EventType_EVENT_TYPE_SYNCED {
			names = append(names, ev.GetAllocation().GetOwner().GetName())
		}
	}
	require.Equal(t, []string{"a", "b", "c"}, names)
}

// TestSyncedWatchKeepsNoEncoder: once its snapshot is sent, an open watch
// keeps its handler goroutine alone: not the one that encoded its
// snapshot ahead, and none in the core or the store, which it reads
// itself (here, with the client's own goroutine per stream in the same
// process: two per watch, where there were four).
func TestSyncedWatchKeepsNoEncoder(t *testing.T) {
	e := start(t)
	e.createPool(t, "p", poolV4("10.0.0.0/20"))
	seed(t, e, "p", 1500)
	base := runtime.NumGoroutine()
	const watches = 50
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	streams := make([]allocatorv1.AllocatorService_WatchAllocationsClient, watches)
	for i := range streams {
		stream, err := e.client.WatchAllocations(c, &allocatorv1.WatchAllocationsRequest{Pool: "pools/p", BatchSnapshot: true})
		require.NoError(t, err)
		for {
			ev, err := stream.Recv()
			require.NoError(t, err)
			if ev.GetType() == allocatorv1.EventType_EVENT_TYPE_SYNCED {
				break
			}
		}
		streams[i] = stream
	}
	require.Eventually(t, func() bool { return runtime.NumGoroutine()-base <= 2*watches+5 }, 10*time.Second, 20*time.Millisecond,
		"%d goroutines for %d open watches", runtime.NumGoroutine()-base, watches)

	// The changes still come, through the watch itself.
	got := e.allocate(t, "p", pod("ns", "after"))
	for _, stream := range streams[:3] {
		ev, err := stream.Recv()
		require.NoError(t, err)
		require.Equal(t, got.GetAddress(), ev.GetAllocation().GetAddress())
	}
}

// TestBurstOfSnapshotsRestrainsGC: once 64 watches wait to send their
// snapshots at once, the collector is restrained, once, until every one
// has sent it; fewer restrain nothing.
func TestBurstOfSnapshotsRestrainsGC(t *testing.T) {
	var restrained, released atomic.Int64
	e, unstick := withStuckWatch(t, allocserver.WithSnapshotTurns(1, time.Hour), allocserver.WithRestrainGC(func() func() {
		restrained.Add(1)
		return func() { released.Add(1) }
	}))
	defer unstick()

	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waiting []allocatorv1.AllocatorService_WatchAllocationsClient
	open := func(n int) {
		for range n {
			stream, err := e.client.WatchAllocations(c, &allocatorv1.WatchAllocationsRequest{Pool: "pools/small"})
			require.NoError(t, err)
			waiting = append(waiting, stream)
		}
	}
	open(40) // with the stuck one, 41 waiting: no burst
	gauge := func() float64 {
		return sample(t, httpGet(t, "http://"+e.httpAddr+"/metrics"), "plexus_allocator_watches_open")
	}
	require.Eventually(t, func() bool { return gauge() == 41 }, 10*time.Second, 10*time.Millisecond)
	require.Zero(t, restrained.Load(), "41 snapshots waiting are no burst")
	open(40)
	require.Eventually(t, func() bool { return restrained.Load() == 1 }, 10*time.Second, 10*time.Millisecond)

	unstick()
	for _, stream := range waiting {
		ev, err := stream.Recv()
		require.NoError(t, err)
		require.Equal(t, allocatorv1.EventType_EVENT_TYPE_SYNCED, ev.GetType())
	}
	require.Eventually(t, func() bool { return released.Load() == 1 }, 10*time.Second, 10*time.Millisecond,
		"released once every snapshot is sent, while the watches stay open")
	require.Equal(t, int64(1), restrained.Load())
	require.Equal(t, 80.0, gauge())
}
