package ipam

import (
	"math/big"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/plexusnet/plexus/internal/netparse"
	"github.com/stretchr/testify/require"
)

var (
	mp = netip.MustParsePrefix
	ma = netip.MustParseAddr
	t0 = time.Unix(1_700_000_000, 0)
)

func rng(first, last string) netparse.Range {
	return netparse.Range{First: ma(first), Last: ma(last)}
}

func newPool(t *testing.T, cfg Config) *Pool {
	t.Helper()
	p, err := New(cfg)
	require.NoError(t, err)
	return p
}

// drain allocates until the pool is exhausted and returns what it got.
func drain(t *testing.T, p *Pool, now time.Time, limit int) []string {
	t.Helper()
	var got []string
	for i := 0; i < limit; i++ {
		a, err := p.AllocateNext(now)
		if err != nil {
			require.ErrorIs(t, err, ErrExhausted)
			return got
		}
		got = append(got, a.String())
	}
	t.Fatalf("pool not exhausted after %d allocations", limit)
	return nil
}

func TestNewValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want error
	}{
		{"no CIDRs", Config{}, ErrNoCIDRs},
		{"host bits", Config{CIDRs: []netip.Prefix{netip.PrefixFrom(ma("10.0.0.1"), 24)}}, ErrInvalidCIDR},
		{"invalid prefix", Config{CIDRs: []netip.Prefix{{}}}, ErrInvalidCIDR},
		{"mixed family", Config{CIDRs: []netip.Prefix{mp("10.0.0.0/24"), mp("2001:db8::/64")}}, ErrMixedFamily},
		{"mapped in IPv4 pool", Config{CIDRs: []netip.Prefix{mp("10.0.0.0/24"), mp("::ffff:10.1.0.0/120")}}, ErrMixedFamily},
		{"same CIDR twice", Config{CIDRs: []netip.Prefix{mp("10.0.0.0/24"), mp("10.0.0.0/24")}}, ErrOverlap},
		{"nested", Config{CIDRs: []netip.Prefix{mp("10.0.0.0/16"), mp("10.0.3.0/24")}}, ErrOverlap},
		{"negative delay", Config{CIDRs: []netip.Prefix{mp("10.0.0.0/24")}, ReuseDelay: -time.Second}, ErrInvalidReuseDelay},
		{"reserved backwards", Config{CIDRs: []netip.Prefix{mp("10.0.0.0/24")},
			Reserved: []netparse.Range{rng("10.0.0.9", "10.0.0.5")}}, ErrInvalidRange},
		{"reserved of other family", Config{CIDRs: []netip.Prefix{mp("10.0.0.0/24")},
			Reserved: []netparse.Range{rng("2001:db8::1", "2001:db8::5")}}, ErrMixedFamily},
		{"reserved zero", Config{CIDRs: []netip.Prefix{mp("10.0.0.0/24")},
			Reserved: []netparse.Range{{}}}, ErrInvalidRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.cfg)
			require.ErrorIs(t, err, tt.want)
			require.Nil(t, p)
		})
	}
}

func TestSmallCIDRs(t *testing.T) {
	tests := []struct {
		cidr string
		want []string
	}{
		{"10.0.0.7/32", []string{"10.0.0.7"}},
		{"10.0.0.6/31", []string{"10.0.0.6", "10.0.0.7"}},
		{"10.0.0.4/30", []string{"10.0.0.5", "10.0.0.6"}},
		{"10.0.0.0/29", []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"}},
		{"2001:db8::7/128", []string{"2001:db8::7"}},
		{"2001:db8::6/127", []string{"2001:db8::6", "2001:db8::7"}},
		{"2001:db8::4/126", []string{"2001:db8::5", "2001:db8::6", "2001:db8::7"}},
		{"255.255.255.255/32", []string{"255.255.255.255"}},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127",
			[]string{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}},
		{"0.0.0.0/31", []string{"0.0.0.0", "0.0.0.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.cidr, func(t *testing.T) {
			p := newPool(t, Config{CIDRs: []netip.Prefix{mp(tt.cidr)}})
			st := p.Stats()
			require.Equal(t, int64(len(tt.want)), st.Capacity.Int64())
			require.Equal(t, tt.want, drain(t, p, t0, 100))
			st = p.Stats()
			require.Equal(t, int64(len(tt.want)), st.Allocated.Int64())
			require.Zero(t, st.Free.Sign())
			for _, s := range tt.want {
				require.True(t, p.IsAllocated(ma(s)))
				require.ErrorIs(t, p.AllocateAddr(ma(s), t0), ErrInUse)
			}
			// Releasing one makes exactly that one available again.
			require.NoError(t, p.Release(ma(tt.want[0]), t0))
			require.Equal(t, tt.want[:1], drain(t, p, t0, 100))
		})
	}
}

