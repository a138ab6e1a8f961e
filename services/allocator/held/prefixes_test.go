package held

import "testing"

// TestPrefixesRefUnref: a prefix keeps its number while referred to, the
// number of one no longer referred to is used again, and the last number
// handed out is never handed out for another prefix once forgotten.
func TestPrefixesRefUnref(t *testing.T) {
	var p prefixes
	a, b := prefix{"c", "Pod", "a"}, prefix{"c", "Pod", "b"}
	ia := p.ref(a)
	if got := p.ref(a); got != ia {
		t.Fatalf("a again: %d, want %d", got, ia)
	}
	ib := p.ref(b)
	if ib == ia {
		t.Fatal("a and b share a number")
	}
	p.unref(ib) // b forgotten while it was the last handed out
	if _, ok := p.get(ib); ok {
		t.Fatal("b still interned")
	}
	if got := p.ref(prefix{}); got != ib {
		t.Fatalf("the empty prefix got %d, want b's freed %d", got, ib)
	}
	if got, _ := p.get(ib); got != (prefix{}) {
		t.Fatalf("number %d is %v, want the empty prefix", ib, got)
	}
	if got := p.ref(b); got == ib || got == ia {
		t.Fatalf("b again got %d, taken", got)
	}
	p.unref(ia)
	if got, ok := p.get(ia); !ok || got != a {
		t.Fatalf("a still referred to once: %v %v", got, ok)
	}
	p.unref(ia)
	if _, ok := p.get(ia); ok {
		t.Fatal("a still interned")
	}
	if len(p.ids) != 2 {
		t.Fatalf("%d interned, want 2", len(p.ids))
	}
}
