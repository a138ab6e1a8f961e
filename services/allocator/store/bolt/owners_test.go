package bolt

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/internal/record"
)

// TestOwnerIndexRollback: whatever a batch adds and removes, rollback
// leaves the index as the batch found it; commit keeps it. Few hashes, so
// that several addresses share one.
func TestOwnerIndexRollback(t *testing.T) {
	x := newOwnerIndex(0)
	model := map[uint32]map[netip.Addr]int{}
	snapshot := func() map[uint32]map[netip.Addr]int {
		out := map[uint32]map[netip.Addr]int{}
		for h := range uint32(8) {
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
			h, a := uint32(rng.IntN(8)), addrs[rng.IntN(len(addrs))]
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
	x := newOwnerIndex(0)
	for _, o := range []decide.Owner{
		{Kind: "Pod", Namespace: "ns", Name: "a", UID: "u"},
		{Cluster: "east", Kind: "Service", Namespace: "", Name: "a/b"},
		{},
	} {
		v := record.AppendAllocation(nil, &store.Allocation{Owner: o}, 3)
		h, err := x.hashValue([]byte("pool"), v)
		require.NoError(t, err)
		require.Equal(t, x.hash("pool", o.Key()), h, "%+v", o)
		for i := range v[:len(v)-1] {
			if _, err := x.hashValue([]byte("pool"), v[:i]); err == nil {
				// Cut after the name, the owner is whole.
				require.Greater(t, i, len(o.Cluster)+len(o.Kind)+len(o.Namespace)+len(o.Name)+4)
			}
		}
	}
}

// len counts the addresses filed.
func (x *ownerIndex) len() int {
	n := len(x.v4) + len(x.v6)
	for _, m := range x.more {
		n += len(m)
	}
	return n
}
