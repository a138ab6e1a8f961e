package bolt

import (
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bbolt "go.etcd.io/bbolt"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// TestOwnerIndexRollback: whatever a batch adds and removes, rollback
// leaves the index as the batch found it; commit keeps it. Few hashes, so
// that several addresses share one.
func TestOwnerIndexRollback(t *testing.T) {
	x := newOwnerIndex(0)
	model := map[uint64]map[netip.Addr]int{}
	snapshot := func() map[uint64]map[netip.Addr]int {
		out := map[uint64]map[netip.Addr]int{}
		for h := range uint64(8) {
			x.each(h, func(a netip.Addr) bool {
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
			h, a := uint64(rng.IntN(8)), addrs[rng.IntN(len(addrs))]
			if rng.IntN(2) == 0 {
				x.add(h, a)
				if staged[h] == nil {
					staged[h] = map[netip.Addr]int{}
				}
				staged[h][a]++
			} else if staged[h][a] > 0 {
				x.remove(h, a)
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

func clone(m map[uint64]map[netip.Addr]int) map[uint64]map[netip.Addr]int {
	out := map[uint64]map[netip.Addr]int{}
	for h, as := range m {
		out[h] = map[netip.Addr]int{}
		for a, n := range as {
			out[h][a] = n
		}
	}
	return out
}

// TestOpenUpgradesFormat1: a file of format 1 opens as format 2, its
// owners bucket left alone and unused (a stale entry in it changes
// nothing), and the owner index (now in memory) answers CondOwnerAbsent
// for the allocations the file holds.
func TestOpenUpgradesFormat1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path)
	require.NoError(t, err)
	held := alloc("p", "10.0.0.7", "held")
	_, err = s.Commit(t.Context(), store.Txn{Ops: []store.Op{putAlloc(held)}})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	asFormat1(t, path, 1)

	s, err = Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, s.db.View(func(tx *bbolt.Tx) error {
		require.Equal(t, []byte{fileFormat}, tx.Bucket(bucketMeta).Get(keyFormat))
		return nil
	}))
	require.False(t, ownerAbsent(t, s, "p", held.Owner))
	require.True(t, ownerAbsent(t, s, "p", store.Owner{Kind: "Pod", Namespace: "ns", Name: "someone-else"}))
}
