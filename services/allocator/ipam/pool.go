package ipam

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/plexusnet/plexus/internal/netparse"
)

// Config describes a pool when it is created.
type Config struct {
	// CIDRs are the blocks addresses are handed out from: at least one,
	// all of one family, canonical (no host bits set), not overlapping.
	CIDRs []netip.Prefix
	// Reserved ranges are never handed out. They may lie partly or wholly
	// outside the CIDRs; only the part inside counts, and a range outside
	// takes effect if a CIDR covering it is added later.
	Reserved []netparse.Range
	// ReuseDelay is how long a released address waits before it can be
	// handed out again; zero means at once.
	ReuseDelay time.Duration
}

// Stats are a pool's live counts. Capacity and Free are big integers because
// an IPv6 pool's size does not fit 64 bits.
type Stats struct {
	// Capacity is the number of addresses that can be handed out: the sum
	// of the CIDRs' sizes, less reserved addresses and the network and
	// broadcast addresses of IPv4 CIDRs.
	Capacity *big.Int
	// Allocated is the number of allocated addresses, including those
	// out of range (see OutOfRange) or under a reserved range added after
	// they were allocated.
	Allocated *big.Int
	// Free is Capacity less the allocations and quarantined addresses that
	// count against it: what AllocateNext can still hand out.
	Free *big.Int
	// Quarantined is the number of released addresses still waiting out
	// the reuse delay.
	Quarantined uint64
	// OutOfRange is the number of allocations in none of the CIDRs (left by
	// a forced RemoveCIDRs or restored from the store).
	OutOfRange uint64
}

// cidr is one CIDR of a pool with its free-space index.
type cidr struct {
	prefix      netip.Prefix
	first, last u128
	t           *tree
	// skipFirst, skipLast: the CIDR's first and last addresses are never
	// handed out. IPv4 CIDRs of /30 and shorter skip both, the network
	// and broadcast addresses (a /31 or /32 has none, RFC 3021); IPv6
	// CIDRs of /126 and shorter skip the first, the Subnet-Router anycast
	// address (RFC 4291 2.6.1; a /127 has none, RFC 6164).
	skipFirst, skipLast bool
}

func (c *cidr) isEdge(off u128) bool {
	return (c.skipFirst && off == u128{}) || (c.skipLast && c.first.add(off) == c.last)
}

// edgeName says which edge address off is.
func (c *cidr) edgeName(off u128) string {
	switch {
	case off != u128{}:
		return "the broadcast address"
	case c.prefix.Addr().Is6():
		return "the Subnet-Router anycast address"
	default:
		return "the network address"
	}
}

// Pool is the free-space index of one address pool. See the package
// documentation for what it guarantees.
//
// A Pool is not safe for concurrent use: the allocator serialises the
// operations on each pool, and the Pool does no locking of its own.
type Pool struct {
	is4        bool
	cidrs      []*cidr // sorted by address
	reserved   []span  // sorted, disjoint, adjacent spans merged
	reuseDelay time.Duration
	quarantine quarantine
	// held are allocations on addresses that can never be handed out:
	// outside every CIDR, reserved, or a network or broadcast address.
	// They are restored from the store or left behind by a configuration
	// change, so there are few of them; they have no bit in any tree of
	// their own.
	held map[netip.Addr]struct{}
	// allocated counts the allocations that are bits in a tree (all but
	// held).
	allocated uint64
	capacity  *big.Int
	// cursor is where the next AllocateNext starts looking: one past the
	// address it last handed out.
	cursor u128
}

// New creates a pool with no allocations.
func New(cfg Config) (*Pool, error) {
	if len(cfg.CIDRs) == 0 {
		return nil, ErrNoCIDRs
	}
	if cfg.ReuseDelay < 0 {
		return nil, fmt.Errorf("%v: %w", cfg.ReuseDelay, ErrInvalidReuseDelay)
	}
	p := &Pool{
		is4:        cfg.CIDRs[0].Addr().Is4(),
		reuseDelay: cfg.ReuseDelay,
		held:       make(map[netip.Addr]struct{}),
		capacity:   new(big.Int),
	}
	if err := p.AddCIDRs(cfg.CIDRs...); err != nil {
		return nil, err
	}
	if err := p.AddReserved(cfg.Reserved...); err != nil {
		return nil, err
	}
	if len(p.cidrs) > 0 {
		p.cursor = p.cidrs[0].first
	}
	return p, nil
}

