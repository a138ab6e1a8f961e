package etcd_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/etcd"
)

// shapes is a store whose pools hold their addresses in every way the
// windows of a read must cope with, and what it holds.
type shapes struct {
	s     *etcd.Store
	cli   *clientv3.Client
	pools map[string][]netip.Addr // by pool, sorted
	quar  []store.AllocationKey
	total int
}

func (sh *shapes) add(pool string, addrs ...netip.Addr) {
	sh.pools[pool] = append(sh.pools[pool], addrs...)
	sh.total += len(addrs)
}

func run(first netip.Addr, n int) []netip.Addr {
	out := make([]netip.Addr, 0, n)
	for a := first; len(out) < n; a = a.Next() {
		out = append(out, a)
	}
	return out
}

func scattered(r *rand.Rand, prefix netip.Prefix, n int) []netip.Addr {
	seen := map[netip.Addr]bool{}
	for len(seen) < n {
		b := prefix.Addr().As16()
		for i := prefix.Bits() / 8; i < 16; i++ {
			b[i] = byte(r.UintN(256))
		}
		seen[netip.AddrFrom16(b)] = true
	}
	return slices.Collect(func(yield func(netip.Addr) bool) {
		for a := range seen {
			if !yield(a) {
				return
			}
		}
	})
}

