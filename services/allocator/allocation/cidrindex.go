package allocation

import (
	"net/netip"

	"github.com/google/btree"

	"github.com/plexusnet/plexus/internal/netparse"
)

// cidrEntry is one CIDR of one pool.
type cidrEntry struct {
	pfx  netip.Prefix
	pool string
}

func entryLess(a, b cidrEntry) bool {
	if c := a.pfx.Addr().Compare(b.pfx.Addr()); c != 0 {
		return c < 0
	}
	if a.pfx.Bits() != b.pfx.Bits() {
		return a.pfx.Bits() < b.pfx.Bits()
	}
	return a.pool < b.pool
}

// cidrIndex finds the pools whose CIDRs overlap a prefix without looking
// at every pool: two prefixes overlap exactly when one contains the other,
// so it looks up the prefix's at most 129 covering prefixes by value, and
// walks the CIDRs that start inside it in address order.
type cidrIndex struct {
	byPrefix map[netip.Prefix][]string
	byStart  *btree.BTreeG[cidrEntry]
}

func newCIDRIndex(pools map[string]*poolState) *cidrIndex {
	x := &cidrIndex{byPrefix: map[netip.Prefix][]string{}, byStart: btree.NewG(16, entryLess)}
	for id, ps := range pools {
		x.add(id, ps.rec.CIDRs)
	}
	return x
}

func (x *cidrIndex) add(pool string, cidrs []string) {
	for _, c := range cidrs {
		p, err := netparse.ParsePrefix(c)
		if err != nil {
			continue // stored pools were validated; nothing to index
		}
		x.byPrefix[p] = append(x.byPrefix[p], pool)
		x.byStart.ReplaceOrInsert(cidrEntry{pfx: p, pool: pool})
	}
}

// overlap returns a pool (not skipped) with a CIDR that overlaps p, and
// that CIDR.
func (x *cidrIndex) overlap(p netip.Prefix, skip func(pool string) bool) (string, netip.Prefix, bool) {
	for bits := 0; bits <= p.Bits(); bits++ {
		q := netip.PrefixFrom(p.Addr(), bits).Masked()
		for _, pool := range x.byPrefix[q] {
			if !skip(pool) {
				return pool, q, true
			}
		}
	}
	last := netparse.PrefixRange(p).Last
	var (
		found string
		at    netip.Prefix
	)
	x.byStart.AscendGreaterOrEqual(cidrEntry{pfx: netip.PrefixFrom(p.Addr(), 0)}, func(e cidrEntry) bool {
		if e.pfx.Addr().Compare(last) > 0 {
			return false
		}
		if !skip(e.pool) {
			found, at = e.pool, e.pfx
			return false
		}
		return true
	})
	return found, at, found != ""
}

func (x *cidrIndex) remove(pool string, cidrs []string) {
	for _, c := range cidrs {
		p, err := netparse.ParsePrefix(c)
		if err != nil {
			continue
		}
		ids := x.byPrefix[p]
		for i, id := range ids {
			if id == pool {
				ids = append(ids[:i:i], ids[i+1:]...)
				break
			}
		}
		if len(ids) == 0 {
			delete(x.byPrefix, p)
		} else {
			x.byPrefix[p] = ids
		}
		x.byStart.Delete(cidrEntry{pfx: p, pool: pool})
	}
}

// replace moves a pool from its old CIDRs to its new ones; on a nil
// index (to be rebuilt) it does nothing.
func (x *cidrIndex) replace(pool string, old, cidrs []string) {
	if x == nil {
		return
	}
	x.remove(pool, old)
	x.add(pool, cidrs)
}
