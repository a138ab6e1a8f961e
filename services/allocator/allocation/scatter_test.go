package allocation

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRandomAddrStaysInItsPrefix(t *testing.T) {
	for _, s := range []string{"10.0.0.0/8", "10.1.2.3/32", "10.0.0.0/31", "fd00::/64", "fd00:1::/48", "fd00::/120", "fd00::1/128"} {
		p := netip.MustParsePrefix(s)
		seen := map[netip.Addr]bool{}
		for range 200 {
			a := randomAddr(p)
			require.True(t, p.Contains(a), "%s not in %s", a, p)
			require.Equal(t, p.Addr().Is4(), a.Is4(), "%s keeps the family of %s", a, p)
			seen[a] = true
		}
		if p.Bits() <= p.Addr().BitLen()-16 {
			require.Greater(t, len(seen), 150, "addresses of %s are spread", p)
		}
	}
}
