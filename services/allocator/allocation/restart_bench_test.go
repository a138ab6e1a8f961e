package allocation_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/plexusnet/plexus/services/allocator/allocation"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/bolt"
)

// restartAllocs is how many allocations each restart benchmark's file
// holds: enough for the layout of the file to matter, small enough to
// build in seconds.
const restartAllocs = 200_000

// BenchmarkRestart opens a bolt file and starts an allocator on it, the
// way the service does (its store traced), until the allocator is ready:
// the snapshot read, the pools rebuilt and the store's indexes built. One
// file holds its allocations in one pool; the other spreads them over
// 1,000 pools, written in random pool order, as calls spread over many
// pools write them.
//
//	GOGC=2000 go test -run '^$' -bench Restart -benchtime 5x -count 3 ./services/allocator/allocation/
//
// (GOGC=2000 is what the service's collector tuning sets while its heap
// is small, as at start.)
func BenchmarkRestart(b *testing.B) {
	dir := b.TempDir()
	for _, pools := range []int{1, 1000} {
		path := filepath.Join(dir, fmt.Sprintf("pools-%d.db", pools))
		writeRestartFile(b, path, pools)
		b.Run(fmt.Sprintf("pools=%d", pools), func(b *testing.B) {
			b.ReportAllocs()
			run := filepath.Join(b.TempDir(), "run.db")
			for range b.N {
				b.StopTimer()
				copyFile(b, path, run)
				b.StartTimer()
				st, err := bolt.Open(run)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := allocation.New(b.Context(), allocation.Traced(st), allocation.WithLogger(slog.New(slog.DiscardHandler))); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := st.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/restartAllocs, "ns/allocation")
		})
	}
}

// writeRestartFile writes restartAllocs allocations over pools pools (a
// /16 each, or one /8) to a new bolt file, in commits of 1,000 that each go to pools
// picked at random.
func writeRestartFile(b *testing.B, path string, pools int) {
	b.Helper()
	ctx := context.Background()
	st, err := bolt.Open(path, bolt.WithNoSync(), bolt.WithHistory(1))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var txn store.Txn
	for i := range pools {
		cidr := fmt.Sprintf("%d.%d.0.0/16", 10+i/256, i%256)
		if pools == 1 {
			cidr = "10.0.0.0/8"
		}
		txn.Ops = append(txn.Ops, store.Op{Kind: store.OpPutPool, Pool: &store.Pool{ID: fmt.Sprintf("p%d", i), CIDRs: []string{cidr}}})
	}
	if _, err := st.Commit(ctx, txn); err != nil {
		b.Fatal(err)
	}
	next := make([]int, pools) // the next host number of each pool
	rng := rand.New(rand.NewPCG(1, 2))
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < restartAllocs; {
		txn = store.Txn{}
		for ; i < restartAllocs && len(txn.Ops) < 1000; i++ {
			p := rng.IntN(pools)
			for pools > 1 && next[p] >= 65000 {
				p = rng.IntN(pools)
			}
			n := next[p] + 1
			next[p] = n
			addr := netip.AddrFrom4([4]byte{byte(10 + p/256), byte(p % 256), byte(n >> 8), byte(n)})
			if pools == 1 {
				addr = netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
			}
			txn.Ops = append(txn.Ops, store.Op{Kind: store.OpPutAllocation, Allocation: &store.Allocation{
				Pool: fmt.Sprintf("p%d", p), Address: addr, CreateTime: created,
				Owner: decide.Owner{Cluster: "east", Kind: "Pod", Namespace: "default", Name: fmt.Sprintf("pod-%d", i), UID: fmt.Sprintf("8c6f1f7e-0b1a-4c9e-9a51-%012d", i)},
			}})
		}
		if _, err := st.Commit(ctx, txn); err != nil {
			b.Fatal(err)
		}
	}
}

func copyFile(b *testing.B, from, to string) {
	b.Helper()
	in, err := os.Open(from)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		b.Fatal(err)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
}
