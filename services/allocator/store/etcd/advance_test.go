package etcd

import (
	"math/big"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// bigOf is an address as a number, and the numbers of its family.
func bigOf(a netip.Addr) (*big.Int, *big.Int) {
	bits := 128
	if a.Is4() {
		bits = 32
	}
	return new(big.Int).SetBytes(a.AsSlice()), new(big.Int).Lsh(big.NewInt(1), uint(bits))
}

// checkAdvance compares advance with the same sum in big numbers.
func checkAdvance(t *testing.T, a netip.Addr, shift int) {
	t.Helper()
	n, size := bigOf(a)
	sum := new(big.Int).Add(n, new(big.Int).Lsh(big.NewInt(1), uint(shift)))
	b, ok := advance(a, shift)
	if sum.Cmp(size) >= 0 {
		require.False(t, ok, "%s + 2^%d leaves the family", a, shift)
		return
	}
	require.True(t, ok, "%s + 2^%d", a, shift)
	got, _ := bigOf(b)
	require.Equal(t, sum.String(), got.String(), "%s + 2^%d", a, shift)
	require.Equal(t, a.Is4(), b.Is4())
}

func TestAdvance(t *testing.T) {
	for _, c := range []struct {
		addr  string
		shift int
	}{
		{"10.0.0.1", 0}, {"10.0.0.255", 0}, {"10.255.255.255", 24}, {"255.255.255.255", 0},
		{"255.255.255.0", 8}, {"128.0.0.0", 31}, {"0.0.0.0", 32}, {"1.2.3.4", 200},
		{"::", 0}, {"::ffff:ffff:ffff:ffff", 0}, {"fd00::ffff:ffff:ffff:ffff", 3},
		{"fd00::", 64}, {"fd00::", 120}, {"8000::", 127}, {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 0},
		{"ffff:ffff:ffff:ffff::", 64}, {"ffff:ffff:ffff:fffe::", 64}, {"::", 128},
		{"::ffff:10.0.0.1", 16},
	} {
		checkAdvance(t, netip.MustParseAddr(c.addr), c.shift)
	}
}

func FuzzAdvance(f *testing.F) {
	f.Add([]byte{10, 0, 0, 1}, 8)
	f.Add([]byte{255, 255, 255, 255}, 0)
	f.Add(make([]byte, 16), 64)
	f.Add([]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0)
	f.Fuzz(func(t *testing.T, raw []byte, shift int) {
		a, ok := netip.AddrFromSlice(raw)
		if !ok || shift < 0 || shift > 200 {
			return
		}
		checkAdvance(t, a, shift)
	})
}

func TestSpanOf(t *testing.T) {
	for _, c := range []struct {
		first, last string
		want        float64
	}{
		{"10.0.0.1", "10.0.0.1", 1},
		{"10.0.0.0", "10.0.1.0", 257},
		{"fd00::", "fd00::1:0", 65537},
		{"fd00::ffff:ffff:ffff:ffff", "fd00:0:0:1::", 2},
		{"::", "::1:0:0:0:0", 1<<64 + 1},
		{"10.0.0.1", "fd00::", 1 << 32},
	} {
		require.Equal(t, c.want, spanOf(netip.MustParseAddr(c.first), netip.MustParseAddr(c.last)), "%s..%s", c.first, c.last)
	}
}
