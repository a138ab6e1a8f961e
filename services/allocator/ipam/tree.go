package ipam

import (
	"math/bits"
	"slices"
)

// The free-space index of one CIDR is a 64-ary tree of bitmaps.
//
// A leaf (level 0) is a block of 64 words of 64 bits: 4096 addresses. A node
// at level L >= 1 has 64 slots, each covering a level L-1 subtree. Slot s of a
// node is in exactly one of four states, kept as bit s of three masks:
//
//	full    every address under the slot is used; nothing is stored
//	present partly used; a child (or, in a leaf, a word) is stored
//	single  (levels 1..maxSingleLevel) exactly one address is used; its
//	        offset inside the slot is stored instead of a child
//	(none)  every address under the slot is free; nothing is stored
//
// So untouched space costs nothing, fully used space costs nothing either,
// and a subtree holding one address costs one uint64 in its parent: memory
// follows the boundary between used and free, not the size of the range.
//
// Stored children and words are kept packed in slices ordered by slot, and
// found by counting the bits below the slot in the mask (rank), so a node
// with two children costs two pointers, not 64.
//
// Invariants (outside the operation that is rewriting a slot):
//   - the three masks are disjoint;
//   - a present child is neither entirely used nor entirely free, so a
//     descent into a present slot from its start always finds both a used
//     and a free address; where the parent could store a single offset
//     instead, the child also holds more than one used address;
//   - a leaf word that is stored is neither 0 nor all ones.
//
// Finding the next free address at or after an offset visits at most two
// slots per level (the one holding the offset, which may fail, and the next
// one that is not full, which cannot), so its cost depends on the height of
// the tree, never on how full the range is.
//
// "Used" means unavailable: allocated, quarantined, reserved, network or
// broadcast, or past the end of the CIDR. The pool, not the tree, knows why.

const (
	wordBits  = 6 // 64 addresses per word
	slotBits  = 6 // 64 slots per node
	leafBits  = wordBits + slotBits
	allOnes   = ^uint64(0)
	slotCount = 1 << slotBits

	// maxSingleLevel is the highest level whose slots are small enough
	// (2^60 addresses) to store a single offset in a uint64.
	maxSingleLevel = (64 - wordBits) / slotBits
)

// shift is the number of address bits below a slot of a level-L node.
func shift(level int) uint { return wordBits + slotBits*uint(level) }

func slotOf(off u128, sh uint) uint { return uint(off.shr(sh).lo) & (slotCount - 1) }

// rel is the offset of off inside its slot at shift sh <= 60.
func rel(off u128, sh uint) uint64 { return off.lo & (1<<sh - 1) }

func rank(mask uint64, s uint) int { return bits.OnesCount64(mask & (1<<s - 1)) }

type node struct {
	full, present, single uint64
	// kids holds the children of present slots (levels >= 1).
	kids []*node
	// vals holds, in a leaf, the words of present slots, and in an inner
	// node, the offsets (inside the slot) of single slots.
	vals []uint64
}

type tree struct {
	root   *node
	height int
	spare  spares
	// last is the highest offset inside the CIDR.
	last u128
	// inside has a bit for each root slot inside the CIDR. The others are
	// kept full; for a /0 their offsets would not even fit 128 bits.
	inside uint64
}

// spares keeps a few dropped nodes for reuse. A pool with churn at a block
// boundary (an address handed out and released in a block that is otherwise
// full, or otherwise empty) would otherwise allocate and drop a node or two
// on every operation, and feed the garbage collector for nothing.
type spares struct{ nodes []*node }

const maxSpares = 16

func (sp *spares) get() *node {
	if n := len(sp.nodes); n > 0 {
		c := sp.nodes[n-1]
		sp.nodes = sp.nodes[:n-1]
		return c
	}
	return &node{}
}

// put takes a node that is no longer linked into the tree. Its children, if
// any, are left to the garbage collector.
func (sp *spares) put(c *node) {
	if len(sp.nodes) == maxSpares {
		return
	}
	clear(c.kids)
	*c = node{kids: c.kids[:0], vals: c.vals[:0]}
	sp.nodes = append(sp.nodes, c)
}

