package ipam

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/plexusnet/plexus/internal/netparse"
	"github.com/stretchr/testify/require"
)

// model is a naive Pool: maps and linear walks, no trees.
type model struct {
	is4        bool
	cidrs      []netip.Prefix // sorted
	reserved   []netparse.Range
	delay      time.Duration
	allocated  map[netip.Addr]bool
	quarantine map[netip.Addr]time.Time
	cursor     netip.Addr
}

func newModel(cfg Config) *model {
	m := &model{
		is4:        cfg.CIDRs[0].Addr().Is4(),
		cidrs:      slices.Clone(cfg.CIDRs),
		reserved:   slices.Clone(cfg.Reserved),
		delay:      cfg.ReuseDelay,
		allocated:  map[netip.Addr]bool{},
		quarantine: map[netip.Addr]time.Time{},
	}
	m.sortCIDRs()
	m.cursor = m.cidrs[0].Addr()
	return m
}

func (m *model) sortCIDRs() {
	slices.SortFunc(m.cidrs, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
}

func (m *model) cidrOf(a netip.Addr) (netip.Prefix, bool) {
	for _, c := range m.cidrs {
		if c.Contains(a) {
			return c, true
		}
	}
	return netip.Prefix{}, false
}

// isEdge: the network and broadcast addresses of an IPv4 CIDR of /30 or
// shorter, the Subnet-Router anycast address of an IPv6 CIDR of /126 or
// shorter.
func isEdge(c netip.Prefix, a netip.Addr) bool {
	r := netparse.PrefixRange(c)
	if c.Addr().Is4() {
		return c.Bits() <= 30 && (a == r.First || a == r.Last)
	}
	return c.Bits() <= 126 && a == r.First
}

func (m *model) reservedRange(a netip.Addr) (netparse.Range, bool) {
	for _, r := range m.reserved {
		if r.Contains(a) {
			return r, true
		}
	}
	return netparse.Range{}, false
}

func (m *model) usable(a netip.Addr) bool {
	c, ok := m.cidrOf(a)
	if !ok || isEdge(c, a) {
		return false
	}
	_, res := m.reservedRange(a)
	return !res
}

func (m *model) expire(now time.Time) {
	for a, until := range m.quarantine {
		if !until.After(now) {
			delete(m.quarantine, a)
		}
	}
}

// next walks from the cursor to the first free usable address, hopping over
// whatever blocks the way.
func (m *model) next() (netip.Addr, bool) {
	n := len(m.cidrs)
	start := n
	for i, c := range m.cidrs {
		if !netparse.PrefixRange(c).Last.Less(m.cursor) {
			start = i
			break
		}
	}
	for k := 0; k <= n; k++ {
		c := m.cidrs[(start+k)%n]
		x := c.Addr()
		if k == 0 && start < n && x.Less(m.cursor) {
			x = m.cursor
		}
		for x.IsValid() && c.Contains(x) {
			if r, ok := m.reservedRange(x); ok {
				x = r.Last.Next()
				continue
			}
			if isEdge(c, x) || m.allocated[x] || !m.quarantine[x].IsZero() {
				x = x.Next()
				continue
			}
			return x, true
		}
	}
	return netip.Addr{}, false
}

func (m *model) allocateNext(now time.Time) (netip.Addr, error) {
	m.expire(now)
	x, ok := m.next()
	if !ok {
		return netip.Addr{}, ErrExhausted
	}
	m.allocated[x] = true
	m.cursor = x.Next()
	if !m.cursor.IsValid() {
		m.cursor = netip.IPv6Unspecified()
	}
	return x, nil
}

func (m *model) allocateAddr(a netip.Addr, now time.Time) error {
	m.expire(now)
	c, ok := m.cidrOf(a)
	_, res := m.reservedRange(a)
	switch {
	case !ok:
		return ErrOutOfRange
	case isEdge(c, a) || res:
		return ErrReserved
	case !m.quarantine[a].IsZero():
		return ErrInReuseDelay
	case m.allocated[a]:
		return ErrInUse
	}
	m.allocated[a] = true
	return nil
}

func (m *model) release(a netip.Addr, now time.Time) error {
	m.expire(now)
	if m.allocated[a] && !m.usable(a) {
		delete(m.allocated, a)
		return nil
	}
	c, ok := m.cidrOf(a)
	_, res := m.reservedRange(a)
	switch {
	case !ok:
		return ErrOutOfRange
	case isEdge(c, a) || res || !m.allocated[a]:
		return ErrNotAllocated
	}
	delete(m.allocated, a)
	if m.delay > 0 {
		m.quarantine[a] = now.Add(m.delay)
	}
	return nil
}

func (m *model) restore(a netip.Addr) error {
	if m.allocated[a] {
		return ErrInUse
	}
	delete(m.quarantine, a)
	m.allocated[a] = true
	return nil
}

func (m *model) addCIDR(pr netip.Prefix) error {
	for _, c := range m.cidrs {
		if c.Overlaps(pr) {
			return ErrOverlap
		}
	}
	m.cidrs = append(m.cidrs, pr)
	m.sortCIDRs()
	return nil
}

func (m *model) removeCIDR(force bool, pr netip.Prefix) ([]netip.Addr, error) {
	if !slices.Contains(m.cidrs, pr) {
		return nil, ErrCIDRNotFound
	}
	if len(m.cidrs) == 1 {
		return nil, ErrNoCIDRs
	}
	var out []netip.Addr
	for a := range m.allocated {
		if pr.Contains(a) {
			out = append(out, a)
		}
	}
	if len(out) > 0 && !force {
		return nil, ErrCIDRInUse
	}
	for a := range m.quarantine {
		if pr.Contains(a) {
			delete(m.quarantine, a)
		}
	}
	m.cidrs = slices.DeleteFunc(m.cidrs, func(c netip.Prefix) bool { return c == pr })
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

func (m *model) addReserved(r netparse.Range) {
	for a := range m.quarantine {
		if r.Contains(a) {
			delete(m.quarantine, a)
		}
	}
	m.reserved = append(m.reserved, r)
}

// errClass maps an error to the sentinel it is, so the pool and the model
// can be compared without their messages.
func errClass(err error) error {
	for _, s := range []error{ErrInReuseDelay, ErrExhausted, ErrOutOfRange, ErrReserved, ErrInUse,
		ErrNotAllocated, ErrOverlap, ErrCIDRInUse, ErrCIDRNotFound, ErrNoCIDRs, ErrMixedFamily,
		ErrInvalidAddress, ErrInvalidCIDR, ErrInvalidRange} {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

// modelUniverse is a pool configuration plus the addresses and CIDRs the
// operations pick from.
type modelUniverse struct {
	cfg    Config
	extra  []netip.Prefix // CIDRs to add (some overlap)
	probes []netip.Addr
	// small universes are enumerated to check capacity exactly.
	small bool
}

func addrAt(base netip.Addr, off int64) netip.Addr {
	x := addrBits(base)
	if off >= 0 {
		x = x.add64(uint64(off))
	} else {
		x = x.sub(u128{0, uint64(-off)})
	}
	return bitsAddr(x, base.Is4())
}

func universe(v6 bool, delay time.Duration) modelUniverse {
	mp := netip.MustParsePrefix
	var u modelUniverse
	if !v6 {
		u = modelUniverse{
			cfg: Config{
				CIDRs: []netip.Prefix{mp("10.0.0.0/28"), mp("10.0.0.16/31"), mp("10.0.0.20/32"), mp("10.0.1.0/30")},
				Reserved: []netparse.Range{{First: netip.MustParseAddr("10.0.0.3"),
					Last: netip.MustParseAddr("10.0.0.5")}},
			},
			extra: []netip.Prefix{mp("10.0.0.32/27"), mp("10.0.0.24/29"), mp("10.0.0.0/24"),
				mp("10.0.2.0/31"), mp("10.0.0.18/31"), mp("10.0.1.4/30")},
			small: true,
		}
		for i := 0; i < 2*256+16; i++ {
			u.probes = append(u.probes, addrAt(netip.MustParseAddr("10.0.0.0"), int64(i)))
		}
	} else {
		u = modelUniverse{
			cfg: Config{
				CIDRs: []netip.Prefix{mp("2001:db8::/64"), mp("2001:db8:1::/126"),
					mp("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff0/124")},
				Reserved: []netparse.Range{{First: netip.MustParseAddr("2001:db8::1:0"),
					Last: netip.MustParseAddr("2001:db8::1:ffff")}},
			},
			extra: []netip.Prefix{mp("2001:db8:1::4/126"), mp("2001:db8:2::/48"), mp("2001:db8::/48"),
				mp("::/127"), mp("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffe0/124")},
		}
		for _, c := range append(slices.Clone(u.cfg.CIDRs), u.extra...) {
			r := netparse.PrefixRange(c)
			for _, off := range []int64{-1, 0, 1, 2, 3, 4, 63, 64, 65, 4095, 4096, 1 << 20, 1 << 40} {
				if a := addrAt(r.First, off); c.Bits() < 120 || c.Contains(a) {
					u.probes = append(u.probes, a)
				}
			}
			for _, off := range []int64{-2, -1, 0, 1} {
				u.probes = append(u.probes, addrAt(r.Last, off))
			}
		}
	}
	u.cfg.ReuseDelay = delay
	return u
}

// runModel drives a pool and the model with the same operations, read from
// data, and compares every answer.
func runModel(t *testing.T, v6 bool, delay time.Duration, data []byte) {
	u := universe(v6, delay)
	p, err := New(u.cfg)
	require.NoError(t, err)
	m := newModel(u.cfg)
	now := time.Unix(1_700_000_000, 0)
	pick := func(b byte) netip.Addr {
		if b&1 == 1 && len(m.allocated) > 0 {
			keys := make([]netip.Addr, 0, len(m.allocated))
			for a := range m.allocated {
				keys = append(keys, a)
			}
			slices.SortFunc(keys, netip.Addr.Compare)
			return keys[int(b>>1)%len(keys)]
		}
		return u.probes[int(b>>1)%len(u.probes)]
	}
	for step := 0; len(data) >= 3 && step < 3000; step++ {
		op, x, y := data[0], data[1], data[2]
		data = data[3:]
		a := pick(x)
		t.Logf("step %d: op %d a %s y %d now %v", step, op%10, a, y, now.Unix())
		switch op % 10 {
		case 0, 1, 2:
			got, gerr := p.AllocateNext(now)
			want, werr := m.allocateNext(now)
			t.Logf("AllocateNext: %v %v (model %v %v)", got, gerr, want, werr)
			require.Equal(t, errClass(werr), errClass(gerr), "AllocateNext")
			require.Equal(t, want.String(), got.String(), "AllocateNext")
		case 3:
			require.Equal(t, errClass(m.allocateAddr(a, now)), errClass(p.AllocateAddr(a, now)), "AllocateAddr %s", a)
		case 4, 5:
			require.Equal(t, errClass(m.release(a, now)), errClass(p.Release(a, now)), "Release %s", a)
		case 6:
			require.Equal(t, errClass(m.restore(a)), errClass(p.Restore(a)), "Restore %s", a)
		case 7:
			now = now.Add(time.Duration(y%4) * delay / 2)
		case 8:
			b := pick(y)
			if b.Less(a) {
				a, b = b, a
			}
			r := netparse.Range{First: a, Last: b}
			if y&0x80 != 0 {
				r.Last = a
			}
			require.NoError(t, p.AddReserved(r))
			m.addReserved(r)
		case 9:
			if y&1 == 0 {
				pr := u.extra[int(y>>1)%len(u.extra)]
				require.Equal(t, errClass(m.addCIDR(pr)), errClass(p.AddCIDRs(pr)), "AddCIDRs %s", pr)
			} else {
				all := append(slices.Clone(u.cfg.CIDRs), u.extra...)
				pr := all[int(y>>2)%len(all)]
				force := y&2 != 0
				want, werr := m.removeCIDR(force, pr)
				got, gerr := p.RemoveCIDRs(force, pr)
				require.Equal(t, errClass(werr), errClass(gerr), "RemoveCIDRs %s", pr)
				require.Equal(t, want, got, "RemoveCIDRs %s", pr)
			}
		}
		for _, probe := range []netip.Addr{a, a.Next(), a.Prev()} {
			if probe.IsValid() {
				require.Equal(t, m.allocated[probe], p.IsAllocated(probe), "IsAllocated %s", probe)
				_, in := m.cidrOf(probe)
				require.Equal(t, in, p.Contains(probe), "Contains %s", probe)
			}
		}
		checkStats(t, p, m, u.small)
	}
}

func checkStats(t *testing.T, p *Pool, m *model, small bool) {
	t.Helper()
	st := p.Stats()
	var usableAllocated, out int64
	for a := range m.allocated {
		if m.usable(a) {
			usableAllocated++
		}
		if _, in := m.cidrOf(a); !in {
			out++
		}
	}
	require.Equal(t, int64(len(m.allocated)), st.Allocated.Int64(), "allocated")
	require.Equal(t, uint64(len(m.quarantine)), st.Quarantined, "quarantined")
	require.Equal(t, uint64(out), st.OutOfRange, "out of range")
	used := new(big.Int).Sub(st.Capacity, st.Free)
	require.Equal(t, usableAllocated+int64(len(m.quarantine)), used.Int64(), "capacity - free")
	require.Equal(t, m.cidrs, p.CIDRs())
	if small {
		var capacity int64
		for _, c := range m.cidrs {
			for a := c.Addr(); a.IsValid() && c.Contains(a); a = a.Next() {
				if m.usable(a) {
					capacity++
				}
			}
		}
		require.Equal(t, capacity, st.Capacity.Int64(), "capacity")
	}
	want := []netip.Addr{}
	for a := range m.allocated {
		if _, in := m.cidrOf(a); !in {
			want = append(want, a)
		}
	}
	slices.SortFunc(want, netip.Addr.Compare)
	require.Equal(t, want, append([]netip.Addr{}, p.OutOfRange()...))
}

func FuzzPool(f *testing.F) {
	f.Add(false, uint8(0), []byte{0, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 7, 0, 3})
	f.Add(true, uint8(1), []byte{0, 0, 0, 8, 2, 9, 9, 1, 3, 4, 1, 0, 0, 0, 0, 7, 0, 2})
	f.Add(false, uint8(1), []byte{9, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 9, 0, 5, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, v6 bool, delay uint8, data []byte) {
		runModel(t, v6, time.Duration(delay%3)*5*time.Second, data)
	})
}

// TestPoolAgainstModel runs the fuzz body on generated inputs, so the model
// comparison runs in every `go test`.
func TestPoolAgainstModel(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, delay := range []time.Duration{0, 10 * time.Second} {
			t.Run(fmt.Sprintf("v6=%v/delay=%v", v6, delay), func(t *testing.T) {
				seed := uint64(0x2545f4914f6cdd1d)
				if v6 {
					seed++
				}
				for round := 0; round < 30; round++ {
					data := make([]byte, 3*400)
					for i := range data {
						seed ^= seed << 13
						seed ^= seed >> 7
						seed ^= seed << 17
						data[i] = byte(seed)
					}
					runModel(t, v6, delay, data)
				}
			})
		}
	}
}
