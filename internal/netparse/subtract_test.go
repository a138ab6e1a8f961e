package netparse

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func mustRange(s string) Range {
	r, err := ParseRange(s)
	if err != nil {
		panic(err)
	}
	return r
}

func ranges(ss ...string) []Range {
	out := make([]Range, 0, len(ss))
	for _, s := range ss {
		out = append(out, mustRange(s))
	}
	return out
}

func TestSubtract(t *testing.T) {
	tests := []struct {
		name     string
		from, by []Range
		want     []Range
	}{
		{"nothing taken away", ranges("10.0.0.0-10.0.0.255"), nil, ranges("10.0.0.0-10.0.0.255")},
		{"all taken away", ranges("10.0.0.0-10.0.0.255"), ranges("10.0.0.0-10.0.1.0"), nil},
		{"a hole", ranges("10.0.0.0-10.0.0.255"), ranges("10.0.0.16-10.0.0.31"), ranges("10.0.0.0-10.0.0.15", "10.0.0.32-10.0.0.255")},
		{"both ends", ranges("10.0.0.0-10.0.0.255"), ranges("10.0.0.0", "10.0.0.255"), ranges("10.0.0.1-10.0.0.254")},
		{"the shrunk CIDR's other half", []Range{PrefixRange(netip.MustParsePrefix("10.0.0.0/23"))}, []Range{PrefixRange(netip.MustParsePrefix("10.0.0.0/24"))}, ranges("10.0.1.0-10.0.1.255")},
		{"the edges of the space", ranges("0.0.0.0-255.255.255.255"), ranges("0.0.0.1-255.255.255.254"), ranges("0.0.0.0", "255.255.255.255")},
		{"IPv6", ranges("fd00::-fd00::ffff"), ranges("fd00::10-fd00::1f"), ranges("fd00::-fd00::f", "fd00::20-fd00::ffff")},
		{"families do not cut each other", ranges("fd00::1-fd00::2", "10.0.0.1-10.0.0.2"), ranges("0.0.0.0-255.255.255.255"), ranges("fd00::1-fd00::2")},
		{"sorted, IPv4 first", ranges("fd00::1", "10.0.0.9", "10.0.0.1"), nil, ranges("10.0.0.1", "10.0.0.9", "fd00::1")},
		{"invalid ranges ignored", []Range{{}, mustRange("10.0.0.1")}, []Range{{}}, ranges("10.0.0.1")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Subtract(tc.from, tc.by))
		})
	}
}

// FuzzSubtract checks Subtract against a set of addresses, in a 64-address
// space where every address can be counted.
func FuzzSubtract(f *testing.F) {
	f.Add([]byte{0, 63}, []byte{})
	f.Add([]byte{0, 63}, []byte{10, 20})
	f.Add([]byte{5, 9, 30, 40}, []byte{0, 6, 8, 35, 39, 63})
	f.Add([]byte{63, 0}, []byte{7, 7})
	f.Fuzz(func(t *testing.T, fromB, byB []byte) {
		addr := func(b byte) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, b % 64}) }
		mk := func(bs []byte) ([]Range, map[netip.Addr]bool) {
			var rs []Range
			set := map[netip.Addr]bool{}
			for i := 0; i+1 < len(bs) && len(rs) < 8; i += 2 {
				r := Range{First: addr(bs[i]), Last: addr(bs[i+1])}
				rs = append(rs, r) // out of order ones are invalid and ignored
				for a := r.First; r.IsValid() && !r.Last.Less(a); a = a.Next() {
					set[a] = true
				}
			}
			return rs, set
		}
		from, fromSet := mk(fromB)
		by, bySet := mk(byB)
		got := Subtract(from, by)

		gotSet := map[netip.Addr]bool{}
		for i, r := range got {
			require.True(t, r.IsValid(), "piece %v", r)
			if i > 0 {
				require.False(t, r.First.Less(got[i-1].First), "not sorted: %v", got)
			}
			for a := r.First; !r.Last.Less(a); a = a.Next() {
				gotSet[a] = true
			}
		}
		want := map[netip.Addr]bool{}
		for a := range fromSet {
			if !bySet[a] {
				want[a] = true
			}
		}
		require.Equal(t, want, gotSet)
	})
}
