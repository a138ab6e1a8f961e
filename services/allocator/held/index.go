package held

import (
	"slices"
	"sync/atomic"
)

// leafCap is the number of items of a leaf: 127 items and the header fill
// a 3,072-byte size class of the Go allocator exactly.
const leafCap = 127

// leaf is a run of items in order.
type leaf struct {
	// gen is the generation of the index that may write the leaf in
	// place; an index of another generation shares it, and copies it
	// before writing.
	gen   uint64
	n     int
	items [leafCap]item
}

// index is the table's items in address order: a list of full or
// partly full leaves, found by binary search over their first keys. It
// is two levels of a B+-tree, and what it saves over a B-tree is space:
// an item appended after the last (the allocator hands out addresses in
// order) goes into the last leaf, or a new one, so a table filled in
// order keeps its leaves full, where a B-tree split them in halves and
// grew each node's slice by doubling (49 bytes an item against 24).
//
// Clone shares the leaves copy-on-write: a leaf is copied on its first
// write after a clone, as a B-tree's nodes were.
type index struct {
	gen    uint64
	leaves []*leaf
	// firsts[i] is the key of leaves[i].items[0].
	firsts []key
	n      int
}

// generations numbers indexes, so a clone and its source each write only
// the leaves of their own generation.
var generations atomic.Uint64

func newIndex() index { return index{gen: generations.Add(1)} }

func (x *index) len() int { return x.n }

// clone returns an index with the items of x; both may change
// independently afterwards. It costs a copy of the list of leaves.
func (x *index) clone() index {
	c := index{gen: generations.Add(1), leaves: slices.Clone(x.leaves), firsts: slices.Clone(x.firsts), n: x.n}
	x.gen = generations.Add(1)
	return c
}

// locate returns the leaf where k is or would go, and k's position in it.
func (x *index) locate(k key) (li, pos int, found bool) {
	// The last leaf whose first key is at most k (the first leaf when k
	// comes before every key).
	li = max(0, searchKeys(x.firsts, k)-1)
	l := x.leaves[li]
	pos = searchItems(l.items[:l.n], k)
	return li, pos, pos < l.n && l.items[pos].k == k
}

// searchKeys returns the number of keys of ks at most k.
func searchKeys(ks []key, k key) int {
	lo, hi := 0, len(ks)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if !k.less(ks[m]) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// searchItems returns the position of the first item of its at least k.
func searchItems(its []item, k key) int {
	lo, hi := 0, len(its)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if its[m].k.less(k) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func (x *index) get(k key) (item, bool) {
	if x.n == 0 {
		return item{}, false
	}
	li, pos, found := x.locate(k)
	if !found {
		return item{}, false
	}
	return x.leaves[li].items[pos], true
}

// writable returns leaf li, copied first if another index shares it.
func (x *index) writable(li int) *leaf {
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
func (x *index) insertLeaf(li int, l *leaf) {
	x.leaves = slices.Insert(x.leaves, li, l)
	x.firsts = slices.Insert(x.firsts, li, l.items[0].k)
}

func (x *index) removeLeaf(li int) {
	x.leaves = slices.Delete(x.leaves, li, li+1)
	x.firsts = slices.Delete(x.firsts, li, li+1)
}

// replaceOrInsert puts it in, and returns the item of the same key it
// replaced.
func (x *index) replaceOrInsert(it item) (old item, replaced bool) {
	if x.n == 0 {
		l := &leaf{gen: x.gen, n: 1}
		l.items[0] = it
		x.insertLeaf(0, l)
		x.n = 1
		return item{}, false
	}
	li, pos, found := x.locate(it.k)
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
		x.firsts[li] = l.items[0].k
		return item{}, false
	}
	if pos == leafCap {
		// After the last item of a full leaf: the front of the next
		// leaf if it has room, or a leaf of its own, so items that come
		// in order fill leaves.
		if li+1 < len(x.leaves) && x.leaves[li+1].n < leafCap {
			next := x.writable(li + 1)
			copy(next.items[1:next.n+1], next.items[:next.n])
			next.items[0] = it
			next.n++
			x.firsts[li+1] = it.k
			return item{}, false
		}
		nl := &leaf{gen: x.gen, n: 1}
		nl.items[0] = it
		x.insertLeaf(li+1, nl)
		return item{}, false
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
	x.firsts[li] = x.leaves[li].items[0].k
	x.firsts[li+1] = nl.items[0].k
	return item{}, false
}

// delete removes the item of key k.
func (x *index) delete(k key) bool {
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
	l.items[l.n] = item{}
	if l.n == 0 {
		x.removeLeaf(li)
		return true
	}
	x.firsts[li] = l.items[0].k
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
func (x *index) merge(li int) {
	l, next := x.writable(li), x.leaves[li+1]
	copy(l.items[l.n:], next.items[:next.n])
	l.n += next.n
	x.removeLeaf(li + 1)
}

// ascend calls fn with each item from the first at least from (every
// item when all is set) in order, until fn returns false.
func (x *index) ascend(from key, all bool, fn func(item) bool) {
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
