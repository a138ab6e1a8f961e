package addrtree

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// model is what an index holds, as a sorted slice.
type model []Item

func (m *model) put(it Item) (Item, bool) {
	i, found := slices.BinarySearchFunc(*m, it.Key, func(a Item, k Key) int { return cmpKey(a.Key, k) })
	if found {
		old := (*m)[i]
		(*m)[i] = it
		return old, true
	}
	*m = slices.Insert(*m, i, it)
	return Item{}, false
}

func (m *model) delete(k Key) bool {
	i, found := slices.BinarySearchFunc(*m, k, func(a Item, k Key) int { return cmpKey(a.Key, k) })
	if found {
		*m = slices.Delete(*m, i, i+1)
	}
	return found
}

func cmpKey(a, b Key) int {
	switch {
	case a.Less(b):
		return -1
	case b.Less(a):
		return 1
	}
	return 0
}

// check compares x with m: every Item in order, from every start,
// and the leaves' invariants.
func check(t testing.TB, x *Tree, m model) {
	t.Helper()
	if x.Len() != len(m) {
		t.Fatalf("len %d, want %d", x.Len(), len(m))
	}
	var got []Item
	x.Ascend(Key{}, true, func(it Item) bool { got = append(got, it); return true })
	if !slices.Equal(got, []Item(m)) {
		t.Fatalf("ascend gives %d items, want %d: %v, want %v", len(got), len(m), got, m)
	}
	n := 0
	for i, l := range x.leaves {
		if l.n == 0 || l.n > leafCap {
			t.Fatalf("leaf %d holds %d items", i, l.n)
		}
		if x.firsts[i] != l.items[0].Key {
			t.Fatalf("leaf %d starts at %v, the list says %v", i, l.items[0].Key, x.firsts[i])
		}
		for _, it := range l.items[l.n:] {
			if it != (Item{}) {
				t.Fatalf("leaf %d keeps an Item past its end", i)
			}
		}
		n += l.n
	}
	if n != len(m) {
		t.Fatalf("leaves hold %d items, want %d", n, len(m))
	}
	for _, it := range m {
		if got, ok := x.Get(it.Key); !ok || got != it {
			t.Fatalf("get(%v) = %v, %v", it.Key, got, ok)
		}
	}
	if len(m) > 0 {
		// Ascending from a Key in the middle, and from one between two.
		mid := m[len(m)/2].Key
		var from []Item
		x.Ascend(mid, false, func(it Item) bool { from = append(from, it); return len(from) < 5 })
		want := m[len(m)/2:]
		want = want[:min(5, len(want))]
		if !slices.Equal(from, []Item(want)) {
			t.Fatalf("ascend from %v gives %v, want %v", mid, from, want)
		}
	}
}

// runOps applies ops to an index and its model, takes clones along
// the way, and checks that every clone still holds what it held.
func runOps(t testing.TB, ops []byte, span uint64) {
	x := New()
	var m model
	type clone struct {
		x Tree
		m model
	}
	var clones []clone
	seq := uint64(0)
	for i := 0; i+2 < len(ops); i += 3 {
		op, v := ops[i]%8, uint64(ops[i+1])<<8|uint64(ops[i+2])
		k := Key{Lo: v % span}
		switch op {
		case 0, 1, 2: // at random
			it := Item{Key: k, Val: uint64(i + 1)}
			old, replaced := x.Put(it)
			wantOld, wantReplaced := m.put(it)
			if replaced != wantReplaced || old != wantOld {
				t.Fatalf("Put(%v) = %v, %v; want %v, %v", k, old, replaced, wantOld, wantReplaced)
			}
		case 3: // in order: how the allocator hands addresses out
			for range int(v%300) + 1 {
				seq++
				it := Item{Key: Key{Lo: span + seq}, Val: seq}
				x.Put(it)
				m.put(it)
			}
		case 4, 5:
			if got, want := x.Delete(k), m.delete(k); got != want {
				t.Fatalf("Delete(%v) = %v, want %v", k, got, want)
			}
		case 6: // a run of deletes
			for j := range uint64(v%200) + 1 {
				kk := Key{Lo: (v + j) % span}
				if got, want := x.Delete(kk), m.delete(kk); got != want {
					t.Fatalf("Delete(%v) = %v, want %v", kk, got, want)
				}
			}
		case 7:
			if len(clones) < 8 {
				clones = append(clones, clone{x.Clone(), slices.Clone(m)})
			}
		}
	}
	check(t, &x, m)
	for i := range clones {
		check(t, &clones[i].x, clones[i].m)
	}
}

func TestTreeFollowsModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, span := range []uint64{50, 1_000, 65_536} {
		for range 20 {
			ops := make([]byte, 3*3000)
			for i := range ops {
				ops[i] = byte(r.Uint32())
			}
			runOps(t, ops, span)
		}
	}
}

// TestTreeInOrderFillsLeaves: items that come in order leave every leaf
// but the last full.
func TestTreeInOrderFillsLeaves(t *testing.T) {
	x := New()
	const n = 10 * leafCap
	for i := range n + 3 {
		x.Put(Item{Key: Key{Lo: uint64(i)}})
	}
	if len(x.leaves) != 11 {
		t.Fatalf("%d leaves for %d items", len(x.leaves), n+3)
	}
	for i, l := range x.leaves[:10] {
		if l.n != leafCap {
			t.Fatalf("leaf %d holds %d items", i, l.n)
		}
	}
}

// TestTreeCloneSharesLeaves: a clone copies no leaf, and a write after
// it copies only the leaf it touches.
func TestTreeCloneSharesLeaves(t *testing.T) {
	x := New()
	for i := range 5 * leafCap {
		x.Put(Item{Key: Key{Lo: uint64(i)}})
	}
	c := x.Clone()
	x.Put(Item{Key: Key{Lo: 3}, Val: 7})
	shared := 0
	for i := range x.leaves {
		if x.leaves[i] == c.leaves[i] {
			shared++
		}
	}
	if shared != 4 {
		t.Fatalf("%d of 5 leaves shared after one write, want 4", shared)
	}
	if it, _ := c.Get(Key{Lo: 3}); it.Val != 0 {
		t.Fatalf("the clone sees the write: %v", it)
	}
}

func FuzzTree(f *testing.F) {
	f.Add([]byte{0, 0, 1, 3, 1, 0, 7, 0, 0, 4, 0, 1}, uint16(100))
	f.Add(make([]byte, 900), uint16(3))
	f.Fuzz(func(t *testing.T, ops []byte, span uint16) {
		if len(ops) > 30_000 {
			return
		}
		runOps(t, ops, uint64(span)+1)
	})
}
