package allocation

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// TestCIDRIndexAgainstScan: on random pools of random prefixes (IPv4 and
// IPv6, nested, equal, adjacent), the index finds an overlap exactly when
// comparing with every pool's every CIDR does, skipping what it is told.
func TestCIDRIndexAgainstScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randPrefix := func() netip.Prefix {
		if rng.IntN(4) == 0 {
			a := netip.AddrFrom16([16]byte{0xfd, 0, byte(rng.IntN(4)), byte(rng.IntN(4)), 15: byte(rng.IntN(256))})
			return netip.PrefixFrom(a, 16+rng.IntN(113)).Masked()
		}
		a := netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(8)), byte(rng.IntN(256))})
		return netip.PrefixFrom(a, 8+rng.IntN(25)).Masked()
	}
	for round := range 50 {
		pools := map[string]*poolState{}
		for i := range 40 {
			var cidrs []string
			for range 1 + rng.IntN(3) {
				cidrs = append(cidrs, randPrefix().String())
			}
			pools[fmt.Sprintf("p%d", i)] = &poolState{rec: store.Pool{ID: fmt.Sprintf("p%d", i), CIDRs: cidrs, AllowOverlap: rng.IntN(5) == 0}}
		}
		x := newCIDRIndex(pools)
		for range 200 {
			p := randPrefix()
			skip := func(id string) bool { return pools[id].rec.AllowOverlap }
			want := false
			for id, ps := range pools {
				if skip(id) {
					continue
				}
				for _, c := range ps.rec.CIDRs {
					if netip.MustParsePrefix(c).Overlaps(p) {
						want = true
					}
				}
			}
			id, at, got := x.overlap(p, skip)
			require.Equal(t, want, got, "round %d: %s", round, p)
			if got {
				require.False(t, skip(id))
				require.True(t, at.Overlaps(p), "%s does not overlap %s", at, p)
				require.Contains(t, pools[id].rec.CIDRs, at.String())
			}
		}
	}
}

// TestCIDRIndexRemove: removing and replacing a pool's CIDRs leaves an
// index equal to one built from scratch.
func TestCIDRIndexRemove(t *testing.T) {
	pools := map[string]*poolState{
		"a": {rec: store.Pool{CIDRs: []string{"10.0.0.0/16", "10.1.0.0/24"}}},
		"b": {rec: store.Pool{CIDRs: []string{"10.0.0.0/16"}, AllowOverlap: true}},
	}
	x := newCIDRIndex(pools)
	none := func(string) bool { return false }
	_, _, ok := x.overlap(netip.MustParsePrefix("10.1.0.128/25"), none)
	require.True(t, ok)
	x.replace("a", pools["a"].rec.CIDRs, []string{"10.2.0.0/16"})
	_, _, ok = x.overlap(netip.MustParsePrefix("10.1.0.128/25"), none)
	require.False(t, ok, "a's old CIDR is gone")
	id, _, ok := x.overlap(netip.MustParsePrefix("10.0.5.0/24"), none)
	require.True(t, ok)
	require.Equal(t, "b", id, "b's equal CIDR stays when a's goes")
	x.replace("b", pools["b"].rec.CIDRs, nil)
	_, _, ok = x.overlap(netip.MustParsePrefix("10.0.5.0/24"), none)
	require.False(t, ok)
	require.Empty(t, x.byPrefix[netip.MustParsePrefix("10.0.0.0/16")])
	require.Equal(t, 1, x.byStart.Len())
	var nilIndex *cidrIndex
	nilIndex.replace("a", nil, []string{"10.0.0.0/8"}) // nothing to keep in step
}
