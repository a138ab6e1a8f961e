package ipam

import (
	"net/netip"
	"testing"
	"time"

	"github.com/plexusnet/plexus/internal/netparse"
	"github.com/stretchr/testify/require"
)

func TestUnallocate(t *testing.T) {
	p := newPool(t, Config{CIDRs: []netip.Prefix{mp("10.0.0.0/29")}, ReuseDelay: time.Hour,
		Reserved: []netparse.Range{rng("10.0.0.6", "10.0.0.6")}})
	a, err := p.AllocateNext(t0)
	require.NoError(t, err)
	require.NoError(t, p.Unallocate(a))
	require.False(t, p.IsAllocated(a))
	require.Zero(t, p.Stats().Quarantined, "an allocation that never became durable skips the reuse delay")
	require.ErrorIs(t, p.Unallocate(a), ErrNotAllocated)
	require.NoError(t, p.AllocateAddr(a, t0), "the address is free again at once")

	require.ErrorIs(t, p.Unallocate(ma("10.0.0.6")), ErrNotAllocated)
	require.ErrorIs(t, p.Unallocate(ma("10.0.0.0")), ErrNotAllocated)
	require.ErrorIs(t, p.Unallocate(ma("10.0.1.1")), ErrNotAllocated)
	require.NoError(t, p.Release(a, t0))
	require.ErrorIs(t, p.Unallocate(a), ErrNotAllocated, "a quarantined address is not allocated")
}

func TestQuarantineAtStartup(t *testing.T) {
	p := newPool(t, Config{CIDRs: []netip.Prefix{mp("10.0.0.0/30")}, ReuseDelay: time.Hour,
		Reserved: []netparse.Range{rng("10.0.0.2", "10.0.0.2")}})
	require.True(t, p.Is4())
	until := t0.Add(time.Minute)
	require.NoError(t, p.Quarantine(ma("10.0.0.1"), until))
	require.ErrorIs(t, p.Quarantine(ma("10.0.0.1"), until), ErrInUse)
	require.ErrorIs(t, p.Quarantine(ma("10.0.0.2"), until), ErrReserved)
	require.ErrorIs(t, p.Quarantine(ma("10.0.0.0"), until), ErrReserved)
	require.ErrorIs(t, p.Quarantine(ma("10.0.1.0"), until), ErrOutOfRange)

	st := p.Stats()
	require.Equal(t, uint64(1), st.Quarantined)
	require.Zero(t, st.Free.Sign())
	require.False(t, p.IsAllocated(ma("10.0.0.1")))
	require.ErrorIs(t, p.AllocateAddr(ma("10.0.0.1"), t0), ErrInReuseDelay)
	_, err := p.AllocateNext(until.Add(-time.Nanosecond))
	require.ErrorIs(t, err, ErrExhausted)
	a, err := p.AllocateNext(until)
	require.NoError(t, err)
	require.Equal(t, ma("10.0.0.1"), a)
}

func TestCopyQuarantine(t *testing.T) {
	src := newPool(t, Config{CIDRs: []netip.Prefix{mp("10.0.0.0/29"), mp("10.0.1.0/30")}, ReuseDelay: time.Hour})
	for _, a := range []string{"10.0.0.1", "10.0.1.1"} {
		require.NoError(t, src.AllocateAddr(ma(a), t0))
		require.NoError(t, src.Release(ma(a), t0))
	}
	// Rebuilt without 10.0.1.0/30.
	p := newPool(t, Config{CIDRs: []netip.Prefix{mp("10.0.0.0/29")}, ReuseDelay: time.Hour})
	p.CopyQuarantine(src)
	require.Equal(t, uint64(1), p.Stats().Quarantined, "10.0.1.1 is outside the new CIDRs")
	require.ErrorIs(t, p.AllocateAddr(ma("10.0.0.1"), t0.Add(time.Minute)), ErrInReuseDelay)
	require.NoError(t, p.AllocateAddr(ma("10.0.0.1"), t0.Add(time.Hour)), "free once the original delay has passed")
}