func TestNetworkAndBroadcast(t *testing.T) {
	p := newPool(t, Config{CIDRs: []netip.Prefix{mp("10.0.0.0/24")}})
	require.Equal(t, int64(254), p.Stats().Capacity.Int64())
	for _, a := range []string{"10.0.0.0", "10.0.0.255"} {
		require.ErrorIs(t, p.AllocateAddr(ma(a), t0), ErrReserved)
		require.ErrorIs(t, p.Release(ma(a), t0), ErrNotAllocated)
		require.False(t, p.IsAllocated(ma(a)))
		require.True(t, p.Contains(ma(a)))
	}
	got := drain(t, p, t0, 300)
	require.Len(t, got, 254)
	require.Equal(t, "10.0.0.1", got[0])
	require.Equal(t, "10.0.0.254", got[253])
}

func TestReservedAtEdges(t *testing.T) {
	tests := []struct {
		name     string
		cidrs    []string
		reserved []netparse.Range
		want     []string
	}{
		{"first and last usable", []string{"10.0.0.0/29"},
			[]netparse.Range{rng("10.0.0.1", "10.0.0.1"), rng("10.0.0.6", "10.0.0.6")},
			[]string{"10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"}},
		{"over the network address", []string{"10.0.0.0/29"},
			[]netparse.Range{rng("9.255.255.250", "10.0.0.2")},
			[]string{"10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"}},
		{"over the broadcast address", []string{"10.0.0.0/29"},
			[]netparse.Range{rng("10.0.0.5", "10.0.0.9")},
			[]string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}},
		{"whole CIDR", []string{"10.0.0.0/29", "10.0.1.0/31"},
			[]netparse.Range{rng("10.0.0.0", "10.0.0.7")},
			[]string{"10.0.1.0", "10.0.1.1"}},
		{"across two CIDRs", []string{"10.0.0.0/31", "10.0.0.2/31"},
			[]netparse.Range{rng("10.0.0.1", "10.0.0.2")},
			[]string{"10.0.0.0", "10.0.0.3"}},
		{"outside every CIDR", []string{"10.0.0.0/31"},
			[]netparse.Range{rng("10.0.1.0", "10.0.1.255")},
			[]string{"10.0.0.0", "10.0.0.1"}},
		{"IPv6 ends", []string{"2001:db8::/126"},
			[]netparse.Range{rng("2001:db8::", "2001:db8::"), rng("2001:db8::3", "2001:db8::3")},
			[]string{"2001:db8::1", "2001:db8::2"}},
		{"overlapping ranges", []string{"10.0.0.0/28"},
			[]netparse.Range{rng("10.0.0.2", "10.0.0.6"), rng("10.0.0.4", "10.0.0.12"), rng("10.0.0.13", "10.0.0.13")},
			[]string{"10.0.0.1", "10.0.0.14"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cidrs []netip.Prefix
			for _, c := range tt.cidrs {
				cidrs = append(cidrs, mp(c))
			}
			p := newPool(t, Config{CIDRs: cidrs, Reserved: tt.reserved})
			require.Equal(t, int64(len(tt.want)), p.Stats().Capacity.Int64())
			for _, r := range tt.reserved {
				for a := r.First; a.IsValid() && !r.Last.Less(a); a = a.Next() {
					if p.Contains(a) {
						require.ErrorIs(t, p.AllocateAddr(a, t0), ErrReserved)
					} else {
						require.ErrorIs(t, p.AllocateAddr(a, t0), ErrOutOfRange)
					}
				}
			}
			require.Equal(t, tt.want, drain(t, p, t0, 100))
		})
	}
}