// Family returns 4 or 6.
func (p *Pool) Family() int {
	if p.is4 {
		return 4
	}
	return 6
}

// ReuseDelay returns the pool's reuse delay.
func (p *Pool) ReuseDelay() time.Duration { return p.reuseDelay }

// CIDRs returns the pool's CIDRs in address order.
func (p *Pool) CIDRs() []netip.Prefix {
	out := make([]netip.Prefix, len(p.cidrs))
	for i, c := range p.cidrs {
		out[i] = c.prefix
	}
	return out
}

// Reserved returns the reserved ranges in address order, with overlapping
// and adjacent ranges merged.
func (p *Pool) Reserved() []netparse.Range {
	out := make([]netparse.Range, len(p.reserved))
	for i, sp := range p.reserved {
		out[i] = netparse.Range{First: bitsAddr(sp.first, p.is4), Last: bitsAddr(sp.last, p.is4)}
	}
	return out
}

// AllocateNext hands out a free address.
//
// It is next-fit: the search starts one past the address it last handed out
// and wraps around past the highest CIDR, so a released address is not
// handed out again until every other free address has been, which spreads
// reuse across the pool (in an IPv6 pool, in practice never) on top of the
// reuse delay. The search is a descent of the CIDR's tree, so its cost does
// not grow with how full the pool is. The cursor is not persisted: a pool
// rebuilt at start-up starts from its lowest address.
//
// now is the caller's clock; addresses whose reuse delay has passed by now
// become free first.
func (p *Pool) AllocateNext(now time.Time) (netip.Addr, error) {
	p.expire(now)
	n := len(p.cidrs)
	start := sort.Search(n, func(i int) bool { return !p.cidrs[i].last.less(p.cursor) })
	// k == n comes back to the first CIDR searched, for the part below the
	// cursor.
	for k := 0; k <= n; k++ {
		c := p.cidrs[(start+k)%n]
		if c.t.isFull() {
			continue
		}
		var from u128
		if k == 0 && start < n && c.first.less(p.cursor) {
			from = p.cursor.sub(c.first)
		}
		off, ok := c.t.takeNext(from)
		if !ok {
			continue
		}
		p.allocated++
		x := c.first.add(off)
		p.cursor = x.add64(1)
		return bitsAddr(x, p.is4), nil
	}
	return netip.Addr{}, ErrExhausted
}

// SetCursor makes the next AllocateNext start looking at a (or, past the
// pool's last address, wrap to its first). Replicas that share a store each
// put their cursor somewhere else in the pool, so that their next-free
// searches do not all propose the same address. It fails like any address
// the pool does not take (invalid, zoned, of the other family).
func (p *Pool) SetCursor(a netip.Addr) error {
	if err := p.checkAddr(a); err != nil {
		return fmt.Errorf("cursor: %w", err)
	}
	p.cursor = addrBits(a)
	return nil
}

// AllocateAddr allocates the given address. It fails with ErrOutOfRange,
// ErrReserved (also for the network and broadcast addresses of an IPv4 CIDR),
// ErrInReuseDelay (which is also an ErrInUse) or ErrInUse.
func (p *Pool) AllocateAddr(a netip.Addr, now time.Time) error {
	if err := p.checkAddr(a); err != nil {
		return err
	}
	p.expire(now)
	c, off := p.find(a)
	switch {
	case c == nil:
		return fmt.Errorf("%s: %w", a, ErrOutOfRange)
	case c.isEdge(off):
		return fmt.Errorf("%s is %s of %s: %w", a, c.edgeName(off), c.prefix, ErrReserved)
	case p.isReserved(addrBits(a)):
		return fmt.Errorf("%s: %w", a, ErrReserved)
	case p.quarantine.has(a):
		return fmt.Errorf("%s: %w", a, ErrInReuseDelay)
	case !c.t.set(off):
		return fmt.Errorf("%s: %w", a, ErrInUse)
	}
	p.allocated++
	return nil
}

