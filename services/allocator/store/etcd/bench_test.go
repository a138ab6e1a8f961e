package etcd_test

import (
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/etcd"
)

// BenchmarkCommit measures what one Allocate commits, from 1 and 64
// concurrent committers on one store, against a real fsyncing etcd:
// commits/s, commits per etcd transaction, and the store's own cost per
// commit: the CPU of this process (etcd runs in another), and what it
// allocates (allocs/op, B/op). Those are what a replica spends on every
// allocation besides serving the call.
func BenchmarkCommit(b *testing.B) {
	e := kubetest.StartEtcd(b)
	for _, committers := range []int{1, 64} {
		b.Run(fmt.Sprint("committers=", committers), func(b *testing.B) {
			var txns, combined atomic.Int64
			s, err := etcd.Open(etcd.Config{Endpoints: e.Endpoints(), Prefix: freshPrefix(),
				ObserveCombined: func(n int) { txns.Add(1); combined.Add(int64(n)) }})
			require.NoError(b, err)
			defer s.Close()
			pool := &store.Pool{ID: "bench", CIDRs: []string{"10.0.0.0/8"}}
			poolRev, err := s.Commit(b.Context(), store.Txn{
				Conds: []store.Cond{{Kind: store.CondPoolAbsent, Pool: pool.ID}},
				Ops:   []store.Op{{Kind: store.OpPutPool, Pool: pool}},
			})
			require.NoError(b, err)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU(b)
			start := time.Now()
			for range committers {
				wg.Go(func() {
					for {
						i := int(next.Add(1))
						if i > b.N {
							return
						}
						if _, err := s.Commit(b.Context(), allocTxn(pool.ID, poolRev, i)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			cpu := processCPU(b) - cpu0
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
			if n := txns.Load(); n > 0 {
				b.ReportMetric(float64(combined.Load())/float64(n), "commits/txn")
			}
		})
	}
}

// processCPU is the user and system CPU this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// allocTxn is what the allocator commits for one Allocate with a request
// id: the pool unchanged, and the address, the owner and the request id
// all free.
func allocTxn(pool string, poolRev int64, i int) store.Txn {
	a := &store.Allocation{
		Pool:    pool,
		Address: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}),
		Owner: decide.Owner{Cluster: "cluster-east-1", Kind: "Pod", Namespace: "payments",
			Name: fmt.Sprintf("checkout-7d9f8b6c5-%08d", i), UID: fmt.Sprintf("3f2b8c1e-5d4a-4c3b-9e8f-%012d", i)},
		CreateTime: time.Now(),
		RequestID:  fmt.Sprint("req-", i),
	}
	return store.Txn{
		Conds: []store.Cond{
			{Kind: store.CondPoolRevision, Pool: pool, Revision: poolRev},
			{Kind: store.CondAllocationAbsent, Pool: pool, Address: a.Address},
			{Kind: store.CondOwnerAbsent, Pool: pool, OwnerKey: a.Owner.Key()},
			{Kind: store.CondRequestAbsent, RequestID: a.RequestID},
		},
		Ops: []store.Op{
			{Kind: store.OpPutAllocation, Allocation: a},
			{Kind: store.OpPutRequest, Request: &store.Request{ID: a.RequestID, Allocations: []string{pool + "/" + a.Address.String()}}},
		},
	}
}

// BenchmarkWatchSnapshot compares what a watch of a small pool reads on
// etcd beside a pool of 100,000 allocations: the whole store (Snapshot,
// what a follower's watch decoded before) against the pool's own keys
// (a page of the pool).
func BenchmarkWatchSnapshot(b *testing.B) {
	e := kubetest.StartEtcd(b)
	s, err := etcd.Open(etcd.Config{Endpoints: e.Endpoints(), Prefix: freshPrefix()})
	require.NoError(b, err)
	defer s.Close()
	ctx := b.Context()
	_, err = s.Commit(ctx, store.Txn{Ops: []store.Op{
		{Kind: store.OpPutPool, Pool: &store.Pool{ID: "big", CIDRs: []string{"10.0.0.0/8"}}},
		{Kind: store.OpPutPool, Pool: &store.Pool{ID: "small", CIDRs: []string{"11.0.0.0/24"}}},
	}})
	require.NoError(b, err)
	const big, small = 100000, 100
	fill := func(pool string, base netip.Addr, n int) {
		for done := 0; done < n; {
			var ops []store.Op
			for ; done < n && len(ops) < 30; done++ { // several etcd ops each, within its --max-txn-ops of 128
				ops = append(ops, store.Op{Kind: store.OpPutAllocation, Allocation: &store.Allocation{Pool: pool, Address: base,
					Owner: decide.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: fmt.Sprint("pod-", done), UID: fmt.Sprintf("%08x-0000-4000-8000-000000000000", done)}}})
				base = base.Next()
			}
			_, err := s.Commit(ctx, store.Txn{Ops: ops})
			require.NoError(b, err)
		}
	}
	fill("big", netip.MustParseAddr("10.0.0.1"), big)
	fill("small", netip.MustParseAddr("11.0.0.1"), small)

	b.Run("store", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			snap, err := s.Snapshot(ctx)
			require.NoError(b, err)
			require.Len(b, snap.Allocations, big+small)
		}
	})
	b.Run("pool", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			pg, err := s.PageAllocations(ctx, 0, "small", store.AllocationKey{}, small)
			require.NoError(b, err)
			require.Len(b, pg.Allocations, small)
		}
	})
}