// newTree returns an index for a CIDR of 2^hostBits addresses, all free.
// Slots past the end of the CIDR are marked used once, at the root (or in the
// root leaf for CIDRs smaller than a block), so no operation needs to know
// the CIDR's size.
func newTree(hostBits int) *tree {
	t := &tree{root: &node{}, last: u128{allOnes, allOnes}, inside: 1}
	if hostBits < 128 {
		t.last = u128{0, 1}.shl(uint(hostBits)).sub(u128{0, 1})
	}
	if hostBits > leafBits {
		t.height = (hostBits - leafBits + slotBits - 1) / slotBits
	}
	// With the height chosen as small as possible, a root slot (a word, in
	// a leaf root) never straddles the end of the CIDR unless the whole
	// CIDR is smaller than one word. Shifts by 64 yield 0 in Go, which is
	// the right mask when every slot is inside.
	if sh := shift(t.height); uint(hostBits) >= sh {
		t.root.full = allOnes << (1 << (uint(hostBits) - sh))
		t.inside = ^t.root.full
	} else {
		t.root.full = allOnes &^ 1
		t.root.setWord(0, allOnes<<(1<<uint(hostBits)))
	}
	return t
}

// isFull reports whether no address of the CIDR is free.
func (t *tree) isFull() bool { return t.root.full == allOnes }

// test reports whether off is used.
func (t *tree) test(off u128) bool {
	n := t.root
	for level := t.height; ; level-- {
		sh := shift(level)
		s := slotOf(off, sh)
		bit := uint64(1) << s
		if level == 0 {
			return n.word(s)&(1<<(off.lo&63)) != 0
		}
		switch {
		case n.full&bit != 0:
			return true
		case n.present&bit != 0:
			n = n.kids[rank(n.present, s)]
		case n.single&bit != 0:
			return n.vals[rank(n.single, s)] == rel(off, sh)
		default:
			return false
		}
	}
}

// set marks off used and reports whether it was free.
func (t *tree) set(off u128) bool { return t.root.set(&t.spare, t.height, off) }

// clear marks off free and reports whether it was used.
func (t *tree) clear(off u128) bool { return t.root.clear(&t.spare, t.height, off) }

// nextClear returns the first free offset at or after from.
func (t *tree) nextClear(from u128) (u128, bool) {
	return t.root.nextClear(t.height, u128{}, from)
}

// takeNext marks the first free offset at or after from used and returns it:
// nextClear and set in one descent.
func (t *tree) takeNext(from u128) (u128, bool) {
	return t.root.takeNext(&t.spare, t.height, u128{}, from)
}

// nextSet returns the first used offset at or after from, not counting the
// padding past the end of the CIDR.
func (t *tree) nextSet(from u128) (u128, bool) {
	r, ok := t.root.nextSet(t.height, u128{}, from, t.inside)
	if !ok || t.last.less(r) {
		return u128{}, false
	}
	return r, true
}

// assign marks every offset in [lo, hi] used (or free) in O(height * 64),
// however large the span: whole slots are set or dropped at once.
func (t *tree) assign(lo, hi u128, used bool) {
	t.root.assign(&t.spare, t.height, u128{}, lo, hi, used)
}

// word returns leaf word s.
func (n *node) word(s uint) uint64 {
	bit := uint64(1) << s
	switch {
	case n.full&bit != 0:
		return allOnes
	case n.present&bit != 0:
		return n.vals[rank(n.present, s)]
	default:
		return 0
	}
}

// setWord stores leaf word s in whichever form its value calls for.
func (n *node) setWord(s uint, w uint64) {
	bit := uint64(1) << s
	if n.present&bit != 0 {
		i := rank(n.present, s)
		if w != 0 && w != allOnes {
			n.vals[i] = w
			return
		}
		n.vals = slices.Delete(n.vals, i, i+1)
		n.present &^= bit
	}
	n.full &^= bit
	switch w {
	case 0:
	case allOnes:
		n.full |= bit
	default:
		n.vals = slices.Insert(n.vals, rank(n.present, s), w)
		n.present |= bit
	}
}

// dropSlot makes inner slot s free, discarding what it stored.
func (n *node) dropSlot(sp *spares, s uint) {
	bit := uint64(1) << s
	switch {
	case n.present&bit != 0:
		i := rank(n.present, s)
		sp.put(n.kids[i])
		n.kids = slices.Delete(n.kids, i, i+1)
		n.present &^= bit
	case n.single&bit != 0:
		i := rank(n.single, s)
		n.vals = slices.Delete(n.vals, i, i+1)
		n.single &^= bit
	}
	n.full &^= bit
}

func (n *node) putSingle(s uint, v uint64) {
	n.vals = slices.Insert(n.vals, rank(n.single, s), v)
	n.single |= 1 << s
}