// Release frees an allocated address. With a reuse delay, the address is
// quarantined until now plus the delay. An out-of-range allocation (see
// Restore) is simply forgotten. It fails with ErrOutOfRange for an address in
// no CIDR that is not allocated, and ErrNotAllocated otherwise.
func (p *Pool) Release(a netip.Addr, now time.Time) error {
	if err := p.checkAddr(a); err != nil {
		return err
	}
	p.expire(now)
	if p.isHeld(a) {
		delete(p.held, a)
		return nil
	}
	c, off := p.find(a)
	switch {
	case c == nil:
		return fmt.Errorf("%s: %w", a, ErrOutOfRange)
	case c.isEdge(off), p.isReserved(addrBits(a)):
		return fmt.Errorf("%s is reserved: %w", a, ErrNotAllocated)
	case p.quarantine.has(a):
		return fmt.Errorf("%s was already released: %w", a, ErrNotAllocated)
	}
	if p.reuseDelay > 0 {
		// The bit stays set until the delay has passed.
		if !c.t.test(off) {
			return fmt.Errorf("%s: %w", a, ErrNotAllocated)
		}
		p.quarantine.add(a, now.Add(p.reuseDelay))
	} else if !c.t.clear(off) {
		return fmt.Errorf("%s: %w", a, ErrNotAllocated)
	}
	p.allocated--
	return nil
}

// Restore marks an address allocated while the pool is rebuilt from the
// store at start-up. Unlike AllocateAddr it accepts any address of the
// pool's family, including one outside every CIDR or in a reserved range:
// the store is the truth, and such allocations (left by a forced
// RemoveCIDRs, or by reserving a range over them) are kept and counted so
// that IsAllocated, Stats and OutOfRange stay right. A quarantined address
// is taken out of quarantine. It fails with ErrInUse if the address is
// already allocated.
func (p *Pool) Restore(a netip.Addr) error {
	if err := p.checkAddr(a); err != nil {
		return err
	}
	if p.isHeld(a) {
		return fmt.Errorf("%s: %w", a, ErrInUse)
	}
	c, off := p.find(a)
	switch {
	case c == nil || c.isEdge(off) || p.isReserved(addrBits(a)):
		p.held[a] = struct{}{}
		return nil
	case p.quarantine.remove(a):
		// Its bit is still set.
	case !c.t.set(off):
		return fmt.Errorf("%s: %w", a, ErrInUse)
	}
	p.allocated++
	return nil
}

// IsAllocated reports whether a is allocated (quarantined addresses are not).
func (p *Pool) IsAllocated(a netip.Addr) bool {
	if p.checkAddr(a) != nil {
		return false
	}
	if p.isHeld(a) {
		return true
	}
	c, off := p.find(a)
	if c == nil || c.isEdge(off) || p.isReserved(addrBits(a)) || p.quarantine.has(a) {
		return false
	}
	return c.t.test(off)
}

// Contains reports whether a is in one of the pool's CIDRs.
func (p *Pool) Contains(a netip.Addr) bool {
	if p.checkAddr(a) != nil {
		return false
	}
	c, _ := p.find(a)
	return c != nil
}

// Overlaps reports whether other shares an address with one of the pool's
// CIDRs; the server uses it to refuse pools that overlap.
func (p *Pool) Overlaps(other netip.Prefix) bool {
	for _, c := range p.cidrs {
		if c.prefix.Overlaps(other) {
			return true
		}
	}
	return false
}

