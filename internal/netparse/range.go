package netparse

import (
	"net/netip"
	"slices"
)

// Range is an inclusive span of addresses of one family. The zero Range is
// not valid.
type Range struct {
	// First is the lowest address in the range.
	First netip.Addr
	// Last is the highest address in the range; it may equal First.
	Last netip.Addr
}

// PrefixRange returns the range that a CIDR covers, from its network address
// to its last address. Host bits of p are ignored.
func PrefixRange(p netip.Prefix) Range {
	p = p.Masked()
	first := p.Addr()
	if !first.IsValid() {
		return Range{}
	}
	b := first.As16()
	hostBits := first.BitLen() - p.Bits()
	for i := 15; hostBits > 0; i-- {
		n := min(hostBits, 8)
		b[i] |= byte(1<<n - 1)
		hostBits -= n
	}
	last := netip.AddrFrom16(b)
	if first.Is4() {
		last = last.Unmap()
	}
	return Range{First: first, Last: last}
}

// IsValid reports whether r has two valid ends of one family, in order, and
// without zones.
func (r Range) IsValid() bool {
	return r.First.IsValid() && r.Last.IsValid() &&
		r.First.Is4() == r.Last.Is4() &&
		r.First.Zone() == "" && r.Last.Zone() == "" &&
		!r.Last.Less(r.First)
}

// Contains reports whether a lies in r (ends included). An address of the
// other family is never contained.
func (r Range) Contains(a netip.Addr) bool {
	if !r.IsValid() || !a.IsValid() || a.Is4() != r.First.Is4() || a.Zone() != "" {
		return false
	}
	return !a.Less(r.First) && !r.Last.Less(a)
}

// String formats r in the canonical form ParseRange reads back: a single
// address when First equals Last, "first-last" otherwise. An invalid range
// formats as "invalid Range".
func (r Range) String() string {
	switch {
	case !r.IsValid():
		return "invalid Range"
	case r.First == r.Last:
		return r.First.String()
	default:
		return r.First.String() + "-" + r.Last.String()
	}
}

// Subtract returns the parts of the ranges in from that no range in by
// covers, sorted by address, IPv4 before IPv6. Ranges of different
// families never cut each other. Invalid ranges in either list are
// ignored.
func Subtract(from, by []Range) []Range {
	var out []Range
	for _, r := range from {
		if !r.IsValid() {
			continue
		}
		pieces := []Range{r}
		for _, b := range by {
			if !b.IsValid() || b.First.Is4() != r.First.Is4() {
				continue
			}
			next := pieces[:0:0]
			for _, p := range pieces {
				if b.Last.Less(p.First) || p.Last.Less(b.First) {
					next = append(next, p)
					continue
				}
				if p.First.Less(b.First) {
					next = append(next, Range{First: p.First, Last: b.First.Prev()})
				}
				if b.Last.Less(p.Last) {
					next = append(next, Range{First: b.Last.Next(), Last: p.Last})
				}
			}
			pieces = next
		}
		out = append(out, pieces...)
	}
	slices.SortFunc(out, func(a, b Range) int {
		if a.First.Is4() != b.First.Is4() {
			if a.First.Is4() {
				return -1
			}
			return 1
		}
		return a.First.Compare(b.First)
	})
	return out
}