// child returns the child of inner slot s at the given level, first turning
// a full, single or free slot into an equivalent child. The caller must call
// settle afterwards, since a new child may break the invariants.
func (n *node) child(sp *spares, level int, s uint) *node {
	bit := uint64(1) << s
	if n.present&bit != 0 {
		return n.kids[rank(n.present, s)]
	}
	c := sp.get()
	switch {
	case n.full&bit != 0:
		c.full = allOnes
	case n.single&bit != 0:
		v := n.vals[rank(n.single, s)]
		csh := shift(level - 1)
		cs := uint(v>>csh) & (slotCount - 1)
		if level-1 == 0 {
			c.setWord(cs, 1<<(v&63))
		} else {
			c.putSingle(cs, v&(1<<csh-1))
		}
	}
	n.dropSlot(sp, s)
	n.kids = slices.Insert(n.kids, rank(n.present, s), c)
	n.present |= bit
	return c
}

// settle puts inner slot s, whose child c has just changed, back into its
// cheapest form: full, free or single when the child has become so.
func (n *node) settle(sp *spares, level int, s uint, c *node) {
	switch {
	case c.full == allOnes:
		n.dropSlot(sp, s)
		n.full |= 1 << s
	case c.full|c.present|c.single == 0:
		n.dropSlot(sp, s)
	case level <= maxSingleLevel:
		if v, ok := c.only(level - 1); ok {
			n.dropSlot(sp, s)
			n.putSingle(s, v)
		}
	}
}

// only returns the offset of the one used address under n, if there is
// exactly one.
func (n *node) only(level int) (uint64, bool) {
	if n.full != 0 {
		return 0, false
	}
	if level == 0 {
		if bits.OnesCount64(n.present) != 1 || bits.OnesCount64(n.vals[0]) != 1 {
			return 0, false
		}
		return uint64(bits.TrailingZeros64(n.present))<<wordBits | uint64(bits.TrailingZeros64(n.vals[0])), true
	}
	if n.present != 0 || bits.OnesCount64(n.single) != 1 {
		return 0, false
	}
	return uint64(bits.TrailingZeros64(n.single))<<shift(level) | n.vals[0], true
}

func (n *node) set(sp *spares, level int, off u128) bool {
	sh := shift(level)
	s := slotOf(off, sh)
	bit := uint64(1) << s
	if level == 0 {
		w := n.word(s)
		nw := w | 1<<(off.lo&63)
		if nw == w {
			return false
		}
		n.setWord(s, nw)
		return true
	}
	switch {
	case n.full&bit != 0:
		return false
	case n.single&bit != 0:
		if n.vals[rank(n.single, s)] == rel(off, sh) {
			return false
		}
	case n.present&bit == 0 && level <= maxSingleLevel:
		n.putSingle(s, rel(off, sh))
		return true
	}
	c := n.child(sp, level, s)
	changed := c.set(sp, level-1, off)
	n.settle(sp, level, s, c)
	return changed
}

func (n *node) clear(sp *spares, level int, off u128) bool {
	sh := shift(level)
	s := slotOf(off, sh)
	bit := uint64(1) << s
	if level == 0 {
		w := n.word(s)
		nw := w &^ (1 << (off.lo & 63))
		if nw == w {
			return false
		}
		n.setWord(s, nw)
		return true
	}
	switch {
	case n.single&bit != 0:
		if n.vals[rank(n.single, s)] != rel(off, sh) {
			return false
		}
		n.dropSlot(sp, s)
		return true
	case (n.full|n.present)&bit == 0:
		return false
	}
	c := n.child(sp, level, s)
	changed := c.clear(sp, level-1, off)
	n.settle(sp, level, s, c)
	return changed
}

// slotBase is the first offset of slot s of the node starting at base.
func slotBase(base u128, s uint, sh uint) u128 {
	return base.add(u128{0, uint64(s)}.shl(sh))
}

func (n *node) nextClear(level int, base, from u128) (u128, bool) {
	sh := shift(level)
	s := slotOf(from, sh)
	partial := true // the first slot is searched from `from`, not its start
	for {
		cand := ^n.full & (allOnes << s)
		if cand == 0 {
			return u128{}, false
		}
		s2 := uint(bits.TrailingZeros64(cand))
		if s2 != s {
			partial = false
		}
		bit := uint64(1) << s2
		if level == 0 {
			free := ^n.word(s2)
			if partial {
				free &= allOnes << (from.lo & 63)
			}
			if free != 0 {
				return base.add64(uint64(s2)<<wordBits | uint64(bits.TrailingZeros64(free))), true
			}
		} else {
			sb := slotBase(base, s2, sh)
			start := sb
			if partial {
				start = from
			}
			switch {
			case n.present&bit != 0:
				if r, ok := n.kids[rank(n.present, s2)].nextClear(level-1, sb, start); ok {
					return r, true
				}
			case n.single&bit != 0:
				v := sb.add64(n.vals[rank(n.single, s2)])
				if start != v {
					return start, true
				}
				if !v.lowOnes(sh) {
					return v.add64(1), true
				}
			default:
				return start, true
			}
		}
		s = s2 + 1
		partial = false
	}
}

