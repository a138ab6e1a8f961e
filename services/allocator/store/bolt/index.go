package bolt

import (
	"fmt"
	"hash/maphash"
	"net/netip"
	"slices"

	"github.com/plexusnet/plexus/services/allocator/internal/addrtree"
	"github.com/plexusnet/plexus/services/allocator/store/internal/record"
)

// index finds the record of an allocation by its pool and address, and
// the records of an owner (CondOwnerAbsent). Records are filed by sequence
// number so that a commit appends to one tree whatever pools it touches
// (bench/results/allocator-bolt.md); the index, built as the file opens,
// is what keys by pool and address gave:
//   - each pool's addresses, one addrtree.Tree per family (the tree the
//     allocator's held tables use), valued with their record numbers:
//     24 bytes an allocation, and a range check or a pool's addresses in
//     order cost a descent;
//   - a 32-bit hash of (pool, owner key) to the addresses of such owners
//     (an IPv4 address in 4 bytes: 19 bytes an allocation with the map's
//     room to grow, against 27 for a record number). A lookup reads each
//     record to compare the key, so a collision (a million owners share
//     about a hundred hashes) costs a read, never a wrong answer.
//
// Only the committer uses it. Changes made while a batch is written are
// logged, and undone if the batch does not commit.
type index struct {
	pools   map[string]*poolIndex
	seed    maphash.Seed
	owners  map[uint32]uint32
	owners6 map[uint32][16]byte
	// more holds the second and later addresses of a hash (another owner
	// with the same hash, or an owner holding two addresses, which only a
	// transaction without CondOwnerAbsent can make).
	more map[uint32][]netip.Addr

	logging bool
	undo    []change
}

// poolIndex is one pool's addresses: IPv4, then IPv6.
type poolIndex struct {
	id  string
	fam [2]addrtree.Tree
}

// change is one change to the index: of an address in a pool's tree
// (tree set; prev is the record number it had, if had), or of an owner's
// entry (addr filed under h, or taken from it unless added).
type change struct {
	pool  *poolIndex
	tree  *addrtree.Tree
	key   addrtree.Key
	prev  uint64
	had   bool
	h     uint32
	addr  netip.Addr
	added bool
}

// maxSeq is the largest record number: 2^48 writes, centuries at a
// million a second.
const maxSeq = 1<<48 - 1

func newIndex(sizeHint int) *index {
	return &index{
		pools:   map[string]*poolIndex{},
		seed:    maphash.MakeSeed(),
		owners:  make(map[uint32]uint32, sizeHint),
		owners6: map[uint32][16]byte{},
		more:    map[uint32][]netip.Addr{},
	}
}

