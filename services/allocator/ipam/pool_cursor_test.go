package ipam

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSetCursor(t *testing.T) {
	p, err := New(Config{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("10.0.2.0/30")}})
	require.NoError(t, err)
	now := time.Now()

	require.NoError(t, p.SetCursor(netip.MustParseAddr("10.0.0.200")))
	a, err := p.AllocateNext(now)
	require.NoError(t, err)
	require.Equal(t, "10.0.0.200", a.String(), "the search starts at the cursor")

	// Between the CIDRs: the next CIDR.
	require.NoError(t, p.SetCursor(netip.MustParseAddr("10.0.1.7")))
	a, err = p.AllocateNext(now)
	require.NoError(t, err)
	require.Equal(t, "10.0.2.1", a.String())

	// Past the last address: wraps to the first.
	require.NoError(t, p.SetCursor(netip.MustParseAddr("10.0.3.0")))
	a, err = p.AllocateNext(now)
	require.NoError(t, err)
	require.Equal(t, "10.0.0.1", a.String())

	require.ErrorIs(t, p.SetCursor(netip.MustParseAddr("fd00::1")), ErrMixedFamily)
	require.ErrorIs(t, p.SetCursor(netip.Addr{}), ErrInvalidAddress)
}