func TestAllocateAddrErrors(t *testing.T) {
	p := newPool(t, Config{
		CIDRs:      []netip.Prefix{mp("10.0.0.0/24")},
		Reserved:   []netparse.Range{rng("10.0.0.10", "10.0.0.19")},
		ReuseDelay: time.Minute,
	})
	require.NoError(t, p.AllocateAddr(ma("10.0.0.5"), t0))
	require.NoError(t, p.AllocateAddr(ma("10.0.0.6"), t0))
	require.NoError(t, p.Release(ma("10.0.0.6"), t0))

	tests := []struct {
		addr netip.Addr
		want error
	}{
		{ma("10.0.1.1"), ErrOutOfRange},
		{ma("10.0.0.0"), ErrReserved},
		{ma("10.0.0.255"), ErrReserved},
		{ma("10.0.0.10"), ErrReserved},
		{ma("10.0.0.19"), ErrReserved},
		{ma("10.0.0.5"), ErrInUse},
		{ma("10.0.0.6"), ErrInReuseDelay},
		{ma("2001:db8::1"), ErrMixedFamily},
		{ma("::ffff:10.0.0.7"), ErrMixedFamily},
		{netip.Addr{}, ErrInvalidAddress},
		{ma("fe80::1%eth0"), ErrInvalidAddress},
	}
	for _, tt := range tests {
		t.Run(tt.addr.String(), func(t *testing.T) {
			err := p.AllocateAddr(tt.addr, t0)
			require.ErrorIs(t, err, tt.want)
		})
	}
	// A quarantined address is in use, and says why.
	err := p.AllocateAddr(ma("10.0.0.6"), t0)
	require.ErrorIs(t, err, ErrInUse)
	require.ErrorIs(t, err, ErrInReuseDelay)
	require.NotErrorIs(t, p.AllocateAddr(ma("10.0.0.5"), t0), ErrInReuseDelay)
}

func TestReleaseErrors(t *testing.T) {
	p := newPool(t, Config{CIDRs: []netip.Prefix{mp("10.0.0.0/24")}, ReuseDelay: time.Minute,
		Reserved: []netparse.Range{rng("10.0.0.10", "10.0.0.10")}})
	require.NoError(t, p.AllocateAddr(ma("10.0.0.5"), t0))
	require.ErrorIs(t, p.Release(ma("10.0.0.6"), t0), ErrNotAllocated)
	require.ErrorIs(t, p.Release(ma("10.0.0.10"), t0), ErrNotAllocated)
	require.ErrorIs(t, p.Release(ma("10.0.1.6"), t0), ErrOutOfRange)
	require.ErrorIs(t, p.Release(ma("2001:db8::1"), t0), ErrMixedFamily)
	require.NoError(t, p.Release(ma("10.0.0.5"), t0))
	require.ErrorIs(t, p.Release(ma("10.0.0.5"), t0), ErrNotAllocated, "released twice")
	require.False(t, p.IsAllocated(ma("10.0.0.5")))
}

func TestReuseDelay(t *testing.T) {
	const delay = 30 * time.Second
	p := newPool(t, Config{CIDRs: []netip.Prefix{mp("10.0.0.0/30")}, ReuseDelay: delay})
	require.Equal(t, []string{"10.0.0.1", "10.0.0.2"}, drain(t, p, t0, 10))

	require.NoError(t, p.Release(ma("10.0.0.1"), t0))
	st := p.Stats()
	require.Equal(t, uint64(1), st.Quarantined)
	require.Equal(t, int64(1), st.Allocated.Int64())
	require.Zero(t, st.Free.Sign(), "a quarantined address is not free")

	almost := t0.Add(delay - time.Nanosecond)
	_, err := p.AllocateNext(almost)
	require.ErrorIs(t, err, ErrExhausted)
	require.ErrorIs(t, p.AllocateAddr(ma("10.0.0.1"), almost), ErrInReuseDelay)

	// A clock that steps back never ends a quarantine early.
	_, err = p.AllocateNext(t0.Add(-time.Hour))
	require.ErrorIs(t, err, ErrExhausted)

	a, err := p.AllocateNext(t0.Add(delay))
	require.NoError(t, err)
	require.Equal(t, "10.0.0.1", a.String())
	require.Zero(t, p.Stats().Quarantined)

	// Released again: the later release counts, not the earlier one.
	require.NoError(t, p.Release(a, t0.Add(2*delay)))
	require.ErrorIs(t, p.AllocateAddr(a, t0.Add(2*delay+delay/2)), ErrInReuseDelay)
	require.NoError(t, p.AllocateAddr(a, t0.Add(3*delay)))
}