func family(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

func (p *poolIndex) len() int { return p.fam[0].Len() + p.fam[1].Len() }

// seq returns the record number of pool's allocation of addr.
func (x *index) seq(pool string, addr netip.Addr) (uint64, bool) {
	p := x.pools[pool]
	if p == nil {
		return 0, false
	}
	it, ok := p.fam[family(addr)].Get(addrtree.KeyOf(addr))
	return it.Val, ok
}

// len returns the number of addresses pool holds.
func (x *index) len(pool string) int {
	if p := x.pools[pool]; p != nil {
		return p.len()
	}
	return 0
}

// put files addr of pool under record seq.
func (x *index) put(pool string, addr netip.Addr, seq uint64) {
	p := x.pools[pool]
	if p == nil {
		p = &poolIndex{id: pool, fam: [2]addrtree.Tree{addrtree.New(), addrtree.New()}}
		x.pools[pool] = p
	}
	t := &p.fam[family(addr)]
	old, had := t.Put(addrtree.Item{Key: addrtree.KeyOf(addr), Val: seq})
	x.log(change{pool: p, tree: t, key: addrtree.KeyOf(addr), prev: old.Val, had: had})
}

// del removes addr of pool; the pool is forgotten with its last address
// (when the batch commits).
func (x *index) del(pool string, addr netip.Addr) {
	p := x.pools[pool]
	if p == nil {
		return
	}
	t, k := &p.fam[family(addr)], addrtree.KeyOf(addr)
	old, had := t.Get(k)
	if !had {
		return
	}
	t.Delete(k)
	x.log(change{pool: p, tree: t, key: k, prev: old.Val, had: true})
	if !x.logging && p.len() == 0 {
		delete(x.pools, pool)
	}
}

// anyIn reports whether pool holds an address in [first, last] (both of
// one family, first <= last).
func (x *index) anyIn(pool string, first, last netip.Addr) bool {
	p := x.pools[pool]
	if p == nil {
		return false
	}
	in := false
	p.fam[family(first)].Ascend(addrtree.KeyOf(first), false, func(it addrtree.Item) bool {
		in = !addrtree.KeyOf(last).Less(it.Key)
		return false
	})
	return in
}

// addrs returns pool's addresses in address order, IPv4 first.
func (x *index) addrs(pool string) []netip.Addr {
	p := x.pools[pool]
	if p == nil {
		return nil
	}
	out := make([]netip.Addr, 0, p.len())
	for f := range p.fam {
		p.fam[f].Ascend(addrtree.Key{}, true, func(it addrtree.Item) bool {
			out = append(out, it.Key.Addr(f == 0))
			return true
		})
	}
	return out
}

// ownerHash is the index's hash of an owner of pool.
func (x *index) ownerHash(pool, ownerKey string) uint32 {
	var h maphash.Hash
	h.SetSeed(x.seed)
	h.WriteString(pool)
	h.WriteByte(0)
	h.WriteString(ownerKey)
	return fold(h.Sum64())
}

// hashValue is ownerHash(pool, owner key) of the allocation whose value
// is v, hashed from v's owner fields without decoding them.
func (x *index) hashValue(pool, v []byte) (uint32, error) {
	var h maphash.Hash
	h.SetSeed(x.seed)
	h.Write(pool)
	h.WriteByte(0)
	if err := record.HashOwnerKey(&h, v); err != nil {
		return 0, err
	}
	return fold(h.Sum64()), nil
}

func fold(h uint64) uint32 { return uint32(h>>32) ^ uint32(h) }

// eachOwner calls fn with every address filed under h, until fn returns
// false.
func (x *index) eachOwner(h uint32, fn func(netip.Addr) bool) {
	if a, ok := x.firstOwner(h); ok && fn(a) {
		for _, a := range x.more[h] {
			if !fn(a) {
				return
			}
		}
	}
}

func (x *index) firstOwner(h uint32) (netip.Addr, bool) {
	if v, ok := x.owners[h]; ok {
		return addrtree.V4Key(v).Addr(true), true
	}
	v, ok := x.owners6[h]
	return netip.AddrFrom16(v), ok
}

// addOwner files addr under h.
func (x *index) addOwner(h uint32, addr netip.Addr) {
	if _, ok := x.firstOwner(h); ok {
		x.more[h] = append(x.more[h], addr)
	} else {
		x.setFirstOwner(h, addr)
	}
	x.log(change{h: h, addr: addr, added: true})
}

func (x *index) setFirstOwner(h uint32, addr netip.Addr) {
	if addr.Is4() {
		x.owners[h] = uint32(addrtree.KeyOf(addr).Lo)
	} else {
		x.owners6[h] = addr.As16()
	}
}

// removeOwner takes addr from under h, if it is there.
func (x *index) removeOwner(h uint32, addr netip.Addr) {
	first, ok := x.firstOwner(h)
	more := x.more[h]
	i := slices.Index(more, addr)
	switch {
	case !ok || (first != addr && i < 0):
		return
	case first == addr:
		delete(x.owners, h)
		delete(x.owners6, h)
		if len(more) > 0 {
			x.setFirstOwner(h, more[0])
			more = more[1:]
		}
	default:
		more = append(more[:i:i], more[i+1:]...)
	}
	if len(more) == 0 {
		delete(x.more, h)
	} else {
		x.more[h] = more
	}
	x.log(change{h: h, addr: addr})
}

func (x *index) log(c change) {
	if x.logging {
		x.undo = append(x.undo, c)
	}
}

// begin starts logging the changes of a batch.
func (x *index) begin() { x.logging, x.undo = true, x.undo[:0] }

// commit keeps the batch's changes, forgetting pools left empty; rollback
// undoes them, newest first, and then forgets them as commit does.
func (x *index) commit() {
	x.logging = false
	for _, c := range x.undo {
		if c.pool != nil && c.pool.len() == 0 {
			delete(x.pools, c.pool.id)
		}
	}
	clear(x.undo)
	x.undo = x.undo[:0]
}

func (x *index) rollback() {
	x.logging = false
	for i := len(x.undo) - 1; i >= 0; i-- {
		switch c := x.undo[i]; {
		case c.tree != nil && c.had:
			c.tree.Put(addrtree.Item{Key: c.key, Val: c.prev})
		case c.tree != nil:
			c.tree.Delete(c.key)
		case c.added:
			x.removeOwner(c.h, c.addr)
		default:
			x.addOwner(c.h, c.addr)
		}
	}
	x.commit()
}

// loader gathers the pool, address and number of each record as the file
// is read when it opens, and then builds the index: each pool's tree
// filled in address order, so its leaves are full.
type loader struct {
	x     *index
	pools map[string]*[2][]addrtree.Item
	last  *[2][]addrtree.Item
	lastP []byte
}

func newLoader(sizeHint int) *loader {
	return &loader{x: newIndex(sizeHint), pools: map[string]*[2][]addrtree.Item{}}
}

// add notes record seq, of addr in pool, whose value is v.
func (l *loader) add(pool []byte, addr netip.Addr, seq uint64, v []byte) error {
	h, err := l.x.hashValue(pool, v)
	if err != nil {
		return fmt.Errorf("allocation %s/%s: %w", pool, addr, err)
	}
	l.x.addOwner(h, addr)
	if l.last == nil || string(l.lastP) != string(pool) {
		if l.last = l.pools[string(pool)]; l.last == nil {
			l.last = &[2][]addrtree.Item{}
			l.pools[string(pool)] = l.last
		}
		l.lastP = pool
	}
	f := family(addr)
	l.last[f] = append(l.last[f], addrtree.Item{Key: addrtree.KeyOf(addr), Val: seq})
	return nil
}

// build returns the index of what was added; two records of one address
// are an error.
func (l *loader) build() (*index, error) {
	byKey := func(a, b addrtree.Item) int {
		switch {
		case a.Key.Less(b.Key):
			return -1
		case b.Key.Less(a.Key):
			return 1
		}
		return 0
	}
	for id, items := range l.pools {
		p := &poolIndex{id: id, fam: [2]addrtree.Tree{addrtree.New(), addrtree.New()}}
		for f, its := range items {
			if !slices.IsSortedFunc(its, byKey) {
				slices.SortStableFunc(its, byKey) // two records of an address stay in file order
			}
			for i, it := range its {
				if i > 0 && its[i-1].Key == it.Key {
					return nil, fmt.Errorf("allocation %s/%s: two records (the later is %d)", id, it.Key.Addr(f == 0), it.Val)
				}
				p.fam[f].Put(it)
			}
			items[f] = nil
		}
		l.x.pools[id] = p
	}
	return l.x, nil
}