// OutOfRange returns, in address order, the allocations that are in none of
// the CIDRs.
func (p *Pool) OutOfRange() []netip.Addr {
	var out []netip.Addr
	for a := range p.held {
		if c, _ := p.find(a); c == nil {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// Stats returns the pool's counts.
func (p *Pool) Stats() Stats {
	var out uint64
	for a := range p.held {
		if c, _ := p.find(a); c == nil {
			out++
		}
	}
	q := uint64(p.quarantine.len())
	free := new(big.Int).Set(p.capacity)
	free.Sub(free, new(big.Int).SetUint64(p.allocated+q))
	return Stats{
		Capacity:    new(big.Int).Set(p.capacity),
		Allocated:   new(big.Int).SetUint64(p.allocated + uint64(len(p.held))),
		Free:        free,
		Quarantined: q,
		OutOfRange:  out,
	}
}

// AddCIDRs grows the pool. Either every CIDR is added or none is: each must
// be valid, canonical, of the pool's family, and overlap neither the pool's
// CIDRs nor the others given. Allocations restored out of range that fall in
// a new CIDR become ordinary allocations again.
func (p *Pool) AddCIDRs(prefixes ...netip.Prefix) error {
	for i, pr := range prefixes {
		switch {
		case !pr.IsValid() || pr.Masked() != pr:
			return fmt.Errorf("%s: %w", pr, ErrInvalidCIDR)
		case pr.Addr().Is4() != p.is4:
			return fmt.Errorf("%s: %w", pr, ErrMixedFamily)
		}
		if p.Overlaps(pr) {
			return fmt.Errorf("%s: %w with the pool's CIDRs", pr, ErrOverlap)
		}
		for _, other := range prefixes[:i] {
			if other.Overlaps(pr) {
				return fmt.Errorf("%s and %s: %w", other, pr, ErrOverlap)
			}
		}
	}
	for _, pr := range prefixes {
		p.insertCIDR(pr)
	}
	p.recount()
	return nil
}

func (p *Pool) insertCIDR(pr netip.Prefix) {
	r := netparse.PrefixRange(pr)
	c := &cidr{
		prefix: pr,
		first:  addrBits(r.First),
		last:   addrBits(r.Last),
		t:      newTree(pr.Addr().BitLen() - pr.Bits()),
	}
	if p.is4 {
		c.skipFirst, c.skipLast = pr.Bits() <= 30, pr.Bits() <= 30
	} else {
		c.skipFirst = pr.Bits() <= 126
	}
	if c.skipFirst {
		c.t.set(u128{})
	}
	if c.skipLast {
		c.t.set(c.last.sub(c.first))
	}
	for _, sp := range p.reservedIn(c.first, c.last) {
		sp = clip(sp, c.first, c.last)
		c.t.assign(sp.first.sub(c.first), sp.last.sub(c.first), true)
	}
	i, _ := slices.BinarySearchFunc(p.cidrs, c.first, func(e *cidr, x u128) int { return e.first.cmp(x) })
	p.cidrs = slices.Insert(p.cidrs, i, c)
	for a := range p.held {
		x := addrBits(a)
		if x.less(c.first) || c.last.less(x) {
			continue
		}
		off := x.sub(c.first)
		if c.isEdge(off) || p.isReserved(x) {
			continue
		}
		c.t.set(off)
		p.allocated++
		delete(p.held, a)
	}
}

// RemoveCIDRs shrinks the pool. Each CIDR must be one of the pool's, and at
// least one must remain. If a CIDR still holds allocations, it fails with
// ErrCIDRInUse unless force is set; with force the allocations are kept as
// out of range and returned in address order, for repair to deal with.
// Quarantined addresses in removed CIDRs are forgotten.
func (p *Pool) RemoveCIDRs(force bool, prefixes ...netip.Prefix) ([]netip.Addr, error) {
	var victims []*cidr
	for _, pr := range prefixes {
		i := slices.IndexFunc(p.cidrs, func(c *cidr) bool { return c.prefix == pr })
		if i < 0 {
			return nil, fmt.Errorf("%s: %w", pr, ErrCIDRNotFound)
		}
		if !slices.Contains(victims, p.cidrs[i]) {
			victims = append(victims, p.cidrs[i])
		}
	}
	if len(victims) == len(p.cidrs) {
		return nil, fmt.Errorf("removing every CIDR: %w", ErrNoCIDRs)
	}
	type removal struct {
		allocs, quarantined []netip.Addr
	}
	plan := make([]removal, len(victims))
	var outOfRange []netip.Addr
	for i, c := range victims {
		p.eachUsed(c, u128{}, c.last.sub(c.first), func(a netip.Addr) {
			if p.quarantine.has(a) {
				plan[i].quarantined = append(plan[i].quarantined, a)
			} else {
				plan[i].allocs = append(plan[i].allocs, a)
			}
		})
		n := len(plan[i].allocs)
		for a := range p.held {
			if c.prefix.Contains(a) {
				outOfRange = append(outOfRange, a)
				n++
			}
		}
		if n > 0 && !force {
			return nil, fmt.Errorf("%s holds %d allocations: %w", c.prefix, n, ErrCIDRInUse)
		}
		outOfRange = append(outOfRange, plan[i].allocs...)
	}
	for i, c := range victims {
		for _, a := range plan[i].allocs {
			p.allocated--
			p.held[a] = struct{}{}
		}
		for _, a := range plan[i].quarantined {
			p.quarantine.remove(a)
		}
		p.cidrs = slices.DeleteFunc(p.cidrs, func(e *cidr) bool { return e == c })
	}
	p.recount()
	slices.SortFunc(outOfRange, netip.Addr.Compare)
	return outOfRange, nil
}

// AddReserved reserves more ranges. Either all are added or none is: each
// must be valid and of the pool's family. Allocations inside a new range stay
// allocated (they are counted but no longer against Capacity) and are never
// handed out again once released; quarantined addresses inside it are
// forgotten.
func (p *Pool) AddReserved(ranges ...netparse.Range) error {
	for _, r := range ranges {
		switch {
		case !r.IsValid():
			return fmt.Errorf("%s: %w", r, ErrInvalidRange)
		case r.First.Is4() != p.is4:
			return fmt.Errorf("%s: %w", r, ErrMixedFamily)
		}
	}
	for _, r := range ranges {
		sp := span{addrBits(r.First), addrBits(r.Last)}
		for _, c := range p.cidrs {
			if sp.last.less(c.first) || c.last.less(sp.first) {
				continue
			}
			lo, hi := u128{}, c.last.sub(c.first)
			if c.first.less(sp.first) {
				lo = sp.first.sub(c.first)
			}
			if sp.last.less(c.last) {
				hi = sp.last.sub(c.first)
			}
			// Collect first: eachUsed must not see the tree change.
			var allocs, quarantined []netip.Addr
			p.eachUsed(c, lo, hi, func(a netip.Addr) {
				if p.quarantine.has(a) {
					quarantined = append(quarantined, a)
				} else {
					allocs = append(allocs, a)
				}
			})
			for _, a := range allocs {
				p.allocated--
				p.held[a] = struct{}{}
			}
			for _, a := range quarantined {
				p.quarantine.remove(a)
			}
			c.t.assign(lo, hi, true)
		}
		p.reserved = mergeSpan(p.reserved, sp)
	}
	p.recount()
	return nil
}

// eachUsed calls fn for every used address of c between offsets lo and hi
// that can be handed out, that is allocated or quarantined ones. It walks
// only the gaps between reserved spans, so a large reserved range costs
// nothing, and visits allocations through nextSet, so free space costs
// nothing either.
func (p *Pool) eachUsed(c *cidr, lo, hi u128, fn func(netip.Addr)) {
	if c.skipFirst && lo == (u128{}) {
		lo = u128{0, 1}
	}
	if end := c.last.sub(c.first); c.skipLast && hi == end {
		hi = end.sub(u128{0, 1})
	}
	if hi.less(lo) {
		return
	}
	scan := func(a, b u128) { // offsets, a <= b
		for {
			off, ok := c.t.nextSet(a)
			if !ok || b.less(off) {
				return
			}
			fn(bitsAddr(c.first.add(off), p.is4))
			if off == b {
				return
			}
			a = off.add64(1)
		}
	}
	from, to := c.first.add(lo), c.first.add(hi)
	cur := from
	for _, sp := range p.reservedIn(from, to) {
		if cur.less(sp.first) {
			scan(cur.sub(c.first), sp.first.sub(u128{0, 1}).sub(c.first))
		}
		if !sp.last.less(to) {
			return
		}
		cur = sp.last.add64(1)
	}
	scan(cur.sub(c.first), hi)
}

// reservedIn returns the reserved spans that overlap [first, last].
func (p *Pool) reservedIn(first, last u128) []span {
	i := sort.Search(len(p.reserved), func(i int) bool { return !p.reserved[i].last.less(first) })
	j := i
	for j < len(p.reserved) && !last.less(p.reserved[j].first) {
		j++
	}
	return p.reserved[i:j]
}

func (p *Pool) isReserved(x u128) bool {
	return len(p.reserved) > 0 && len(p.reservedIn(x, x)) > 0
}

// mergeSpan adds sp to a sorted list of disjoint spans, merging what it
// overlaps or touches.
func mergeSpan(list []span, sp span) []span {
	i := sort.Search(len(list), func(i int) bool {
		// The first span that ends at or after the address before sp.
		return sp.first == (u128{}) || !list[i].last.less(sp.first.sub(u128{0, 1}))
	})
	j := i
	for j < len(list) && (sp.last == maxAddr || !sp.last.add64(1).less(list[j].first)) {
		if list[j].first.less(sp.first) {
			sp.first = list[j].first
		}
		if sp.last.less(list[j].last) {
			sp.last = list[j].last
		}
		j++
	}
	return slices.Replace(list, i, j, sp)
}

var maxAddr = u128{allOnes, allOnes}

// recount recomputes the capacity after the CIDRs or reserved ranges change.
func (p *Pool) recount() {
	total := new(big.Int)
	one := big.NewInt(1)
	for _, c := range p.cidrs {
		total.Add(total, c.last.sub(c.first).big())
		total.Add(total, one)
		for _, sp := range p.reservedIn(c.first, c.last) {
			sp = clip(sp, c.first, c.last)
			total.Sub(total, sp.last.sub(sp.first).big())
			total.Sub(total, one)
		}
		for _, x := range []struct {
			skip bool
			at   u128
		}{{c.skipFirst, c.first}, {c.skipLast, c.last}} {
			if x.skip && !p.isReserved(x.at) {
				total.Sub(total, one)
			}
		}
	}
	p.capacity = total
}

// expire frees the quarantined addresses whose delay has passed by now.
func (p *Pool) expire(now time.Time) {
	p.quarantine.expire(now, func(a netip.Addr) {
		// Removing a CIDR drops its quarantined addresses, so c is there.
		if c, off := p.find(a); c != nil {
			c.t.clear(off)
		}
	})
}

// isHeld reports whether a is an allocation on an address that cannot be
// handed out. There are rarely any, so the usual answer skips hashing.
func (p *Pool) isHeld(a netip.Addr) bool {
	if len(p.held) == 0 {
		return false
	}
	_, ok := p.held[a]
	return ok
}

// checkAddr refuses what cannot be an address of this pool at all.
func (p *Pool) checkAddr(a netip.Addr) error {
	switch {
	case !a.IsValid() || a.Zone() != "":
		return fmt.Errorf("%v: %w", a, ErrInvalidAddress)
	case a.Is4() != p.is4:
		return fmt.Errorf("%s: %w", a, ErrMixedFamily)
	}
	return nil
}

// find returns the CIDR holding a and a's offset in it, or nil.
func (p *Pool) find(a netip.Addr) (*cidr, u128) {
	x := addrBits(a)
	if len(p.cidrs) == 1 {
		if c := p.cidrs[0]; !x.less(c.first) && !c.last.less(x) {
			return c, x.sub(c.first)
		}
		return nil, u128{}
	}
	i := sort.Search(len(p.cidrs), func(i int) bool { return !p.cidrs[i].last.less(x) })
	if i == len(p.cidrs) || x.less(p.cidrs[i].first) {
		return nil, u128{}
	}
	c := p.cidrs[i]
	return c, x.sub(c.first)
}
