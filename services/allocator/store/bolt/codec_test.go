package bolt

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAddrKeysSortByPoolThenAddress: bbolt's byte order must be the
// snapshot order (pool id, then address with IPv4 first), and a pool id
// that extends another must not fall inside its range.
func TestAddrKeysSortByPoolThenAddress(t *testing.T) {
	keys := [][]byte{
		addrKey("a", netip.MustParseAddr("9.255.255.255")),
		addrKey("a", netip.MustParseAddr("10.0.0.2")),
		addrKey("a", netip.MustParseAddr("10.0.0.10")),
		addrKey("a", netip.MustParseAddr("::1")),
		addrKey("a", netip.MustParseAddr("2001:db8::1")),
		addrKey("a-b", netip.MustParseAddr("10.0.0.1")),
		addrKey("ab", netip.MustParseAddr("9.0.0.1")),
	}
	for i := 1; i < len(keys); i++ {
		require.Negative(t, bytes.Compare(keys[i-1], keys[i]), "key %d sorts after key %d", i-1, i)
	}
	for _, k := range keys[5:] {
		require.False(t, bytes.HasPrefix(k, poolPrefix("a")))
	}
}

func TestSplitAddrKey(t *testing.T) {
	for _, addr := range []string{"0.0.0.0", "10.1.2.3", "255.255.255.255", "::", "2001:db8::ff", "::ffff:10.0.0.1"} {
		a := netip.MustParseAddr(addr)
		pool, got, err := splitAddrKey(addrKey("pool-1", a))
		require.NoError(t, err)
		require.Equal(t, "pool-1", string(pool))
		require.Equal(t, a, got)
	}
	for _, bad := range [][]byte{nil, []byte("pool"), []byte("pool\x00"), []byte("pool\x00\x04\x01\x02"), []byte("pool\x00\x05\x01\x02\x03\x04")} {
		_, _, err := splitAddrKey(bad)
		require.Error(t, err, "%q", bad)
	}
}