// BenchmarkWatchFanout measures what the watches of one store cost the
// process while 8 committers allocate: watches that share the store's etcd
// watch (a history each reads at its own cursor) against watches that each
// have an etcd watch of their own (History -1, how every watch worked
// before). Each op is one commit that every watch has received: the CPU of
// this process per commit (etcd runs in another), what it allocates, and
// the heap the open watches hold (the shared history's ring included).
func BenchmarkWatchFanout(b *testing.B) {
	e := kubetest.StartEtcd(b)
	for _, watches := range []int{1, 100} {
		for _, mode := range []struct {
			name    string
			history int
		}{{"shared", 0}, {"own", -1}} {
			b.Run(fmt.Sprintf("watches=%d/%s", watches, mode.name), func(b *testing.B) {
				benchWatchFanout(b, e, watches, mode.history)
			})
		}
	}
}

func benchWatchFanout(b *testing.B, e *kubetest.Etcd, watches, history int) {
	ctx := b.Context()
	s, err := etcd.Open(etcd.Config{Endpoints: e.Endpoints(), Prefix: freshPrefix(), History: history})
	require.NoError(b, err)
	defer s.Close()
	pool := &store.Pool{ID: "bench", CIDRs: []string{"10.0.0.0/8"}}
	poolRev, err := s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: pool}}})
	require.NoError(b, err)

	heap0 := heapInUse()
	var (
		got sync.WaitGroup
		cs  []store.Cursor
	)
	for range watches {
		c, err := s.WatchCursor(ctx, poolRev, "")
		require.NoError(b, err)
		cs = append(cs, c)
	}
	heap := int64(heapInUse()) - int64(heap0)

	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	for _, c := range cs {
		got.Go(func() {
			buf := make([]store.Event, 0, 32)
			for n := 0; n < b.N; n += len(buf) {
				var err error
				if buf, err = c.Next(ctx, buf[:0]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > b.N {
					return
				}
				if _, err := s.Commit(ctx, allocTxn(pool.ID, poolRev, i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got.Wait()
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(heap)/(1<<20), "watches-heap-MB")
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkCreatePoolAmong commits what a replica among others commits to
// create a pool beside n others: the pool, guarded by CondPoolsUnchangedSince
// (its overlap check saw every pool), which etcd checks as one compare of
// pools-changed (a compare over every pool key before it).
//
//	go test -run '^$' -bench CreatePoolAmong -benchtime 200x -count 5 -benchmem ./services/allocator/store/etcd/
func BenchmarkCreatePoolAmong(b *testing.B) {
	e := kubetest.StartEtcd(b, maxTxnOps)
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprint("pools=", n), func(b *testing.B) {
			s, err := etcd.Open(etcd.Config{Endpoints: e.Endpoints(), Prefix: freshPrefix()})
			require.NoError(b, err)
			defer s.Close()
			ctx := b.Context()
			labels := map[string]string{"team": "network", "env": "production"}
			var rev int64
			for done := 0; done < n; {
				var ops []store.Op
				for ; done < n && len(ops) < 1000; done++ {
					ops = append(ops, store.Op{Kind: store.OpPutPool, Pool: &store.Pool{ID: fmt.Sprint("p", done),
						CIDRs: []string{fmt.Sprintf("10.%d.%d.0/24", done/256, done%256)}, Labels: labels}})
				}
				rev, err = s.Commit(ctx, store.Txn{Ops: ops})
				require.NoError(b, err)
			}
			// One guarded commit before the timer.
			rev, err = s.Commit(ctx, store.Txn{
				Conds: []store.Cond{{Kind: store.CondPoolsUnchangedSince, Revision: rev}},
				Ops:   []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: "warm", CIDRs: []string{"12.0.0.0/24"}}}},
			})
			require.NoError(b, err)
			b.ResetTimer()
			for i := range b.N {
				id := fmt.Sprint("q", i)
				rev, err = s.Commit(ctx, store.Txn{
					Conds: []store.Cond{{Kind: store.CondPoolsUnchangedSince, Revision: rev}, {Kind: store.CondPoolAbsent, Pool: id}},
					Ops:   []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: id, CIDRs: []string{fmt.Sprintf("11.%d.%d.0/24", i/256, i%256)}, Labels: labels}}},
				})
				require.NoError(b, err)
			}
		})
	}
}

