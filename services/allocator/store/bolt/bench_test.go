package bolt

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bbolt "go.etcd.io/bbolt"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// benchOwner is an owner of realistic size: a Pod with a generated name.
func benchOwner(i int) decide.Owner {
	return decide.Owner{
		Cluster:   "cluster-east-1",
		Kind:      "Pod",
		Namespace: "payments",
		Name:      fmt.Sprintf("checkout-7d9f8b6c5-%08d", i),
		UID:       fmt.Sprintf("3f2b8c1e-5d4a-4c3b-9e8f-%012d", i),
	}
}

func benchAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
}

// allocTxn is what the allocator commits for one Allocate: the address
// and the owner must both be free.
func allocTxn(i int) store.Txn {
	return allocateTxn(&store.Allocation{Pool: "bench", Address: benchAddr(i), Owner: benchOwner(i), CreateTime: time.Now(), RequestID: fmt.Sprint("req-", i)})
}

// allocateTxn is the transaction of an Allocate of a.
func allocateTxn(a *store.Allocation) store.Txn {
	return store.Txn{
		Conds: []store.Cond{
			{Kind: store.CondAllocationAbsent, Pool: a.Pool, Address: a.Address},
			{Kind: store.CondOwnerAbsent, Pool: a.Pool, OwnerKey: a.Owner.Key()},
		},
		Ops: []store.Op{{Kind: store.OpPutAllocation, Allocation: a}},
	}
}

// requestTxn is what the allocator commits for an Allocate with a
// request id: allocTxn plus the request record, guarded by its absence.
func requestTxn(i int) store.Txn {
	tx := allocTxn(i)
	a := tx.Ops[0].Allocation
	tx.Conds = append(tx.Conds, store.Cond{Kind: store.CondRequestAbsent, RequestID: a.RequestID})
	tx.Ops = append(tx.Ops, store.Op{Kind: store.OpPutRequest, Request: &store.Request{
		ID: a.RequestID, Allocations: []string{a.Pool + "/" + a.Address.String()},
	}})
	return tx
}

// BenchmarkCommit measures durable (fsync'd) allocation commits from 1, 8
// and 64 concurrent committers: commits/s, the mean group-commit batch
// and the latency each committer sees.
func BenchmarkCommit(b *testing.B) { benchCommit(b, allocTxn) }

// BenchmarkCommitRequests is BenchmarkCommit with a request id on every
// commit, so it also measures what request records cost the commit path.
func BenchmarkCommitRequests(b *testing.B) { benchCommit(b, requestTxn) }

func benchCommit(b *testing.B, txn func(int) store.Txn) {
	for _, committers := range []int{1, 8, 64} {
		b.Run(fmt.Sprint("committers=", committers), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "bench.db"))
			require.NoError(b, err)
			defer s.Close()
			before := s.Stats()
			b.ResetTimer()
			elapsed, latencies := commitAll(b, s, committers, txn)
			st := s.Stats()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
			b.ReportMetric(float64(st.Txns-before.Txns)/float64(max(1, st.Batches-before.Batches)), "txns/batch")
			b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// commitAll commits txn(0) to txn(b.N-1) from committers goroutines,
// and returns how long that took and each commit's latency, sorted. The
// timer is stopped when it returns.
func commitAll(b *testing.B, s *Store, committers int, txn func(int) store.Txn) (time.Duration, []time.Duration) {
	var (
		next      atomic.Int64
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, b.N)
		wg        sync.WaitGroup
	)
	start := time.Now()
	for range committers {
		wg.Go(func() {
			var mine []time.Duration
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					break
				}
				t0 := time.Now()
				if _, err := s.Commit(b.Context(), txn(i)); err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(latencies)
	return elapsed, latencies
}

// BenchmarkBatchAllocate measures one transaction of 1,000 allocations,
// as BatchAllocate commits it.
func BenchmarkBatchAllocate(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "bench.db"))
	require.NoError(b, err)
	defer s.Close()
	for n := 0; b.Loop(); n++ {
		var tx store.Txn
		for i := range 1000 {
			one := allocTxn(n*1000 + i)
			tx.Conds = append(tx.Conds, one.Conds...)
			tx.Ops = append(tx.Ops, one.Ops...)
		}
		if _, err := s.Commit(b.Context(), tx); err != nil {
			b.Fatal(err)
		}
	}
}

const millionAllocs = 1_000_000

var (
	millionOnce sync.Once
	millionPath string
	millionErr  error
	// benchDir holds files that outlive one benchmark run; TestMain removes
	// it.
	benchDir    string
	benchDirErr error
	benchDirSet sync.Once
)

// sharedDir returns benchDir, made on first use.
func sharedDir(b *testing.B) string {
	b.Helper()
	benchDirSet.Do(func() { benchDir, benchDirErr = os.MkdirTemp("", "plexus-store-bench-") })
	require.NoError(b, benchDirErr)
	return benchDir
}