func TestNextFit(t *testing.T) {
	p := newPool(t, Config{CIDRs: []netip.Prefix{mp("10.0.0.0/29")}})
	for _, want := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		a, err := p.AllocateNext(t0)
		require.NoError(t, err)
		require.Equal(t, want, a.String())
	}
	// A released address is not handed out again before the others.
	require.NoError(t, p.Release(ma("10.0.0.1"), t0))
	require.NoError(t, p.AllocateAddr(ma("10.0.0.5"), t0))
	require.Equal(t, []string{"10.0.0.4", "10.0.0.6", "10.0.0.1"}, drain(t, p, t0, 10))
	// Wrap-around from the end.
	require.NoError(t, p.Release(ma("10.0.0.2"), t0))
	require.NoError(t, p.Release(ma("10.0.0.6"), t0))
	require.Equal(t, []string{"10.0.0.2", "10.0.0.6"}, drain(t, p, t0, 10))
}

func TestNextFitAcrossCIDRs(t *testing.T) {
	p := newPool(t, Config{CIDRs: []netip.Prefix{mp("10.0.1.0/31"), mp("10.0.0.0/31"), mp("10.0.2.0/32")}})
	require.Equal(t, []netip.Prefix{mp("10.0.0.0/31"), mp("10.0.1.0/31"), mp("10.0.2.0/32")}, p.CIDRs())
	require.Equal(t, []string{"10.0.0.0", "10.0.0.1", "10.0.1.0", "10.0.1.1", "10.0.2.0"}, drain(t, p, t0, 10))
	require.NoError(t, p.Release(ma("10.0.0.1"), t0))
	require.NoError(t, p.Release(ma("10.0.1.0"), t0))
	// The cursor is past 10.0.2.0: it wraps to the lowest CIDR.
	require.Equal(t, []string{"10.0.0.1", "10.0.1.0"}, drain(t, p, t0, 10))
}

func TestAddCIDRs(t *testing.T) {
	p := newPool(t, Config{CIDRs: []netip.Prefix{mp("10.0.0.0/30")},
		Reserved: []netparse.Range{rng("10.0.1.0", "10.0.1.3")}})
	require.Len(t, drain(t, p, t0, 10), 2)

	require.ErrorIs(t, p.AddCIDRs(mp("10.0.0.0/24")), ErrOverlap)
	require.ErrorIs(t, p.AddCIDRs(mp("10.0.2.0/24"), mp("10.0.2.128/25")), ErrOverlap)
	require.ErrorIs(t, p.AddCIDRs(mp("10.0.2.0/24"), mp("2001:db8::/64")), ErrMixedFamily)
	require.ErrorIs(t, p.AddCIDRs(mp("10.0.2.0/24"), netip.PrefixFrom(ma("10.0.3.1"), 24)), ErrInvalidCIDR)
	require.Equal(t, []netip.Prefix{mp("10.0.0.0/30")}, p.CIDRs(), "a refused call adds nothing")

	// The reserved range given before the CIDR existed applies to it.
	require.NoError(t, p.AddCIDRs(mp("10.0.1.0/29")))
	require.Equal(t, int64(2+3), p.Stats().Capacity.Int64())
	require.Equal(t, []string{"10.0.1.4", "10.0.1.5", "10.0.1.6"}, drain(t, p, t0, 10))
	require.True(t, p.Overlaps(mp("10.0.1.0/24")))
	require.False(t, p.Overlaps(mp("10.0.2.0/24")))
	require.False(t, p.Overlaps(mp("::/0")))
}

