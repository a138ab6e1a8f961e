package bolt

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"net/netip"

	"github.com/plexusnet/plexus/services/allocator/store/internal/record"
)

// ownerIndex finds the allocations whose owner has a given key, for
// CondOwnerAbsent. It is kept in memory, built from the allocations when
// the file is opened: kept in the file, as a bucket keyed by a hash of
// the owner, every allocation added a key to a random leaf of that tree,
// and with a million allocations a commit of 64 allocations rewrote ~64
// pages for it, which made the store's writes two and a half times as
// costly as on an empty file.
//
// The index maps a hash of (pool, owner key) to the addresses holding
// such an owner; a lookup reads each allocation to compare the key, so a
// collision costs a read, never a wrong answer. The hash takes 32 bits
// (a million owners share about a hundred of them) and an IPv4 address
// four bytes: about 19 bytes per allocation with the map's overhead,
// against 38 with a 64-bit hash. Neither map holds a pointer for the
// garbage collector.
//
// Only the committer uses it. Changes made while a batch is written are
// logged, and undone if the batch does not commit.
type ownerIndex struct {
	seed maphash.Seed
	v4   map[uint32]uint32
	v6   map[uint32][16]byte
	// more holds the second and later addresses of a hash (another owner
	// with the same hash, or the same owner holding two addresses, which
	// only a transaction without CondOwnerAbsent can make).
	more map[uint32][]netip.Addr

	logging bool
	undo    []ownerChange
}

type ownerChange struct {
	added bool
	h     uint32
	addr  netip.Addr
}

func newOwnerIndex(sizeHint int) *ownerIndex {
	return &ownerIndex{
		seed: maphash.MakeSeed(),
		v4:   make(map[uint32]uint32, sizeHint),
		v6:   map[uint32][16]byte{},
		more: map[uint32][]netip.Addr{},
	}
}

// hash is the index's hash of an owner of pool.
func (x *ownerIndex) hash(pool, ownerKey string) uint32 {
	var h maphash.Hash
	h.SetSeed(x.seed)
	h.WriteString(pool)
	h.WriteByte(0)
	h.WriteString(ownerKey)
	return fold(h.Sum64())
}

// hashValue is hash(pool, owner key) of the allocation whose value (as
// appendAllocation writes it) is v, read from v's owner fields without
// copying them: the index of a million allocations is built at every
// start.
func (x *ownerIndex) hashValue(pool, v []byte) (uint32, error) {
	var h maphash.Hash
	h.SetSeed(x.seed)
	h.Write(pool)
	h.WriteByte(0)
	version, n := binary.Uvarint(v)
	if n <= 0 || (version != record.Version && version != record.VersionFlagged) {
		return 0, fmt.Errorf("unknown or damaged value version")
	}
	v = v[n:]
	for i := range 4 { // cluster, kind, namespace, name: as decide.Owner.Key joins them
		size, n := binary.Uvarint(v)
		if n <= 0 || size > uint64(len(v)-n) {
			return 0, record.ErrTruncated
		}
		if i > 0 {
			h.WriteByte('/')
		}
		h.Write(v[n : n+int(size)])
		v = v[n+int(size):]
	}
	return fold(h.Sum64()), nil
}

func fold(h uint64) uint32 { return uint32(h>>32) ^ uint32(h) }

// each calls fn with every address filed under h, until fn returns false.
func (x *ownerIndex) each(h uint32, fn func(netip.Addr) bool) {
	if a, ok := x.first(h); ok {
		if !fn(a) {
			return
		}
		for _, a := range x.more[h] {
			if !fn(a) {
				return
			}
		}
	}
}

func (x *ownerIndex) first(h uint32) (netip.Addr, bool) {
	if v, ok := x.v4[h]; ok {
		return addrOf4(v), true
	}
	if v, ok := x.v6[h]; ok {
		return netip.AddrFrom16(v), true
	}
	return netip.Addr{}, false
}

func (x *ownerIndex) setFirst(h uint32, a netip.Addr) {
	if a.Is4() {
		x.v4[h] = v4Of(a)
		return
	}
	x.v6[h] = a.As16()
}

// add files addr under h.
func (x *ownerIndex) add(h uint32, addr netip.Addr) {
	if _, ok := x.first(h); ok {
		x.more[h] = append(x.more[h], addr)
	} else {
		x.setFirst(h, addr)
	}
	if x.logging {
		x.undo = append(x.undo, ownerChange{added: true, h: h, addr: addr})
	}
}

// remove takes addr from under h, if it is there.
func (x *ownerIndex) remove(h uint32, addr netip.Addr) {
	first, ok := x.first(h)
	if !ok {
		return
	}
	more := x.more[h]
	switch {
	case first == addr:
		delete(x.v4, h)
		delete(x.v6, h)
		if len(more) > 0 {
			x.setFirst(h, more[0])
			more = more[1:]
		}
	default:
		i := -1
		for j, a := range more {
			if a == addr {
				i = j
				break
			}
		}
		if i < 0 {
			return
		}
		more = append(more[:i:i], more[i+1:]...)
	}
	if len(more) == 0 {
		delete(x.more, h)
	} else {
		x.more[h] = more
	}
	if x.logging {
		x.undo = append(x.undo, ownerChange{h: h, addr: addr})
	}
}

// begin starts logging the changes of a batch.
func (x *ownerIndex) begin() {
	x.logging, x.undo = true, x.undo[:0]
}

// commit keeps the batch's changes; rollback undoes them, newest first.
func (x *ownerIndex) commit() { x.logging = false }

func (x *ownerIndex) rollback() {
	x.logging = false
	for i := len(x.undo) - 1; i >= 0; i-- {
		c := x.undo[i]
		if c.added {
			x.remove(c.h, c.addr)
		} else {
			x.add(c.h, c.addr)
		}
	}
	x.undo = x.undo[:0]
}