// millionFile builds, once per test binary, a store file holding a
// million allocations of realistic size in one pool.
func millionFile(b *testing.B) string {
	b.Helper()
	dir := sharedDir(b)
	millionOnce.Do(func() {
		millionPath = filepath.Join(dir, "million.db")
		s, err := Open(millionPath, WithNoSync(), WithHistory(1))
		if err != nil {
			millionErr = err
			return
		}
		_, err = s.Commit(b.Context(), store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: "bench", CIDRs: []string{"10.0.0.0/12"}}}}})
		for i := 0; err == nil && i < millionAllocs; i += 1000 {
			var tx store.Txn
			for j := i; j < i+1000; j++ {
				tx.Ops = append(tx.Ops, allocTxn(j).Ops...)
			}
			_, err = s.Commit(b.Context(), tx)
		}
		if err == nil {
			err = s.db.Sync()
		}
		millionErr = errors.Join(err, s.Close())
	})
	require.NoError(b, millionErr)
	return millionPath
}

// BenchmarkOpenSnapshot1M measures what an allocator restart costs the
// store: open a file of a million allocations and read them all. "warm"
// has the file in the page cache (a process restart); "cold" evicts it
// first (a machine restart).
func BenchmarkOpenSnapshot1M(b *testing.B) {
	path := millionFile(b)
	fi, err := os.Stat(path)
	require.NoError(b, err)
	for _, cold := range []bool{false, true} {
		if cold && !canEvict {
			continue
		}
		name := "warm"
		if cold {
			name = "cold"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if cold {
					b.StopTimer()
					require.NoError(b, evict(path))
					b.StartTimer()
				}
				s, err := Open(path)
				require.NoError(b, err)
				snap, err := s.Snapshot(b.Context())
				require.NoError(b, err)
				require.Len(b, snap.Allocations, millionAllocs)
				require.NoError(b, s.Close())
			}
			b.ReportMetric(float64(fi.Size())/(1<<20), "file-MiB")
			b.ReportMetric(float64(fi.Size())/millionAllocs, "file-B/alloc")
		})
	}
}

// BenchmarkSweep measures the sweeper on 100,000 request records with
// random ids, put 100 a commit, of which the first 4,000 (a span's worth
// of a retention period of 25 spans) have expired: they are spread over
// the whole bucket. "delete" is one write transaction of maxSweep
// expired records, disk sync included: how long it holds up the commits
// queued behind it. "scan" reads every record, in transactions of
// maxScan, as a sweep does once a span, out of the committer's way.
func BenchmarkSweep(b *testing.B) {
	const records, perCommit, expired = 100_000, 100, 4_000
	rng := rand.New(rand.NewPCG(1, 2))
	// fill puts the records and returns a cutoff that expires the first
	// ones.
	fill := func(b *testing.B, s *Store) time.Time {
		var last time.Time
		for i := range records / perCommit {
			var tx store.Txn
			for range perCommit {
				id := fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64())
				tx.Ops = append(tx.Ops, store.Op{Kind: store.OpPutRequest, Request: &store.Request{ID: id, Allocations: []string{"bench/10.0.0.1"}}})
			}
			_, err := s.Commit(b.Context(), tx)
			require.NoError(b, err)
			if (i+1)*perCommit == expired {
				last = time.Now()
			}
		}
		return last
	}
	b.Run("delete", func(b *testing.B) {
		s, err := Open(filepath.Join(b.TempDir(), "bench.db"))
		require.NoError(b, err)
		defer s.Close()
		var (
			upTo time.Time
			from []byte
		)
		for b.Loop() {
			b.StopTimer()
			var ids [][]byte
			for len(ids) < maxSweep {
				if from == nil {
					upTo = fill(b, s)
				}
				require.NoError(b, s.db.View(func(tx *bbolt.Tx) error {
					var err error
					ids, from, err = collectExpired(tx, from, upTo, records, maxSweep)
					return err
				}))
			}
			b.StartTimer()
			require.NoError(b, s.db.Update(func(tx *bbolt.Tx) error {
				n, err := deleteExpired(tx, ids, upTo)
				require.Equal(b, len(ids), n)
				return err
			}))
		}
	})
	b.Run("scan", func(b *testing.B) {
		s, err := Open(filepath.Join(b.TempDir(), "bench.db"))
		require.NoError(b, err)
		defer s.Close()
		fill(b, s)
		for b.Loop() {
			deleted, err := s.sweepBefore(time.Time{}) // looks at every record, deletes none
			require.NoError(b, err)
			require.Zero(b, deleted)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/records, "ns/record")
	})
}