// nextSet looks only at the slots in mask.
// takeNext follows nextClear, and marks what it finds used on its way back.
func (n *node) takeNext(sp *spares, level int, base, from u128) (u128, bool) {
	sh := shift(level)
	s := slotOf(from, sh)
	partial := true
	for {
		cand := ^n.full & (allOnes << s)
		if cand == 0 {
			return u128{}, false
		}
		s2 := uint(bits.TrailingZeros64(cand))
		if s2 != s {
			partial = false
		}
		bit := uint64(1) << s2
		if level == 0 {
			w := n.word(s2)
			free := ^w
			if partial {
				free &= allOnes << (from.lo & 63)
			}
			if free != 0 {
				b := uint(bits.TrailingZeros64(free))
				n.setWord(s2, w|1<<b)
				return base.add64(uint64(s2)<<wordBits | uint64(b)), true
			}
		} else {
			sb := slotBase(base, s2, sh)
			start := sb
			if partial {
				start = from
			}
			found, ok := start, true
			switch {
			case n.present&bit != 0:
				c := n.kids[rank(n.present, s2)]
				if found, ok = c.takeNext(sp, level-1, sb, start); ok {
					n.settle(sp, level, s2, c)
					return found, true
				}
			case n.single&bit != 0:
				if v := sb.add64(n.vals[rank(n.single, s2)]); start == v {
					found, ok = v.add64(1), !v.lowOnes(sh)
				}
			}
			if ok {
				n.set(sp, level, found)
				return found, true
			}
		}
		s = s2 + 1
		partial = false
	}
}

func (n *node) nextSet(level int, base, from u128, mask uint64) (u128, bool) {
	sh := shift(level)
	s := slotOf(from, sh)
	partial := true
	for {
		cand := (n.full | n.present | n.single) & mask & (allOnes << s)
		if cand == 0 {
			return u128{}, false
		}
		s2 := uint(bits.TrailingZeros64(cand))
		if s2 != s {
			partial = false
		}
		bit := uint64(1) << s2
		if level == 0 {
			used := n.word(s2)
			if partial {
				used &= allOnes << (from.lo & 63)
			}
			if used != 0 {
				return base.add64(uint64(s2)<<wordBits | uint64(bits.TrailingZeros64(used))), true
			}
		} else {
			sb := slotBase(base, s2, sh)
			start := sb
			if partial {
				start = from
			}
			switch {
			case n.full&bit != 0:
				return start, true
			case n.present&bit != 0:
				if r, ok := n.kids[rank(n.present, s2)].nextSet(level-1, sb, start, allOnes); ok {
					return r, true
				}
			default: // single
				if v := sb.add64(n.vals[rank(n.single, s2)]); !v.less(start) {
					return v, true
				}
			}
		}
		s = s2 + 1
		partial = false
	}
}

// assign marks [lo, hi] (both inside this node, which starts at base) used
// or free.
func (n *node) assign(sp *spares, level int, base, lo, hi u128, used bool) {
	sh := shift(level)
	sLo, sHi := slotOf(lo, sh), slotOf(hi, sh)
	if level == 0 {
		for s := sLo; s <= sHi; s++ {
			m := allOnes
			if s == sLo {
				m &= allOnes << (lo.lo & 63)
			}
			if s == sHi {
				m &= allOnes >> (63 - hi.lo&63)
			}
			if used {
				n.setWord(s, n.word(s)|m)
			} else {
				n.setWord(s, n.word(s)&^m)
			}
		}
		return
	}
	// Slots wholly inside [lo, hi] change state at once; at most the two
	// end slots are partly covered and need a descent.
	for s := sLo; s <= sHi; s++ {
		whole := (s != sLo || lo.lowZero(sh)) && (s != sHi || hi.lowOnes(sh))
		if whole {
			n.dropSlot(sp, s)
			if used {
				n.full |= 1 << s
			}
			continue
		}
		sb := slotBase(base, s, sh)
		clo, chi := sb, hi
		if s == sLo {
			clo = lo
		}
		if s != sHi {
			// Wraps to the right value for the last slot of a /0.
			chi = sb.add(u128{0, 1}.shl(sh)).sub(u128{0, 1})
		}
		c := n.child(sp, level, s)
		c.assign(sp, level-1, sb, clo, chi, used)
		n.settle(sp, level, s, c)
	}
}
