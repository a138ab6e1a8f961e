package record

import (
	"fmt"
	"net/netip"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// The records an event carries, as the first field of its encoding.
const (
	hasPool = 1 << iota
	hasAllocation
	hasQuarantine
	// hasCreator: the allocation's creator cluster follows its fields.
	hasCreator
)

// famNone is the family byte of the zero netip.Addr in an event.
const famNone = 0

// AppendEvent appends the records an event carries (pool, allocation,
// quarantine record), for a history kept as bytes; its type, revision and
// Last are the history's to keep, and Err is not encoded.
func AppendEvent(e Encoder, ev *store.Event) Encoder {
	var has uint64
	if ev.Pool != nil {
		has |= hasPool
	}
	if ev.Allocation != nil {
		has |= hasAllocation
		if ev.Allocation.CreatorCluster != "" {
			has |= hasCreator
		}
	}
	if ev.Quarantine != nil {
		has |= hasQuarantine
	}
	e = e.Uint(has)
	if p := ev.Pool; p != nil {
		e = appendPool(e.Str(p.ID), p, p.Revision)
	}
	if a := ev.Allocation; a != nil {
		e = appendAllocationBase(e.Str(a.Pool).anyAddr(a.Address), Version, a, a.Revision)
		if has&hasCreator != 0 {
			e = e.Str(a.CreatorCluster)
		}
	}
	if q := ev.Quarantine; q != nil {
		e = e.Str(q.Pool).anyAddr(q.Address).Time(q.Until)
	}
	return e
}

// DecodeEvent sets the records of ev from v, as AppendEvent wrote them,
// with one allocation for all their strings and one per record.
func DecodeEvent(v []byte, ev *store.Event) error {
	d := Decoder{s: string(v)}
	has := d.Uint()
	if has&hasPool != 0 {
		p := &store.Pool{ID: d.Str()}
		d.version()
		d.pool(p)
		ev.Pool = p
	}
	if has&hasAllocation != 0 {
		a := &store.Allocation{Pool: d.Str(), Address: d.anyAddr()}
		d.version()
		d.allocationBase(a)
		if has&hasCreator != 0 {
			a.CreatorCluster = d.Str()
		}
		ev.Allocation = a
	}
	if has&hasQuarantine != 0 {
		q := &store.Quarantine{Pool: d.Str(), Address: d.anyAddr()}
		q.Until = d.Time()
		ev.Quarantine = q
	}
	if has&^(hasPool|hasAllocation|hasQuarantine|hasCreator) != 0 || has&(hasAllocation|hasCreator) == hasCreator {
		d.Fail(fmt.Errorf("unknown records %#x", has))
	}
	if err := d.Finish(); err != nil {
		return fmt.Errorf("decode event of revision %d: %w", ev.Revision, err)
	}
	return nil
}

// anyAddr appends an address, or famNone for the zero Addr.
func (e Encoder) anyAddr(a netip.Addr) Encoder {
	if !a.IsValid() {
		return append(e, famNone)
	}
	return e.Addr(a)
}

// anyAddr reads an address anyAddr wrote.
func (d *Decoder) anyAddr() netip.Addr {
	if len(d.s) > 0 && d.s[0] == famNone {
		d.s = d.s[1:]
		return netip.Addr{}
	}
	return d.Addr()
}