// seedShapes fills a store: a small pool and a dense one whose ids share
// a start, a pool of both families, the allocations of a pool whose record
// is gone, a pool of three islands far apart, a sparse IPv6 pool, a pool
// holding the last address of both families, and quarantine records.
func seedShapes(t *testing.T, e *kubetest.Etcd) *shapes {
	t.Helper()
	ctx := t.Context()
	prefix := freshPrefix()
	sh := &shapes{s: open(t, e, prefix), pools: map[string][]netip.Addr{}}
	r := rand.New(rand.NewPCG(1, 2))
	sh.add("a", run(netip.MustParseAddr("10.0.0.1"), 10)...)
	sh.add("ab", run(netip.MustParseAddr("10.1.0.0"), 2000)...)
	sh.add("dual", run(netip.MustParseAddr("10.2.0.0"), 256)...)
	sh.add("dual", scattered(r, netip.MustParsePrefix("fd00::/64"), 300)...)
	sh.add("ghost", run(netip.MustParseAddr("10.3.0.0"), 200)...)
	for _, first := range []string{"10.4.0.0", "10.4.128.0", "10.5.0.0"} {
		sh.add("islands", run(netip.MustParseAddr(first), 400)...)
	}
	sh.add("sparse6", scattered(r, netip.MustParsePrefix("2001:db8::/32"), 1500)...)
	sh.add("top", run(netip.MustParseAddr("255.255.255.0"), 256)...)
	sh.add("top", run(netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00"), 256)...)

	var ops []store.Op
	flush := func() {
		_, err := sh.s.Commit(ctx, store.Txn{Ops: ops})
		require.NoError(t, err)
		ops = nil
	}
	for pool := range sh.pools {
		ops = append(ops, store.Op{Kind: store.OpPutPool, Pool: &store.Pool{ID: pool, CIDRs: []string{"10.0.0.0/8"}}})
	}
	flush()
	for pool, addrs := range sh.pools {
		slices.SortFunc(addrs, netip.Addr.Compare)
		for i, a := range addrs {
			ops = append(ops, store.Op{Kind: store.OpPutAllocation, Allocation: &store.Allocation{Pool: pool, Address: a,
				Owner: decide.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: fmt.Sprint(pool, "-", i), UID: fmt.Sprint(pool, "-", i)}}})
			if len(ops) == 500 {
				flush()
			}
		}
	}
	until := time.Now().Add(time.Hour)
	for _, q := range append(run(netip.MustParseAddr("10.1.200.0"), 300), scattered(r, netip.MustParsePrefix("2001:db9::/32"), 50)...) {
		pool := "ab"
		if q.Is6() {
			pool = "sparse6"
		}
		sh.quar = append(sh.quar, store.AllocationKey{Pool: pool, Address: q})
		ops = append(ops, store.Op{Kind: store.OpPutQuarantine, Quarantine: &store.Quarantine{Pool: pool, Address: q, Until: until}})
	}
	flush()
	slices.SortFunc(sh.quar, compareKeys)

	var err error
	sh.cli, err = clientv3.New(clientv3.Config{Endpoints: e.Endpoints()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sh.cli.Close() })
	// The pool's record goes; its allocations stay, as after a crash of
	// an earlier version mid-deletion.
	_, err = sh.cli.Delete(ctx, prefix+"state/pools/ghost")
	require.NoError(t, err)
	return sh
}

func compareKeys(a, b store.AllocationKey) int {
	return cmp.Or(cmp.Compare(a.Pool, b.Pool), a.Address.Compare(b.Address))
}

// want is what the store holds of pool ("": of every pool), in order.
func (sh *shapes) want(pool string) []store.AllocationKey {
	var out []store.AllocationKey
	for p, addrs := range sh.pools {
		if pool == "" || p == pool {
			for _, a := range addrs {
				out = append(out, store.AllocationKey{Pool: p, Address: a})
			}
		}
	}
	slices.SortFunc(out, compareKeys)
	return out
}

// walked is how many keys etcd's index holds in the ranges read: what it
// walks to answer them.
func (sh *shapes) walked(t *testing.T, reads []readRange) int {
	t.Helper()
	n := 0
	for _, r := range reads {
		resp, err := sh.cli.Get(t.Context(), r.from, clientv3.WithRange(r.end), clientv3.WithRev(r.rev), clientv3.WithCountOnly())
		require.NoError(t, err)
		n += int(resp.Count)
	}
	return n
}

type readRange struct {
	from, end string
	rev       int64
}

func keysOf(as []store.Allocation) []store.AllocationKey {
	out := make([]store.AllocationKey, len(as))
	for i, a := range as {
		out[i] = store.AllocationKey{Pool: a.Pool, Address: a.Address}
	}
	return out
}

// TestReadsWalkAboutWhatTheyReturn: a snapshot, a pool's snapshot and
// pages of allocations read in windows give every key in order, whatever
// the shape of the pools, and the reads' ranges hold a few times the keys
// they return in all; reads bounded only by a limit held ~N²/2·page.
func TestReadsWalkAboutWhatTheyReturn(t *testing.T) {
	e := kubetest.StartEtcd(t, maxTxnOps)
	sh := seedShapes(t, e)
	const page = 64
	var reads []readRange
	etcd.SetPage(sh.s, page, func(from, end string, rev int64) {
		reads = append(reads, readRange{from, end, rev})
	})
	ctx := t.Context()

	t.Run("Snapshot", func(t *testing.T) {
		reads = nil
		snap, err := sh.s.Snapshot(ctx)
		require.NoError(t, err)
		require.Equal(t, sh.want(""), keysOf(snap.Allocations))
		var qs []store.AllocationKey
		for _, q := range snap.Quarantine {
			qs = append(qs, store.AllocationKey{Pool: q.Pool, Address: q.Address})
		}
		require.Equal(t, sh.quar, qs)
		n := sh.total + len(sh.quar)
		walked := sh.walked(t, reads)
		t.Logf("%d keys in %d reads walked %d", n, len(reads), walked)
		require.LessOrEqual(t, walked, 3*n)
	})
	t.Run("WholePool", func(t *testing.T) {
		for pool, addrs := range sh.pools {
			reads = nil
			var (
				got   []store.Allocation
				after store.AllocationKey
				rev   int64
			)
			for {
				pg, err := sh.s.PageAllocations(ctx, rev, pool, after, 0)
				require.NoError(t, err)
				rev, got = pg.Revision, append(got, pg.Allocations...)
				if !pg.More {
					break
				}
				after = store.AllocationKey{Pool: pool, Address: got[len(got)-1].Address}
			}
			require.Equal(t, sh.want(pool), keysOf(got), pool)
			require.LessOrEqual(t, sh.walked(t, reads), 4*len(addrs), pool)
		}
	})
	t.Run("Pages", func(t *testing.T) {
		for _, pool := range []string{"", "ab", "dual", "islands", "sparse6", "top"} {
			for _, limit := range []int{1, 7, 64, 500} {
				reads = nil
				want := sh.want(pool)
				var (
					got   []store.AllocationKey
					after store.AllocationKey
					rev   int64
				)
				for {
					pg, err := sh.s.PageAllocations(ctx, rev, pool, after, limit)
					require.NoError(t, err)
					require.LessOrEqual(t, len(pg.Allocations), limit)
					rev = pg.Revision
					got = append(got, keysOf(pg.Allocations)...)
					if !pg.More {
						break
					}
					require.Len(t, pg.Allocations, limit, "only the last page holds fewer than asked for")
					after = got[len(got)-1]
				}
				require.Equal(t, want, got, "pool %q pages of %d", pool, limit)
				if limit >= page {
					walked := sh.walked(t, reads)
					t.Logf("pool %q, pages of %d: %d keys in %d reads walked %d", pool, limit, len(want), len(reads), walked)
					require.LessOrEqual(t, walked, 4*len(want), "pool %q pages of %d", pool, limit)
				}
			}
		}
	})
}