func TestRemoveCIDRs(t *testing.T) {
	p := newPool(t, Config{CIDRs: []netip.Prefix{mp("10.0.0.0/29"), mp("10.0.1.0/29"), mp("10.0.2.0/29")},
		ReuseDelay: time.Minute})
	require.NoError(t, p.AllocateAddr(ma("10.0.1.3"), t0))
	require.NoError(t, p.AllocateAddr(ma("10.0.1.4"), t0))
	require.NoError(t, p.AllocateAddr(ma("10.0.1.5"), t0))
	require.NoError(t, p.Release(ma("10.0.1.5"), t0)) // quarantined

	_, err := p.RemoveCIDRs(false, mp("10.0.1.0/29"))
	require.ErrorIs(t, err, ErrCIDRInUse)
	_, err = p.RemoveCIDRs(false, mp("10.0.3.0/29"))
	require.ErrorIs(t, err, ErrCIDRNotFound)
	_, err = p.RemoveCIDRs(true, mp("10.0.0.0/29"), mp("10.0.1.0/29"), mp("10.0.2.0/29"))
	require.ErrorIs(t, err, ErrNoCIDRs)
	require.Len(t, p.CIDRs(), 3, "a refused call removes nothing")

	out, err := p.RemoveCIDRs(false, mp("10.0.2.0/29"))
	require.NoError(t, err)
	require.Empty(t, out)

	out, err = p.RemoveCIDRs(true, mp("10.0.1.0/29"))
	require.NoError(t, err)
	require.Equal(t, []netip.Addr{ma("10.0.1.3"), ma("10.0.1.4")}, out)
	require.Equal(t, []netip.Prefix{mp("10.0.0.0/29")}, p.CIDRs())

	st := p.Stats()
	require.Equal(t, int64(6), st.Capacity.Int64())
	require.Equal(t, int64(2), st.Allocated.Int64())
	require.Equal(t, int64(6), st.Free.Int64())
	require.Equal(t, uint64(2), st.OutOfRange)
	require.Zero(t, st.Quarantined, "the quarantined address went with its CIDR")
	require.Equal(t, out, p.OutOfRange())
	require.True(t, p.IsAllocated(ma("10.0.1.3")))
	require.False(t, p.Contains(ma("10.0.1.3")))
	require.ErrorIs(t, p.AllocateAddr(ma("10.0.1.3"), t0), ErrOutOfRange)

	// Out-of-range allocations can be released, once.
	require.NoError(t, p.Release(ma("10.0.1.3"), t0))
	require.ErrorIs(t, p.Release(ma("10.0.1.3"), t0), ErrOutOfRange)

	// Adding the CIDR back brings the remaining one into range.
	require.NoError(t, p.AddCIDRs(mp("10.0.1.0/29")))
	st = p.Stats()
	require.Zero(t, st.OutOfRange)
	require.Equal(t, int64(1), st.Allocated.Int64())
	require.Equal(t, int64(11), st.Free.Int64())
	require.ErrorIs(t, p.AllocateAddr(ma("10.0.1.4"), t0), ErrInUse)
}

