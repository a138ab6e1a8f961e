package ipam

import (
	"fmt"
	"net/netip"
	"time"
)

// Unallocate gives back an address taken by AllocateNext or AllocateAddr
// whose allocation never became durable (the store refused or failed the
// commit). Unlike Release it skips the reuse delay: the address was never
// handed to anyone.
func (p *Pool) Unallocate(a netip.Addr) error {
	if err := p.checkAddr(a); err != nil {
		return err
	}
	c, off := p.find(a)
	if c == nil || c.isEdge(off) || p.isReserved(addrBits(a)) || p.quarantine.has(a) {
		return fmt.Errorf("%s: %w", a, ErrNotAllocated)
	}
	if !c.t.clear(off) {
		return fmt.Errorf("%s: %w", a, ErrNotAllocated)
	}
	p.allocated--
	return nil
}

// Quarantine marks a free address as released and waiting out its reuse
// delay until until, while the pool is rebuilt from the store at start-up.
func (p *Pool) Quarantine(a netip.Addr, until time.Time) error {
	if err := p.checkAddr(a); err != nil {
		return err
	}
	c, off := p.find(a)
	switch {
	case c == nil:
		return fmt.Errorf("%s: %w", a, ErrOutOfRange)
	case c.isEdge(off) || p.isReserved(addrBits(a)):
		return fmt.Errorf("%s: %w", a, ErrReserved)
	case p.quarantine.has(a) || !c.t.set(off):
		return fmt.Errorf("%s: %w", a, ErrInUse)
	}
	p.quarantine.add(a, until)
	return nil
}

// CopyQuarantine quarantines in p each address that waits out its reuse
// delay in from, until the same time, for a pool rebuilt with new
// settings; addresses p cannot hold (outside its CIDRs, reserved, taken)
// are skipped.
func (p *Pool) CopyQuarantine(from *Pool) {
	for _, it := range from.quarantine.items {
		if seq, ok := from.quarantine.seq[it.addr]; ok && seq == it.seq {
			_ = p.Quarantine(it.addr, it.until)
		}
	}
}

// Is4 reports whether the pool hands out IPv4 addresses.
func (p *Pool) Is4() bool { return p.is4 }
