package held

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// indexModel is what an index holds, as a sorted slice.
type indexModel []item

func (m *indexModel) put(it item) (item, bool) {
	i, found := slices.BinarySearchFunc(*m, it.k, func(a item, k key) int { return cmpKey(a.k, k) })
	if found {
		old := (*m)[i]
		(*m)[i] = it
		return old, true
	}
	*m = slices.Insert(*m, i, it)
	return item{}, false
}

func (m *indexModel) delete(k key) bool {
	i, found := slices.BinarySearchFunc(*m, k, func(a item, k key) int { return cmpKey(a.k, k) })
	if found {
		*m = slices.Delete(*m, i, i+1)
	}
	return found
}

func cmpKey(a, b key) int {
	switch {
	case a.less(b):
		return -1
	case b.less(a):
		return 1
	}
	return 0
}

// checkIndex compares x with m: every item in order, from every start,
// and the leaves' invariants.
func checkIndex(t testing.TB, x *index, m indexModel) {
	t.Helper()
	if x.len() != len(m) {
		t.Fatalf("len %d, want %d", x.len(), len(m))
	}
	var got []item
	x.ascend(key{}, true, func(it item) bool { got = append(got, it); return true })
	if !slices.Equal(got, []item(m)) {
		t.Fatalf("ascend gives %d items, want %d: %v, want %v", len(got), len(m), got, m)
	}
	n := 0
	for i, l := range x.leaves {
		if l.n == 0 || l.n > leafCap {
			t.Fatalf("leaf %d holds %d items", i, l.n)
		}
		if x.firsts[i] != l.items[0].k {
			t.Fatalf("leaf %d starts at %v, the list says %v", i, l.items[0].k, x.firsts[i])
		}
		for _, it := range l.items[l.n:] {
			if it != (item{}) {
				t.Fatalf("leaf %d keeps an item past its end", i)
			}
		}
		n += l.n
	}
	if n != len(m) {
		t.Fatalf("leaves hold %d items, want %d", n, len(m))
	}
	for _, it := range m {
		if got, ok := x.get(it.k); !ok || got != it {
			t.Fatalf("get(%v) = %v, %v", it.k, got, ok)
		}
	}
	if len(m) > 0 {
		// Ascending from a key in the middle, and from one between two.
		mid := m[len(m)/2].k
		var from []item
		x.ascend(mid, false, func(it item) bool { from = append(from, it); return len(from) < 5 })
		want := m[len(m)/2:]
		want = want[:min(5, len(want))]
		if !slices.Equal(from, []item(want)) {
			t.Fatalf("ascend from %v gives %v, want %v", mid, from, want)
		}
	}
}

// runIndexOps applies ops to an index and its model, takes clones along
// the way, and checks that every clone still holds what it held.
func runIndexOps(t testing.TB, ops []byte, span uint64) {
	x := newIndex()
	var m indexModel
	type clone struct {
		x index
		m indexModel
	}
	var clones []clone
	seq := uint64(0)
	for i := 0; i+2 < len(ops); i += 3 {
		op, v := ops[i]%8, uint64(ops[i+1])<<8|uint64(ops[i+2])
		k := key{lo: v % span}
		switch op {
		case 0, 1, 2: // at random
			it := item{k: k, r: ref(i + 1)}
			old, replaced := x.replaceOrInsert(it)
			wantOld, wantReplaced := m.put(it)
			if replaced != wantReplaced || old != wantOld {
				t.Fatalf("replaceOrInsert(%v) = %v, %v; want %v, %v", k, old, replaced, wantOld, wantReplaced)
			}
		case 3: // in order: how the allocator hands addresses out
			for range int(v%300) + 1 {
				seq++
				it := item{k: key{lo: span + seq}, r: ref(seq)}
				x.replaceOrInsert(it)
				m.put(it)
			}
		case 4, 5:
			if got, want := x.delete(k), m.delete(k); got != want {
				t.Fatalf("delete(%v) = %v, want %v", k, got, want)
			}
		case 6: // a run of deletes
			for j := range uint64(v%200) + 1 {
				kk := key{lo: (v + j) % span}
				if got, want := x.delete(kk), m.delete(kk); got != want {
					t.Fatalf("delete(%v) = %v, want %v", kk, got, want)
				}
			}
		case 7:
			if len(clones) < 8 {
				clones = append(clones, clone{x.clone(), slices.Clone(m)})
			}
		}
	}
	checkIndex(t, &x, m)
	for i := range clones {
		checkIndex(t, &clones[i].x, clones[i].m)
	}
}

func TestIndexFollowsModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, span := range []uint64{50, 1_000, 65_536} {
		for range 20 {
			ops := make([]byte, 3*3000)
			for i := range ops {
				ops[i] = byte(r.Uint32())
			}
			runIndexOps(t, ops, span)
		}
	}
}

// TestIndexInOrderFillsLeaves: items that come in order leave every leaf
// but the last full.
func TestIndexInOrderFillsLeaves(t *testing.T) {
	x := newIndex()
	const n = 10 * leafCap
	for i := range n + 3 {
		x.replaceOrInsert(item{k: key{lo: uint64(i)}})
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

// TestIndexCloneSharesLeaves: a clone copies no leaf, and a write after
// it copies only the leaf it touches.
func TestIndexCloneSharesLeaves(t *testing.T) {
	x := newIndex()
	for i := range 5 * leafCap {
		x.replaceOrInsert(item{k: key{lo: uint64(i)}})
	}
	c := x.clone()
	x.replaceOrInsert(item{k: key{lo: 3}, r: 7})
	shared := 0
	for i := range x.leaves {
		if x.leaves[i] == c.leaves[i] {
			shared++
		}
	}
	if shared != 4 {
		t.Fatalf("%d of 5 leaves shared after one write, want 4", shared)
	}
	if it, _ := c.get(key{lo: 3}); it.r != 0 {
		t.Fatalf("the clone sees the write: %v", it)
	}
}

func FuzzIndex(f *testing.F) {
	f.Add([]byte{0, 0, 1, 3, 1, 0, 7, 0, 0, 4, 0, 1}, uint16(100))
	f.Add(make([]byte, 900), uint16(3))
	f.Fuzz(func(t *testing.T, ops []byte, span uint16) {
		if len(ops) > 30_000 {
			return
		}
		runIndexOps(t, ops, uint64(span)+1)
	})
}