func TestAddReservedOverAllocations(t *testing.T) {
	p := newPool(t, Config{CIDRs: []netip.Prefix{mp("10.0.0.0/29")}, ReuseDelay: time.Minute})
	require.NoError(t, p.AllocateAddr(ma("10.0.0.2"), t0))
	require.NoError(t, p.AllocateAddr(ma("10.0.0.3"), t0))
	require.NoError(t, p.Release(ma("10.0.0.3"), t0))
	require.NoError(t, p.AddReserved(rng("10.0.0.1", "10.0.0.3")))

	st := p.Stats()
	require.Equal(t, int64(3), st.Capacity.Int64())
	require.Equal(t, int64(1), st.Allocated.Int64())
	require.Equal(t, int64(3), st.Free.Int64())
	require.Zero(t, st.Quarantined)
	require.True(t, p.IsAllocated(ma("10.0.0.2")), "an allocation under a new reservation is kept")
	require.NoError(t, p.Release(ma("10.0.0.2"), t0))
	require.False(t, p.IsAllocated(ma("10.0.0.2")))
	require.Equal(t, []string{"10.0.0.4", "10.0.0.5", "10.0.0.6"}, drain(t, p, t0.Add(time.Hour), 10))
	require.Equal(t, []netparse.Range{rng("10.0.0.1", "10.0.0.3")}, p.Reserved())
	require.ErrorIs(t, p.AddReserved(rng("10.0.0.1", "2001:db8::1")), ErrInvalidRange)
}

func TestRestore(t *testing.T) {
	p := newPool(t, Config{CIDRs: []netip.Prefix{mp("10.0.0.0/29")},
		Reserved: []netparse.Range{rng("10.0.0.6", "10.0.0.6")}, ReuseDelay: time.Minute})
	for _, a := range []string{"10.0.0.1", "10.0.9.9", "10.0.0.6", "10.0.0.0", "10.0.0.7"} {
		require.NoError(t, p.Restore(ma(a)), a)
		require.True(t, p.IsAllocated(ma(a)), a)
		require.ErrorIs(t, p.Restore(ma(a)), ErrInUse, a)
	}
	require.ErrorIs(t, p.Restore(ma("2001:db8::1")), ErrMixedFamily)
	st := p.Stats()
	require.Equal(t, int64(5), st.Allocated.Int64())
	require.Equal(t, int64(5), st.Capacity.Int64())
	require.Equal(t, int64(4), st.Free.Int64())
	require.Equal(t, uint64(1), st.OutOfRange)
	require.Equal(t, []netip.Addr{ma("10.0.9.9")}, p.OutOfRange())

	// Restoring a quarantined address ends its quarantine.
	require.NoError(t, p.Release(ma("10.0.0.1"), t0))
	require.NoError(t, p.Restore(ma("10.0.0.1")))
	require.True(t, p.IsAllocated(ma("10.0.0.1")))
	require.Zero(t, p.Stats().Quarantined)
	require.NoError(t, p.Release(ma("10.0.0.1"), t0))
	require.Equal(t, uint64(1), p.Stats().Quarantined)

	// Restored allocations on reserved, network and broadcast addresses are
	// released without quarantine and never handed out.
	require.NoError(t, p.Release(ma("10.0.0.6"), t0))
	require.NoError(t, p.Release(ma("10.0.0.0"), t0))
	require.NoError(t, p.Release(ma("10.0.0.7"), t0))
	require.Equal(t, []string{"10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"}, drain(t, p, t0, 10))
}

func TestLargeIPv6(t *testing.T) {
	tests := []struct {
		cidr     string
		capacity string
	}{
		// Less the Subnet-Router anycast address.
		{"2001:db8::/64", "18446744073709551615"},
		{"2001:db8::/48", "1208925819614629174706175"},
		{"::/0", new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1)).String()},
	}
	for _, tt := range tests {
		t.Run(tt.cidr, func(t *testing.T) {
			p := newPool(t, Config{CIDRs: []netip.Prefix{mp(tt.cidr)}})
			st := p.Stats()
			require.Equal(t, tt.capacity, st.Capacity.String())
			require.Equal(t, tt.capacity, st.Free.String())

			r := netparse.PrefixRange(mp(tt.cidr))
			require.ErrorIs(t, p.AllocateAddr(r.First, t0), ErrReserved, "the Subnet-Router anycast address")
			for _, a := range []netip.Addr{r.Last, r.Last.Prev(), addrAt(r.First, 1<<40)} {
				require.NoError(t, p.AllocateAddr(a, t0), a)
				require.True(t, p.IsAllocated(a))
			}
			got := drain2(t, p, 3)
			require.Equal(t, []netip.Addr{r.First.Next(), addrAt(r.First, 2), addrAt(r.First, 3)}, got)
			require.Equal(t, "6", p.Stats().Allocated.String())
			free := new(big.Int).Sub(st.Capacity, big.NewInt(6))
			require.Equal(t, free.String(), p.Stats().Free.String())
		})
	}
}

