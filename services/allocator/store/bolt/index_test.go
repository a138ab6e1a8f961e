package bolt

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bbolt "go.etcd.io/bbolt"

	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/internal/record"
)

// TestAddrIndexAgainstModel: random sets, deletes, commits and rollbacks
// leave the index as a plain map says, and its range check and ordered
// list agree with the map.
func TestAddrIndexAgainstModel(t *testing.T) {
	type pk struct {
		pool string
		addr netip.Addr
	}
	x := newAddrIndex()
	model := map[pk]uint64{}
	pools := []string{"a", "b"}
	var addrs []netip.Addr
	for i := range 12 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), netip.AddrFrom16([16]byte{0xfd, 15: byte(i)}))
	}
	check := func(round int) {
		t.Helper()
		require.Equal(t, len(model), x.len(), "round %d", round)
		for k, seq := range model {
			got, ok := x.get(k.pool, k.addr)
			require.True(t, ok, "round %d: %v", round, k)
			require.Equal(t, seq, got)
		}
		for _, pool := range pools {
			var want []netip.Addr
			for _, a := range addrs {
				if _, ok := model[pk{pool, a}]; ok {
					want = append(want, a)
				}
			}
			want = sortedAddrs(want)
			got := x.addrs(pool)
			require.Equal(t, len(want), len(got), "round %d", round)
			for i := range want {
				require.Equal(t, want[i], got[i])
			}
			if len(want) == 0 {
				require.Nil(t, x.pool(pool), "an empty pool is forgotten")
			}
			for i := range 4 {
				first, last := addrs[2*i], addrs[2*(i+rng(round, i))]
				any := false
				for _, a := range want {
					if first.Compare(a) <= 0 && a.Compare(last) <= 0 {
						any = true
					}
				}
				require.Equal(t, any, x.anyIn(pool, first, last), "round %d: %s-%s", round, first, last)
			}
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	next := uint64(1)
	for round := range 400 {
		check(round)
		x.begin()
		staged := map[pk]uint64{}
		for k, v := range model {
			staged[k] = v
		}
		for range r.IntN(8) {
			k := pk{pools[r.IntN(2)], addrs[r.IntN(len(addrs))]}
			if r.IntN(3) > 0 {
				x.set(k.pool, k.addr, next)
				staged[k] = next
				next++
			} else {
				x.del(k.pool, k.addr)
				delete(staged, k)
			}
		}
		if r.IntN(2) == 0 {
			x.rollback()
		} else {
			x.commit()
			model = staged
		}
	}
	check(400)
}

// rng picks a range length for the range checks of a round.
func rng(round, i int) int { return (round*7 + i*3) % (6 - i) }

func sortedAddrs(as []netip.Addr) []netip.Addr {
	out := append([]netip.Addr(nil), as...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j].Less(out[i]) {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestAnyInLongRange: a range longer than the pool is checked against
// the pool's addresses instead of address by address.
func TestAnyInLongRange(t *testing.T) {
	x := newAddrIndex()
	x.set("p", netip.MustParseAddr("10.200.0.1"), 1)
	x.set("p", netip.MustParseAddr("fd00::1"), 2)
	require.True(t, x.anyIn("p", netip.MustParseAddr("10.0.0.0"), netip.MustParseAddr("10.255.255.255")))
	require.False(t, x.anyIn("p", netip.MustParseAddr("10.0.0.0"), netip.MustParseAddr("10.199.255.255")))
	require.False(t, x.anyIn("p", netip.MustParseAddr("10.200.0.2"), netip.MustParseAddr("255.255.255.255")))
	require.True(t, x.anyIn("p", netip.MustParseAddr("::"), netip.MustParseAddr("ffff::")))
	require.False(t, x.anyIn("p", netip.MustParseAddr("fd00::2"), netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")))
	require.False(t, x.anyIn("q", netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("255.255.255.255")))
}

func TestSeq48(t *testing.T) {
	for _, n := range []uint64{0, 1, 255, 256, 1 << 40, maxSeq} {
		require.Equal(t, n, seqOf(n).uint64())
	}
}

// TestIndexErrorStopsCommits: a record the index cannot read (here, two
// records of one address) is reported by Ready, and every commit
// fails with it; nothing is written.
func TestIndexErrorStopsCommits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path)
	require.NoError(t, err)
	rev, err := s.Commit(t.Context(), store.Txn{Ops: []store.Op{putAlloc(alloc("p", "10.0.0.1", "a"))}})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	db, err := bbolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bbolt.Tx) error {
		a := alloc("p", "10.0.0.1", "twin")
		return tx.Bucket(bucketRecords).Put(recordKey(99), record.EncodeRecord(a, rev))
	}))
	require.NoError(t, db.Close())

	s, err = Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.ErrorContains(t, s.Ready(t.Context()), "allocation p/10.0.0.1: two records")
	_, err = s.Commit(t.Context(), store.Txn{Ops: []store.Op{putAlloc(alloc("p", "10.0.0.2", "b"))}})
	require.ErrorContains(t, err, "two records")
	snap, err := s.Snapshot(t.Context())
	require.NoError(t, err)
	require.Equal(t, rev, snap.Revision)
}

