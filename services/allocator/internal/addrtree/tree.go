// Package addrtree is an ordered map from addresses to 64-bit values,
// compact and without pointers in its items: the allocator's tables of
// held addresses (package held) and the bolt store's record numbers by
// address are both kept in one.
package addrtree

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"sync/atomic"
)

// Key is an address as 128 bits; an IPv4 address in its IPv4-mapped IPv6
// form, so a tree that mixes the families sorts them by that form.
type Key struct{ Hi, Lo uint64 }

// KeyOf returns the key of a.
func KeyOf(a netip.Addr) Key {
	b := a.As16()
	return Key{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// V4Key returns the key of the IPv4 address of 32 bits a.
func V4Key(a uint32) Key { return Key{Lo: 0xffff<<32 | uint64(a)} }

// Addr returns the address of k, as IPv4 when is4 is set.
func (k Key) Addr(is4 bool) netip.Addr {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], k.Hi)
	binary.BigEndian.PutUint64(b[8:], k.Lo)
	a := netip.AddrFrom16(b)
	if is4 {
		a = a.Unmap()
	}
	return a
}

// Less orders keys as the addresses they stand for.
func (k Key) Less(o Key) bool { return k.Hi < o.Hi || (k.Hi == o.Hi && k.Lo < o.Lo) }

// Item is an entry of a tree: an address and its value.
type Item struct {
	Key Key
	Val uint64
}

// leafCap is the number of items of a leaf: 127 items and the header fill
// a 3,072-byte size class of the Go allocator exactly.
const leafCap = 127

// leaf is a run of items in order.
type leaf struct {
	// gen is the generation of the tree that may write the leaf in
	// place; a tree of another generation shares it, and copies it
	// before writing.
	gen   uint64
	n     int
	items [leafCap]Item
}

// A Tree holds items in address order: a list of full or partly full
// leaves, found by binary search over their first keys. It is two levels
// of a B+-tree, and what it saves over a B-tree is space: an item put
// after the last (the allocator hands out addresses in order) goes into
// the last leaf, or a new one, so a tree filled in order keeps its leaves
// full, where a B-tree split them in halves and grew each node's slice by
// doubling (49 bytes an item against 24). The zero Tree is not ready for
// use; New returns one. A Tree is not safe for concurrent use.
//
// Clone shares the leaves copy-on-write: a leaf is copied on its first
// write after a clone, as a B-tree's nodes were.
type Tree struct {
	gen    uint64
	leaves []*leaf
	// firsts[i] is the key of leaves[i].items[0].
	firsts []Key
	n      int
}

// generations numbers trees, so a clone and its source each write only
// the leaves of their own generation.
var generations atomic.Uint64

// New returns an empty tree.
func New() Tree { return Tree{gen: generations.Add(1)} }

// Len returns the number of items.
func (x *Tree) Len() int { return x.n }

// Clone returns a tree with the items of x; both may change
// independently afterwards. It costs a copy of the list of leaves.
func (x *Tree) Clone() Tree {
	c := Tree{gen: generations.Add(1), leaves: slices.Clone(x.leaves), firsts: slices.Clone(x.firsts), n: x.n}
	x.gen = generations.Add(1)
	return c
}

// locate returns the leaf where k is or would go, and k's position in it.
func (x *Tree) locate(k Key) (li, pos int, found bool) {
	// The last leaf whose first key is at most k (the first leaf when k
	// comes before every key).
	li = max(0, searchKeys(x.firsts, k)-1)
	l := x.leaves[li]
	pos = searchItems(l.items[:l.n], k)
	return li, pos, pos < l.n && l.items[pos].Key == k
}