// drain2 allocates n addresses.
func drain2(t *testing.T, p *Pool, n int) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for i := 0; i < n; i++ {
		a, err := p.AllocateNext(t0)
		require.NoError(t, err)
		out = append(out, a)
	}
	return out
}

func TestCursorWrapsAtTopOfAddressSpace(t *testing.T) {
	p := newPool(t, Config{CIDRs: []netip.Prefix{mp("::/127"), mp("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127")}})
	require.NoError(t, p.AllocateAddr(ma("::"), t0))
	require.NoError(t, p.AllocateAddr(ma("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"), t0))
	got := drain(t, p, t0, 10)
	require.Equal(t, []string{"::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}, got)
	require.NoError(t, p.Release(ma("::"), t0))
	require.NoError(t, p.Release(ma("::1"), t0))
	// The cursor is one past the highest address, which wraps to ::.
	require.Equal(t, []string{"::", "::1"}, drain(t, p, t0, 10))
}

// TestSparseMemory checks that a large pool costs memory by what is in it:
// scattered allocations in a /48 build few nodes, and draining them frees
// them all. A fresh /48 holds one used address, its Subnet-Router anycast
// address, which costs a short chain of nodes above the levels that can
// store a single offset.
func TestSparseMemory(t *testing.T) {
	p := newPool(t, Config{CIDRs: []netip.Prefix{mp("2001:db8::/48")}})
	fresh := countNodes(p.cidrs[0].t.root)
	require.LessOrEqual(t, fresh, 5)
	base := ma("2001:db8::")
	var addrs []netip.Addr
	for i := 0; i < 1000; i++ {
		a := addrAt(base, int64(i)*(1<<50+12345)+1) // not the anycast address
		addrs = append(addrs, a)
		require.NoError(t, p.AllocateAddr(a, t0))
	}
	c := p.cidrs[0]
	require.Less(t, countNodes(c.t.root), 200, "scattered singles should not build chains of nodes")
	for _, a := range addrs {
		require.NoError(t, p.Release(a, t0))
	}
	require.Equal(t, fresh, countNodes(c.t.root), "drained, the tree is what a fresh pool's is")
}

func countNodes(n *node) int {
	total := 1
	for _, k := range n.kids {
		total += countNodes(k)
	}
	return total
}

// TestMemoryPerAllocation holds the index to its memory budget (64 MiB for
// a million allocations in an IPv6 /64, that is 67 bytes each) for scattered
// addresses, the worst case, and checks that addresses handed out in
// sequence cost next to nothing.
func TestMemoryPerAllocation(t *testing.T) {
	const n = 200_000
	tests := []struct {
		name   string
		budget float64 // bytes per allocation
		fill   func(t *testing.T, p *Pool)
	}{
		{"random", 64, func(t *testing.T, p *Pool) {
			seed := uint64(0x9e3779b97f4a7c15)
			base := addrBits(ma("2001:db8::"))
			for i := 0; i < n; {
				seed ^= seed << 13
				seed ^= seed >> 7
				seed ^= seed << 17
				if err := p.AllocateAddr(bitsAddr(base.add64(seed), false), t0); err == nil {
					i++
				} else {
					require.ErrorIs(t, err, ErrInUse)
				}
			}
		}},
		{"next", 1, func(t *testing.T, p *Pool) {
			for i := 0; i < n; i++ {
				_, err := p.AllocateNext(t0)
				require.NoError(t, err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := heapAlloc()
			p := newPool(t, Config{CIDRs: []netip.Prefix{mp("2001:db8::/64")}})
			tt.fill(t, p)
			perAlloc := float64(heapAlloc()-before) / n
			require.Equal(t, int64(n), p.Stats().Allocated.Int64())
			require.LessOrEqual(t, perAlloc, tt.budget)
			t.Logf("%.2f bytes per allocation", perAlloc)
			runtime.KeepAlive(p)
		})
	}
}