// TestAddrLoader: records of interleaved pools and both families load
// into the index they would have made one by one, and two records of one
// address are an error naming the later one.
func TestAddrLoader(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	l := newAddrLoader(0)
	want := newAddrIndex()
	seen := map[string]bool{}
	for seq := uint64(1); seq < 2000; seq++ {
		pool := fmt.Sprintf("pool-%d", r.IntN(20))
		addr := netip.AddrFrom4([4]byte{10, 0, byte(r.IntN(4)), byte(r.IntN(256))})
		if r.IntN(4) == 0 {
			addr = netip.AddrFrom16([16]byte{0xfd, 14: byte(r.IntN(4)), 15: byte(r.IntN(256))})
		}
		if seen[pool+addr.String()] {
			continue
		}
		seen[pool+addr.String()] = true
		l.add([]byte(pool), addr, seq)
		want.set(pool, addr, seq)
	}
	got, err := l.build()
	require.NoError(t, err)
	require.Equal(t, want.len(), got.len())
	for id, p := range want.pools {
		require.Equal(t, p.v4, got.pools[id].v4, id)
		require.Equal(t, p.v6, got.pools[id].v6, id)
	}

	for _, addr := range []string{"10.0.0.1", "fd00::1"} {
		l := newAddrLoader(0)
		l.add([]byte("a"), netip.MustParseAddr(addr), 1)
		l.add([]byte("b"), netip.MustParseAddr(addr), 2)
		l.add([]byte("a"), netip.MustParseAddr(addr), 3)
		_, err := l.build()
		require.ErrorContains(t, err, "allocation a/"+addr+": two records (the later is 3)")
	}
}

func TestRangeLen(t *testing.T) {
	for _, c := range []struct {
		first, last string
		want        uint64
	}{
		{"10.0.0.0", "10.0.0.255", 256},
		{"10.0.0.7", "10.0.0.7", 1},
		{"0.0.0.0", "255.255.255.255", 1 << 32},
		{"::", "::ffff:ffff:ffff:fffe", math.MaxUint64},
		{"::", "::ffff:ffff:ffff:ffff", math.MaxUint64}, // 2^64: saturated
		{"0:0:0:1::", "0:0:0:2::", math.MaxUint64},      // across the upper half: saturated
	} {
		require.Equal(t, c.want, rangeLen(netip.MustParseAddr(c.first), netip.MustParseAddr(c.last)), "%s-%s", c.first, c.last)
	}
}

// len counts the addresses filed.
func (x *addrIndex) len() int {
	n := 0
	for _, p := range x.pools {
		n += p.len()
	}
	return n
}