// BenchmarkCommitBatch commits what a BatchAllocate of n addresses
// commits: each address free, each allocation put, against a real
// fsyncing etcd. cpu-µs/op is this process's CPU per commit (etcd runs in
// another): planning the txn's writes, encoding and sending it.
//
//	go test -run '^$' -bench CommitBatch -benchtime 20x -count 5 -benchmem ./services/allocator/store/etcd/
func BenchmarkCommitBatch(b *testing.B) {
	e := kubetest.StartEtcd(b, maxTxnOps)
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprint("allocations=", n), func(b *testing.B) {
			s, err := etcd.Open(etcd.Config{Endpoints: e.Endpoints(), Prefix: freshPrefix()})
			require.NoError(b, err)
			defer s.Close()
			ctx := b.Context()
			_, err = s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: "bench", CIDRs: []string{"10.0.0.0/8"}}}}})
			require.NoError(b, err)
			var cpu time.Duration
			i := 0
			for b.Loop() {
				txn := store.Txn{}
				for range n {
					i++
					a := &store.Allocation{Pool: "bench", Address: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}),
						Owner: decide.Owner{Cluster: "cluster-east-1", Kind: "Pod", Namespace: "payments",
							Name: fmt.Sprintf("checkout-7d9f8b6c5-%08d", i), UID: fmt.Sprintf("3f2b8c1e-5d4a-4c3b-9e8f-%012d", i)}}
					txn.Conds = append(txn.Conds, store.Cond{Kind: store.CondAllocationAbsent, Pool: "bench", Address: a.Address})
					txn.Ops = append(txn.Ops, store.Op{Kind: store.OpPutAllocation, Allocation: a})
				}
				cpu0 := processCPU(b)
				_, err := s.Commit(ctx, txn)
				cpu += processCPU(b) - cpu0
				require.NoError(b, err)
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