// poolsFile returns a file of pools pools of 100 allocations each (pool
// i is 10.x.y.0/24, its allocations .1 to .100), built once per run.
func poolsFile(b *testing.B, pools int) string {
	b.Helper()
	path := filepath.Join(sharedDir(b), fmt.Sprintf("pools-%d.db", pools))
	if _, err := os.Stat(path); err == nil {
		return path
	}
	s, err := Open(path, WithNoSync(), WithHistory(1))
	require.NoError(b, err)
	for i := 0; i < pools; i += 100 {
		var tx store.Txn
		for p := i; p < min(i+100, pools); p++ {
			tx.Ops = append(tx.Ops, store.Op{Kind: store.OpPutPool, Pool: &store.Pool{ID: poolID(p), CIDRs: []string{poolCIDR(p)}}})
			for j := 1; j <= 100; j++ {
				tx.Ops = append(tx.Ops, store.Op{Kind: store.OpPutAllocation, Allocation: poolAlloc(p, j)})
			}
		}
		_, err := s.Commit(b.Context(), tx)
		require.NoError(b, err)
	}
	require.NoError(b, s.db.Sync())
	require.NoError(b, s.Close())
	return path
}

func poolID(p int) string   { return fmt.Sprintf("pool-%05d", p) }
func poolCIDR(p int) string { return fmt.Sprintf("10.%d.%d.0/24", p>>8, p&255) }

func poolAlloc(p, host int) *store.Allocation {
	return &store.Allocation{
		Pool: poolID(p), Address: netip.AddrFrom4([4]byte{10, byte(p >> 8), byte(p), byte(host)}),
		Owner: benchOwner(p*256 + host), CreateTime: time.Now(),
	}
}

// BenchmarkCommitAmongPools measures durable commits of 64 concurrent
// committers, each an Allocate's transaction, into a file of 10,000
// pools of 100 allocations, spread over all of them ("spread") and into a
// file of one such pool ("one"): what the issue's "10,000 pools × 100,
// Allocate p50 against one pool" asks of the store. Each run starts from
// a copy of the same file.
func BenchmarkCommitAmongPools(b *testing.B) {
	for _, c := range []struct {
		name  string
		pools int
	}{{"spread", 10000}, {"one", 1}} {
		b.Run(c.name, func(b *testing.B) {
			src := poolsFile(b, c.pools)
			path := filepath.Join(b.TempDir(), "bench.db")
			data, err := os.ReadFile(src)
			require.NoError(b, err)
			require.NoError(b, os.WriteFile(path, data, 0o600))
			s, err := Open(path)
			require.NoError(b, err)
			defer s.Close()
			require.NoError(b, s.Ready(b.Context()))
			// The next host of each pool; a pool of the spread run takes
			// a few, the one pool takes b.N (past its /24, which the
			// store does not check: it is alone in its file).
			next := make([]atomic.Int64, c.pools)
			rng := rand.New(rand.NewPCG(1, 2))
			order := make([]int, b.N)
			for i := range order {
				order[i] = rng.IntN(c.pools)
			}
			b.ResetTimer()
			elapsed, latencies := commitAll(b, s, 64, func(n int) store.Txn {
				p := order[n]
				host := 101 + uint32(next[p].Add(1)) - 1
				a := poolAlloc(p, 0)
				v := 10<<24 | uint32(p)<<8 + host
				a.Address = netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
				a.Owner = benchOwner(1<<24 + n)
				return allocateTxn(a)
			})
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
			b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds()), "p50-µs")
		})
	}
}

// BenchmarkSortAllocations measures the order a snapshot is put in: a
// million allocations of 10,000 pools, each pool's in address order but
// the pools interleaved at random (a file written by calls spread over
// them), against a comparison sort of the same.
func BenchmarkSortAllocations(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	next := make([]int, 10000)
	records := make([]store.Allocation, 0, 1_000_000)
	for range 1_000_000 {
		p := r.IntN(len(next))
		next[p]++
		a := poolAlloc(p, 1)
		v := 10<<24 | uint32(p)<<8 // hosts past 255 run into the next /24: still in order
		v += uint32(next[p])
		a.Address = netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
		records = append(records, *a)
	}
	for _, c := range []struct {
		name string
		sort func([]store.Allocation)
	}{
		{"grouped", sortAllocations},
		{"comparison", func(as []store.Allocation) { slices.SortFunc(as, compareAllocations) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			work := make([]store.Allocation, len(records))
			for b.Loop() {
				b.StopTimer()
				copy(work, records)
				b.StartTimer()
				c.sort(work)
			}
		})
	}
}

// BenchmarkIndex1M measures the index a file of a million allocations
// needs in memory: the time from Open until the store can commit (the
// index is built in the background) and the heap it keeps, per
// allocation, after a collection.
func BenchmarkIndex1M(b *testing.B) {
	path := millionFile(b)
	var heap uint64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s, err := Open(path, WithoutWarmUp())
		require.NoError(b, err)
		require.NoError(b, s.Ready(b.Context()))
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = after.HeapAlloc - before.HeapAlloc
		require.NoError(b, s.Close())
		b.StartTimer()
	}
	b.ReportMetric(float64(heap)/millionAllocs, "heap-B/alloc")
}
