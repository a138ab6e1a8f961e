package ipam

import (
	"fmt"
	"math/bits"
	"testing"

	"github.com/stretchr/testify/require"
)

// spanSet is the naive model of a tree: sorted, disjoint, non-adjacent spans
// of used offsets.
type spanSet struct {
	spans []span
	last  u128 // the highest offset of the CIDR
}

func (m *spanSet) remove(lo, hi u128) {
	var out []span
	for _, sp := range m.spans {
		if sp.last.less(lo) || hi.less(sp.first) {
			out = append(out, sp)
			continue
		}
		if sp.first.less(lo) {
			out = append(out, span{sp.first, lo.sub(u128{0, 1})})
		}
		if hi.less(sp.last) {
			out = append(out, span{hi.add64(1), sp.last})
		}
	}
	m.spans = out
}

func (m *spanSet) add(lo, hi u128) {
	m.remove(lo, hi)
	var out []span
	inserted := false
	for _, sp := range m.spans {
		if !inserted && hi.less(sp.first) {
			out = append(out, span{lo, hi})
			inserted = true
		}
		out = append(out, sp)
	}
	if !inserted {
		out = append(out, span{lo, hi})
	}
	merged := out[:1]
	for _, sp := range out[1:] {
		prev := &merged[len(merged)-1]
		if prev.last != maxAddr && prev.last.add64(1) == sp.first {
			prev.last = sp.last
			continue
		}
		merged = append(merged, sp)
	}
	m.spans = merged
}

func (m *spanSet) contains(x u128) bool {
	for _, sp := range m.spans {
		if !x.less(sp.first) && !sp.last.less(x) {
			return true
		}
	}
	return false
}

func (m *spanSet) nextClear(from u128) (u128, bool) {
	x := from
	for _, sp := range m.spans {
		if sp.last.less(x) {
			continue
		}
		if x.less(sp.first) {
			return x, true
		}
		if sp.last == m.last {
			return u128{}, false
		}
		x = sp.last.add64(1)
	}
	return x, true
}

func (m *spanSet) nextSet(from u128) (u128, bool) {
	for _, sp := range m.spans {
		if sp.last.less(from) {
			continue
		}
		if from.less(sp.first) {
			return sp.first, true
		}
		return from, true
	}
	return u128{}, false
}

// checkNode verifies the invariants of the subtree under n.
func checkNode(t *testing.T, n *node, level int, isRoot bool) {
	t.Helper()
	require.Zero(t, n.full&n.present, "full and present overlap")
	require.Zero(t, n.full&n.single, "full and single overlap")
	require.Zero(t, n.present&n.single, "present and single overlap")
	if level == 0 {
		require.Zero(t, n.single)
		require.Empty(t, n.kids)
		require.Len(t, n.vals, bits.OnesCount64(n.present))
		for _, w := range n.vals {
			require.NotZero(t, w)
			require.NotEqual(t, allOnes, w)
		}
	} else {
		require.Len(t, n.kids, bits.OnesCount64(n.present))
		require.Len(t, n.vals, bits.OnesCount64(n.single))
		if level > maxSingleLevel {
			require.Zero(t, n.single)
		}
		for _, v := range n.vals {
			require.Less(t, v, uint64(1)<<shift(level))
		}
		for _, c := range n.kids {
			require.NotEqual(t, allOnes, c.full, "a present child is full")
			require.NotZero(t, c.full|c.present|c.single, "a present child is empty")
			if level <= maxSingleLevel {
				_, only := c.only(level - 1)
				require.False(t, only, "a present child holds a single address")
			}
			checkNode(t, c, level-1, false)
		}
	}
	if !isRoot {
		require.NotEqual(t, allOnes, n.full)
	}
}