// searchKeys returns the number of keys of ks at most k.
func searchKeys(ks []Key, k Key) int {
	lo, hi := 0, len(ks)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if !k.Less(ks[m]) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// searchItems returns the position of the first item of its at least k.
func searchItems(its []Item, k Key) int {
	lo, hi := 0, len(its)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if its[m].Key.Less(k) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Get returns the item of key k.
func (x *Tree) Get(k Key) (Item, bool) {
	if x.n == 0 {
		return Item{}, false
	}
	li, pos, found := x.locate(k)
	if !found {
		return Item{}, false
	}
	return x.leaves[li].items[pos], true
}

// writable returns leaf li, copied first if another tree shares it.
func (x *Tree) writable(li int) *leaf {
	l := x.leaves[li]
	if l.gen != x.gen {
		c := *l
		c.gen = x.gen
		l = &c
		x.leaves[li] = l
	}
	return l
}

// insertLeaf puts l into the list at li.
func (x *Tree) insertLeaf(li int, l *leaf) {
	x.leaves = slices.Insert(x.leaves, li, l)
	x.firsts = slices.Insert(x.firsts, li, l.items[0].Key)
}

func (x *Tree) removeLeaf(li int) {
	x.leaves = slices.Delete(x.leaves, li, li+1)
	x.firsts = slices.Delete(x.firsts, li, li+1)
}

// Put puts it in, and returns the item of the same key it
// replaced.
func (x *Tree) Put(it Item) (old Item, replaced bool) {
	if x.n == 0 {
		l := &leaf{gen: x.gen, n: 1}
		l.items[0] = it
		x.insertLeaf(0, l)
		x.n = 1
		return Item{}, false
	}
	var li, pos int
	var found bool
	if last := x.leaves[len(x.leaves)-1]; last.items[last.n-1].Key.Less(it.Key) {
		li, pos = len(x.leaves)-1, last.n // after the last item: no search
	} else {
		li, pos, found = x.locate(it.Key)
	}
	if found {
		l := x.writable(li)
		old = l.items[pos]
		l.items[pos] = it
		return old, true
	}
	x.n++
	l := x.leaves[li]
	if l.n < leafCap {
		l = x.writable(li)
		copy(l.items[pos+1:l.n+1], l.items[pos:l.n])
		l.items[pos] = it
		l.n++
		x.firsts[li] = l.items[0].Key
		return Item{}, false
	}
	if pos == leafCap {
		// After the last Item of a full leaf: the front of the next
		// leaf if it has room, or a leaf of its own, so items that come
		// in order fill leaves.
		if li+1 < len(x.leaves) && x.leaves[li+1].n < leafCap {
			next := x.writable(li + 1)
			copy(next.items[1:next.n+1], next.items[:next.n])
			next.items[0] = it
			next.n++
			x.firsts[li+1] = it.Key
			return Item{}, false
		}
		nl := &leaf{gen: x.gen, n: 1}
		nl.items[0] = it
		x.insertLeaf(li+1, nl)
		return Item{}, false
	}
	// Split the full leaf in halves, and insert into the one it falls in.
	l = x.writable(li)
	half := leafCap / 2
	nl := &leaf{gen: x.gen, n: leafCap - half}
	copy(nl.items[:], l.items[half:])
	clear(l.items[half:])
	l.n = half
	x.insertLeaf(li+1, nl)
	if pos > half {
		l, pos = nl, pos-half
	}
	copy(l.items[pos+1:l.n+1], l.items[pos:l.n])
	l.items[pos] = it
	l.n++
	x.firsts[li] = x.leaves[li].items[0].Key
	x.firsts[li+1] = nl.items[0].Key
	return Item{}, false
}

// Delete removes the item of key k, and reports whether it was there.
func (x *Tree) Delete(k Key) bool {
	if x.n == 0 {
		return false
	}
	li, pos, found := x.locate(k)
	if !found {
		return false
	}
	x.n--
	l := x.writable(li)
	copy(l.items[pos:l.n-1], l.items[pos+1:l.n])
	l.n--
	l.items[l.n] = Item{}
	if l.n == 0 {
		x.removeLeaf(li)
		return true
	}
	x.firsts[li] = l.items[0].Key
	// Two neighbours that fit in half a leaf become one, so deletes do
	// not leave a trail of nearly empty leaves.
	switch {
	case li+1 < len(x.leaves) && l.n+x.leaves[li+1].n <= leafCap/2:
		x.merge(li)
	case li > 0 && l.n+x.leaves[li-1].n <= leafCap/2:
		x.merge(li - 1)
	}
	return true
}

// merge moves the items of leaf li+1 to the end of leaf li.
func (x *Tree) merge(li int) {
	l, next := x.writable(li), x.leaves[li+1]
	copy(l.items[l.n:], next.items[:next.n])
	l.n += next.n
	x.removeLeaf(li + 1)
}

// Ascend calls fn with each item from the first at least from (every
// item when all is set) in order, until fn returns false.
func (x *Tree) Ascend(from Key, all bool, fn func(Item) bool) {
	if x.n == 0 {
		return
	}
	li, pos := 0, 0
	if !all {
		li, pos, _ = x.locate(from)
	}
	for ; li < len(x.leaves); li, pos = li+1, 0 {
		l := x.leaves[li]
		for _, it := range l.items[pos:l.n] {
			if !fn(it) {
				return
			}
		}
	}
}
