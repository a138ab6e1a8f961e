package server_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	allocserver "github.com/plexusnet/plexus/services/allocator/server"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// countingStore counts the snapshots taken of the store.
type countingStore struct {
	store.Store
	snapshots atomic.Int64
}

func (c *countingStore) Snapshot(ctx context.Context) (*store.Snapshot, error) {
	c.snapshots.Add(1)
	return c.Store.Snapshot(ctx)
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

// TestManyWatchesShareOneSnapshot: 200 watches that start together on a
// store of 20,000 allocations decode the store a few times, not 200, and
// the heap stays far below what 200 decoded copies would take; each gets
// its pool's snapshot and SYNCED.
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
	require.LessOrEqual(t, taken, int64(5), "%d snapshots for %d watches started together", taken, watches)
	grew := int64(peak.Load()) - int64(base.HeapAlloc)
	t.Logf("%d watches: %d snapshots, heap peak +%d MB", watches, taken, grew>>20)
	require.Less(t, grew, int64(150<<20), "heap grew by %d MB", grew>>20)
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

	cancel1()
	require.Eventually(t, func() bool {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := open(c)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "a closed watch does not free its place")
}