// treeOps drives a tree and its model from fuzz bytes and compares them
// after every step.
func treeOps(t *testing.T, hostBits int, data []byte) {
	tr := newTree(hostBits)
	last := u128{0, 1}.shl(uint(hostBits)).sub(u128{0, 1})
	if hostBits == 128 {
		last = maxAddr
	}
	model := &spanSet{last: last}
	anchors := []u128{{}, last, last.shr(1), last.shr(1).add64(1), {0, 0x5555_5555_5555_5555}, {0x5555_5555_5555_5555, 0}}
	for i := wordBits; i < hostBits; i += 3 {
		anchors = append(anchors, u128{0, 1}.shl(uint(i)))
	}
	offset := func(a, d byte) u128 {
		x := anchors[int(a)%len(anchors)]
		if hostBits < 128 {
			// Keep the anchor inside the CIDR.
			x = u128{x.hi & last.hi, x.lo & last.lo}
		}
		delta := int64(int8(d))
		if delta < 0 {
			if x.less(u128{0, uint64(-delta)}) {
				return u128{}
			}
			return x.sub(u128{0, uint64(-delta)})
		}
		y := x.add64(uint64(delta))
		if last.less(y) || y.less(x) {
			return last
		}
		return y
	}
	for step := 0; len(data) >= 4 && step < 2000; step++ {
		op, a, d, e := data[0], data[1], data[2], data[3]
		data = data[4:]
		x := offset(a, d)
		switch op % 7 {
		case 0:
			require.Equal(t, !model.contains(x), tr.set(x), "set %v", x)
			model.add(x, x)
		case 1:
			require.Equal(t, model.contains(x), tr.clear(x), "clear %v", x)
			model.remove(x, x)
		case 2:
			want, wok := model.nextClear(x)
			got, gok := tr.nextClear(x)
			require.Equal(t, wok, gok, "nextClear(%v)", x)
			require.Equal(t, want, got, "nextClear(%v)", x)
		case 3:
			want, wok := model.nextSet(x)
			got, gok := nextSetIn(t, tr, x, last)
			require.Equal(t, wok, gok, "nextSet(%v)", x)
			require.Equal(t, want, got, "nextSet(%v)", x)
		case 6:
			want, wok := model.nextClear(x)
			got, gok := tr.takeNext(x)
			require.Equal(t, wok, gok, "takeNext(%v)", x)
			require.Equal(t, want, got, "takeNext(%v)", x)
			if wok {
				model.add(want, want)
			}
		case 4, 5:
			y := offset(e, byte(op))
			if y.less(x) {
				x, y = y, x
			}
			tr.assign(x, y, op%7 == 4)
			if op%7 == 4 {
				model.add(x, y)
			} else {
				model.remove(x, y)
			}
		}
		require.Equal(t, model.contains(x), tr.test(x), "test %v", x)
		full := len(model.spans) == 1 && model.spans[0] == span{u128{}, last}
		require.Equal(t, full, tr.isFull())
	}
	checkNode(t, tr.root, tr.height, true)
	// Everything the model holds, the tree holds, and nothing else.
	at := u128{}
	for _, sp := range model.spans {
		got, ok := tr.nextSet(at)
		require.True(t, ok)
		require.Equal(t, sp.first, got)
		if sp.last == last {
			_, ok := tr.nextClear(sp.first)
			require.False(t, ok)
			return
		}
		got, ok = tr.nextClear(sp.first)
		require.True(t, ok)
		require.Equal(t, sp.last.add64(1), got)
		at = got
	}
	_, ok := nextSetIn(t, tr, at, last)
	require.False(t, ok)
}

// nextSetIn checks that nextSet never reports the padding past the end.
func nextSetIn(t *testing.T, tr *tree, from, last u128) (u128, bool) {
	t.Helper()
	require.Equal(t, last, tr.last)
	return tr.nextSet(from)
}

var treeHostBits = []int{0, 1, 2, 5, 6, 7, 11, 12, 13, 17, 18, 19, 20, 24, 30, 32, 48, 60, 64, 66, 72, 80, 96, 120, 126, 127, 128}

func FuzzTree(f *testing.F) {
	f.Add(uint8(18), []byte{0, 0, 0, 0, 2, 0, 0, 0, 4, 1, 0, 2, 3, 0, 0, 0})
	f.Add(uint8(26), []byte{4, 0, 0, 1, 1, 3, 5, 0, 2, 0, 0, 0, 0, 2, 1, 0, 5, 0, 3, 1, 2, 0, 0, 0})
	f.Add(uint8(3), []byte{4, 0, 0, 1, 1, 1, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0})
	f.Fuzz(func(t *testing.T, hb uint8, data []byte) {
		treeOps(t, treeHostBits[int(hb)%len(treeHostBits)], data)
	})
}

// TestTreeRandomOps runs the fuzz body on generated inputs for every tree
// shape, so the model comparison runs in every `go test`.
func TestTreeRandomOps(t *testing.T) {
	for _, hb := range treeHostBits {
		t.Run(fmt.Sprint(hb), func(t *testing.T) {
			seed := uint64(hb)*0x9e3779b97f4a7c15 + 1
			for round := 0; round < 20; round++ {
				data := make([]byte, 4*300)
				for i := range data {
					seed ^= seed << 13
					seed ^= seed >> 7
					seed ^= seed << 17
					data[i] = byte(seed)
				}
				treeOps(t, hb, data)
			}
		})
	}
}

func TestTreeFillAndDrain(t *testing.T) {
	for _, hb := range []int{0, 4, 6, 12, 14, 16} {
		t.Run(fmt.Sprint(hb), func(t *testing.T) {
			tr := newTree(hb)
			size := 1 << hb
			var from u128
			for i := 0; i < size; i++ {
				off, ok := tr.nextClear(from)
				require.True(t, ok)
				require.Equal(t, uint64(i), off.lo)
				require.True(t, tr.set(off))
				from = off.add64(1)
			}
			_, ok := tr.nextClear(u128{})
			require.False(t, ok)
			require.True(t, tr.isFull())
			// A full CIDR collapses into the root's masks.
			require.Empty(t, tr.root.kids)
			for i := size - 1; i >= 0; i-- {
				require.True(t, tr.clear(u128{0, uint64(i)}))
			}
			_, ok = nextSetIn(t, tr, u128{}, u128{0, uint64(size - 1)})
			require.False(t, ok)
			require.Empty(t, tr.root.kids)
			if hb >= wordBits {
				require.Empty(t, tr.root.vals)
			}
		})
	}
}
