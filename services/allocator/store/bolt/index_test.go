package bolt

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bbolt "go.etcd.io/bbolt"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/internal/record"
)

// TestIndexAgainstModel: random puts, deletes, commits and rollbacks
// leave the index's addresses as a plain map says, and its range check
// and ordered list agree with the map.
func TestIndexAgainstModel(t *testing.T) {
	type pk struct {
		pool string
		addr netip.Addr
	}
	x := newIndex(0)
	model := map[pk]uint64{}
	pools := []string{"a", "b"}
	var addrs []netip.Addr
	for i := range 12 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), netip.AddrFrom16([16]byte{0xfd, 15: byte(i)}))
	}
	check := func(round int) {
		t.Helper()
		require.Equal(t, len(model), x.size(), "round %d", round)
		for k, seq := range model {
			got, ok := x.seq(k.pool, k.addr)
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
				require.Nil(t, x.pools[pool], "an empty pool is forgotten")
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
				x.put(k.pool, k.addr, next)
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

// TestAnyInLongRange: ranges of either family, up to the whole space.
func TestAnyInLongRange(t *testing.T) {
	x := newIndex(0)
	x.put("p", netip.MustParseAddr("10.200.0.1"), 1)
	x.put("p", netip.MustParseAddr("fd00::1"), 2)
	require.True(t, x.anyIn("p", netip.MustParseAddr("10.0.0.0"), netip.MustParseAddr("10.255.255.255")))
	require.False(t, x.anyIn("p", netip.MustParseAddr("10.0.0.0"), netip.MustParseAddr("10.199.255.255")))
	require.False(t, x.anyIn("p", netip.MustParseAddr("10.200.0.2"), netip.MustParseAddr("255.255.255.255")))
	require.True(t, x.anyIn("p", netip.MustParseAddr("::"), netip.MustParseAddr("ffff::")))
	require.False(t, x.anyIn("p", netip.MustParseAddr("fd00::2"), netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")))
	require.False(t, x.anyIn("q", netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("255.255.255.255")))
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

// TestLoader: records of interleaved pools and both families, out of
// address order, load into the index they would have made one by one,
// and two records of one address are an error naming the later one.
func TestLoader(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	l := newLoader(0)
	want := newIndex(0)
	seen := map[string]bool{}
	v := record.AppendAllocation(nil, &store.Allocation{}, 1)
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
		require.NoError(t, l.add([]byte(pool), addr, seq, v))
		want.put(pool, addr, seq)
	}
	got, err := l.build()
	require.NoError(t, err)
	require.Equal(t, want.size(), got.size())
	for id := range want.pools {
		require.Equal(t, want.addrs(id), got.addrs(id), id)
		for _, a := range want.addrs(id) {
			seq, _ := want.seq(id, a)
			gotSeq, ok := got.seq(id, a)
			require.True(t, ok)
			require.Equal(t, seq, gotSeq)
		}
	}

	for _, addr := range []string{"10.0.0.1", "fd00::1"} {
		l := newLoader(0)
		require.NoError(t, l.add([]byte("a"), netip.MustParseAddr(addr), 1, v))
		require.NoError(t, l.add([]byte("b"), netip.MustParseAddr(addr), 2, v))
		require.NoError(t, l.add([]byte("a"), netip.MustParseAddr("10.9.9.9"), 3, v))
		require.NoError(t, l.add([]byte("a"), netip.MustParseAddr(addr), 4, v))
		_, err := l.build()
		require.ErrorContains(t, err, "allocation a/"+addr+": two records (the later is 4)")
	}
}

// size counts the addresses filed.
func (x *index) size() int {
	n := 0
	for _, p := range x.pools {
		n += p.len()
	}
	return n
}

// ownerLen counts the owner entries.
func (x *index) ownerLen() int {
	n := len(x.owners) + len(x.owners6)
	for _, m := range x.more {
		n += len(m)
	}
	return n
}

// TestOwnerIndexRollback: whatever a batch adds and removes, rollback
// leaves the index as the batch found it; commit keeps it. Few hashes, so
// that several addresses share one.
func TestOwnerIndexRollback(t *testing.T) {
	x := newIndex(0)
	model := map[uint32]map[netip.Addr]int{}
	snapshot := func() map[uint32]map[netip.Addr]int {
		out := map[uint32]map[netip.Addr]int{}
		for h := range uint32(8) {
			x.eachOwner(h, func(a netip.Addr) bool {
				if out[h] == nil {
					out[h] = map[netip.Addr]int{}
				}
				out[h][a]++
				return true
			})
		}
		return out
	}
	rng := rand.New(rand.NewPCG(3, 4))
	addrs := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")}
	for round := range 500 {
		before := snapshot()
		require.Equal(t, model, before, "round %d", round)
		x.begin()
		staged := clone(model)
		for range rng.IntN(6) {
			h, a := uint32(rng.IntN(8)), addrs[rng.IntN(len(addrs))]
			if rng.IntN(2) == 0 {
				x.addOwner(h, a)
				if staged[h] == nil {
					staged[h] = map[netip.Addr]int{}
				}
				staged[h][a]++
			} else if staged[h][a] > 0 {
				x.removeOwner(h, a)
				if staged[h][a]--; staged[h][a] == 0 {
					delete(staged[h], a)
				}
				if len(staged[h]) == 0 {
					delete(staged, h)
				}
			}
		}
		if rng.IntN(2) == 0 {
			x.rollback()
			require.Equal(t, before, snapshot(), "round %d: rolled back", round)
		} else {
			x.commit()
			model = staged
		}
	}
}

func clone(m map[uint32]map[netip.Addr]int) map[uint32]map[netip.Addr]int {
	out := map[uint32]map[netip.Addr]int{}
	for h, as := range m {
		out[h] = map[netip.Addr]int{}
		for a, n := range as {
			out[h][a] = n
		}
	}
	return out
}

// TestHashValue: the hash read from a stored value is the hash of the
// owner's key, and a damaged value is an error.
func TestHashValue(t *testing.T) {
	x := newIndex(0)
	for _, o := range []decide.Owner{
		{Kind: "Pod", Namespace: "ns", Name: "a", UID: "u"},
		{Cluster: "east", Kind: "Service", Namespace: "", Name: "a/b"},
		{},
	} {
		v := record.AppendAllocation(nil, &store.Allocation{Owner: o}, 3)
		h, err := x.hashValue([]byte("pool"), v)
		require.NoError(t, err)
		require.Equal(t, x.ownerHash("pool", o.Key()), h, "%+v", o)
		for i := range v[:len(v)-1] {
			if _, err := x.hashValue([]byte("pool"), v[:i]); err == nil {
				// Cut after the name, the owner is whole.
				require.Greater(t, i, len(o.Cluster)+len(o.Kind)+len(o.Namespace)+len(o.Name)+4)
			}
		}
	}
}
