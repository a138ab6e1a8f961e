package held

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// model is what a Table must behave like: a map by address, and a map by
// owner key whose latest Put wins and whose link goes when the allocation
// it points to goes.
type model struct {
	byAddr  map[netip.Addr]store.Allocation
	byOwner map[string]netip.Addr
}

func (m *model) put(a store.Allocation) {
	if old, ok := m.byAddr[a.Address]; ok {
		m.unlink(old)
	}
	m.byAddr[a.Address] = a
	m.byOwner[a.Owner.Key()] = a.Address
}

func (m *model) unlink(a store.Allocation) {
	if m.byOwner[a.Owner.Key()] == a.Address {
		delete(m.byOwner, a.Owner.Key())
	}
}

func (m *model) delete(addr netip.Addr) bool {
	old, ok := m.byAddr[addr]
	if ok {
		m.unlink(old)
		delete(m.byAddr, addr)
	}
	return ok
}

func TestTableFollowsModel(t *testing.T) {
	for _, tc := range []struct {
		name string
		is4  bool
		hash func(ownerKey) uint32
	}{
		{"v4", true, nil},
		{"v6", false, nil},
		// Every owner of a prefix has the same hash: the overflow path.
		{"v4 colliding", true, func(o ownerKey) uint32 { return o.prefix }},
		{"v6 all colliding", false, func(ownerKey) uint32 { return 42 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := New("p", tc.is4, 0)
			if tc.hash != nil {
				tab.hash = tc.hash
			}
			m := &model{byAddr: map[netip.Addr]store.Allocation{}, byOwner: map[string]netip.Addr{}}
			rng := rand.New(rand.NewPCG(1, 2))
			base := netip.MustParseAddr("10.0.0.0")
			if !tc.is4 {
				base = netip.MustParseAddr("fd00::")
			}
			addrAt := func(i int) netip.Addr {
				a := base
				for range i {
					a = a.Next()
				}
				return a
			}
			owner := func() decide.Owner {
				return decide.Owner{
					Cluster:   []string{"c0", "c1", ""}[rng.IntN(3)],
					Kind:      "Service",
					Namespace: fmt.Sprintf("ns%d", rng.IntN(3)),
					Name:      fmt.Sprintf("svc%d", rng.IntN(40)),
					UID:       fmt.Sprintf("%08x-3b9e-4c5d-8f7a-1b2c3d4e5f60", rng.IntN(1000)),
				}
			}
			for step := range 20000 {
				addr := addrAt(rng.IntN(64))
				switch rng.IntN(3) {
				case 0, 1:
					a := store.Allocation{Pool: "p", Address: addr, Owner: owner(), CreateTime: time.Unix(int64(step), int64(step)).UTC(), Revision: int64(step + 1)}
					// Creators: none (fleet), the owner's cluster, another.
					switch rng.IntN(3) {
					case 1:
						a.CreatorCluster = a.Owner.Cluster
					case 2:
						a.CreatorCluster = []string{"c1", "c2"}[rng.IntN(2)]
					}
					if rng.IntN(4) == 0 {
						a.RequestID = fmt.Sprintf("req-%d", step)
					}
					if err := tab.Put(&a); err != nil {
						t.Fatal(err)
					}
					m.put(a)
				case 2:
					if got, want := tab.Delete(addr), m.delete(addr); got != want {
						t.Fatalf("step %d: Delete(%s) = %v, want %v", step, addr, got, want)
					}
				}
				if step%97 == 0 || step > 19900 {
					check(t, tab, m)
				}
			}
		})
	}
}

// TestTableChargesVIPsToCreators: a clusterset VIP counts against the
// cluster that created it, until it is released; an owner of a cluster
// against that cluster, whoever created it; a fleet caller's VIP against
// none.
func TestTableChargesVIPsToCreators(t *testing.T) {
	tab := New("p", true, 0)
	vip := func(name string) decide.Owner {
		return decide.Owner{Kind: "ServiceImport", Namespace: "ns", Name: name}
	}
	put := func(addr string, o decide.Owner, creator string) {
		t.Helper()
		a := store.Allocation{Pool: "p", Address: netip.MustParseAddr(addr), Owner: o, CreatorCluster: creator, Revision: 1}
		if err := tab.Put(&a); err != nil {
			t.Fatal(err)
		}
		if got, _ := tab.Get(a.Address); got.CreatorCluster != creator {
			t.Fatalf("Get(%s).CreatorCluster = %q, want %q", addr, got.CreatorCluster, creator)
		}
	}
	counts := func(want map[string]int) {
		t.Helper()
		for c, n := range want {
			if got := tab.ClusterLen(c); got != n {
				t.Fatalf("ClusterLen(%q) = %d, want %d", c, got, n)
			}
		}
	}
	put("10.0.0.1", vip("a"), "c")
	put("10.0.0.2", vip("b"), "c")
	put("10.0.0.3", vip("f"), "")
	put("10.0.0.4", decide.Owner{Cluster: "a", Kind: "Pod", Namespace: "ns", Name: "p"}, "")
	put("10.0.0.5", decide.Owner{Cluster: "a", Kind: "Pod", Namespace: "ns", Name: "q"}, "a")
	counts(map[string]int{"c": 2, "a": 2, "": 0})
	// A new incarnation keeps its creator: the charge stays where it was.
	put("10.0.0.1", vip("a"), "c")
	counts(map[string]int{"c": 2})
	tab.Delete(netip.MustParseAddr("10.0.0.2"))
	tab.Delete(netip.MustParseAddr("10.0.0.3"))
	counts(map[string]int{"c": 1, "a": 2})
	tab.Delete(netip.MustParseAddr("10.0.0.1"))
	if _, ok := tab.clusters["c"]; ok {
		t.Fatal("a cluster charged nothing is still counted")
	}
}

func check(t *testing.T, tab *Table, m *model) {
	t.Helper()
	if tab.Len() != len(m.byAddr) {
		t.Fatalf("Len = %d, want %d", tab.Len(), len(m.byAddr))
	}
	for addr, want := range m.byAddr {
		got, ok := tab.Get(addr)
		if !ok || got != want {
			t.Fatalf("Get(%s) = %+v %v, want %+v", addr, got, ok, want)
		}
		if rev, ok := tab.Revision(addr); !ok || rev != want.Revision {
			t.Fatalf("Revision(%s) = %d %v, want %d", addr, rev, ok, want.Revision)
		}
		gotAddr, ok := tab.Owned(want.Owner)
		wantAddr, wantOK := m.byOwner[want.Owner.Key()]
		if ok != wantOK || gotAddr != wantAddr {
			t.Fatalf("Owned(%s) = %s %v, want %s %v", want.Owner.Key(), gotAddr, ok, wantAddr, wantOK)
		}
	}
	total := 0
	for _, c := range tab.arena.chunks {
		total += len(c)
	}
	if tab.arena.used < 0 || tab.arena.garbage < 0 || total != tab.arena.used+tab.arena.garbage {
		t.Fatalf("arena: %d bytes in chunks, %d used, %d garbage", total, tab.arena.used, tab.arena.garbage)
	}
	if total > 2*tab.arena.used+3*maxChunk {
		t.Fatalf("arena: %d bytes in chunks for %d used: not compacted", total, tab.arena.used)
	}
	if tab.owners.len()+len(tab.overflow) != len(m.byOwner) {
		t.Fatalf("%d owner links (%d overflowing), want %d", tab.owners.len()+len(tab.overflow), len(tab.overflow), len(m.byOwner))
	}
	var got []netip.Addr
	tab.Addrs(func(a netip.Addr) bool { got = append(got, a); return true })
	want := slices.SortedFunc(func(yield func(netip.Addr) bool) {
		for a := range m.byAddr {
			if !yield(a) {
				return
			}
		}
	}, netip.Addr.Compare)
	if !slices.Equal(got, want) {
		t.Fatalf("Addrs = %v, want %v", got, want)
	}
	perCluster := map[string]int{}
	for _, a := range m.byAddr {
		// Charged to the owner's cluster, or to a VIP's creator's.
		if c := decide.ChargedCluster(a.Owner, a.CreatorCluster); c != "" {
			perCluster[c]++
		}
	}
	if got := tab.ClusterLen(""); got != 0 {
		t.Fatalf("ClusterLen(\"\") = %d: nothing is charged to no cluster", got)
	}
	for c, n := range perCluster {
		if got := tab.ClusterLen(c); got != n {
			t.Fatalf("ClusterLen(%q) = %d, want %d", c, got, n)
		}
	}
	if len(tab.clusters) != len(perCluster) {
		t.Fatalf("counts of %d clusters, want %d", len(tab.clusters), len(perCluster))
	}
	live := 0
	for _, r := range tab.prefixes.refs {
		if r > 0 {
			live++
		}
	}
	if live != len(tab.prefixes.ids) {
		t.Fatalf("%d prefixes referred to, %d interned", live, len(tab.prefixes.ids))
	}
}

func TestTableAscendFrom(t *testing.T) {
	tab := New("p", true, 0)
	for _, s := range []string{"10.0.0.9", "10.0.0.1", "10.0.0.5"} {
		a := store.Allocation{Pool: "p", Address: netip.MustParseAddr(s), Owner: decide.Owner{Kind: "Pod", Name: s}}
		if err := tab.Put(&a); err != nil {
			t.Fatal(err)
		}
	}
	list := func(from string) []string {
		var f netip.Addr
		if from != "" {
			f = netip.MustParseAddr(from)
		}
		var out []string
		tab.Ascend(f, func(a store.Allocation) bool { out = append(out, a.Address.String()); return len(out) < 2 })
		return out
	}
	for _, tc := range []struct {
		from string
		want []string
	}{
		{"", []string{"10.0.0.1", "10.0.0.5"}},
		{"10.0.0.5", []string{"10.0.0.5", "10.0.0.9"}},
		{"10.0.0.6", []string{"10.0.0.9"}},
		{"::1", nil}, // every IPv4 address is before any IPv6 one
		{"1.2.3.4", []string{"10.0.0.1", "10.0.0.5"}},
	} {
		if got := list(tc.from); !slices.Equal(got, tc.want) {
			t.Errorf("Ascend from %q = %v, want %v", tc.from, got, tc.want)
		}
	}
	v6 := New("p6", false, 0)
	a := store.Allocation{Pool: "p6", Address: netip.MustParseAddr("fd00::1")}
	if err := v6.Put(&a); err != nil {
		t.Fatal(err)
	}
	n := 0
	v6.Ascend(netip.MustParseAddr("10.0.0.1"), func(store.Allocation) bool { n++; return true })
	if n != 1 {
		t.Errorf("an IPv6 table ascended from an IPv4 address gave %d allocations, want 1", n)
	}
}

func TestTableRefusesOtherFamily(t *testing.T) {
	tab := New("p", true, 0)
	a := store.Allocation{Pool: "p", Address: netip.MustParseAddr("fd00::1")}
	if err := tab.Put(&a); err == nil {
		t.Fatal("an IPv4 table took an IPv6 address")
	}
	if tab.Len() != 0 || tab.Has(a.Address) {
		t.Fatal("the refused address is held")
	}
	if _, ok := New("p6", false, 0).Get(netip.MustParseAddr("10.0.0.1")); ok {
		t.Fatal("an IPv6 table found an IPv4 address")
	}
}

// BenchmarkTableHeap reports the heap a table of n allocations keeps, per
// allocation: Kubernetes-like owners (a UUID each, names of 20-odd
// characters, a few namespaces).
func BenchmarkTableHeap(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				before := heapInUse()
				tab := New("p", true, 0)
				addr := netip.MustParseAddr("10.0.0.1")
				now := time.Now().UTC()
				for i := range n {
					a := store.Allocation{Pool: "p", Address: addr, CreateTime: now, Revision: int64(i + 1), Owner: decide.Owner{
						Cluster: "east", Kind: "Service", Namespace: fmt.Sprintf("team-%d", i%7),
						Name: fmt.Sprintf("frontend-%08d", i), UID: fmt.Sprintf("%08x-3b9e-4c5d-8f7a-1b2c3d4e5f60", i),
					}}
					if err := tab.Put(&a); err != nil {
						b.Fatal(err)
					}
					addr = addr.Next()
				}
				b.ReportMetric(float64(heapInUse()-before)/float64(n), "heap-B/alloc")
				if tab.Len() != n {
					b.Fatal(tab.Len())
				}
			}
		})
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func TestSnapshotKeepsItsState(t *testing.T) {
	tab := New("p", true, 0)
	put := func(addr, ns, name string, rev int64) {
		t.Helper()
		a := store.Allocation{Pool: "p", Address: netip.MustParseAddr(addr), Owner: decide.Owner{Cluster: "c", Kind: "Pod", Namespace: ns, Name: name}, Revision: rev}
		if err := tab.Put(&a); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 500 {
		ns := fmt.Sprintf("ns%d", i%5)
		if i < 2 {
			ns = "solo" // gone from the table below, its number reused
		}
		put(fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), ns, fmt.Sprintf("pod%d", i), int64(i+1))
	}
	var want []store.Allocation
	tab.Ascend(netip.Addr{}, func(a store.Allocation) bool { want = append(want, a); return true })
	v := tab.Snapshot()

	// Change everything the view refers to: delete, replace, and let a
	// prefix go and its number be used again by a new one.
	for i := range 500 {
		a := netip.MustParseAddr(fmt.Sprintf("10.0.%d.%d", i/250, i%250+1))
		switch i % 3 {
		case 0:
			tab.Delete(a)
		case 1:
			put(a.String(), "other", fmt.Sprintf("new%d", i), int64(1000+i))
		}
	}
	put("10.0.9.9", "late", "x", 5000)
	// Enough churn for the arena to compact, moving records the view
	// still refers to.
	for i := range 20000 {
		put(fmt.Sprintf("10.0.%d.%d", 5+i%3, 1+i%200), "churn", fmt.Sprintf("c%d", i), int64(6000+i))
	}

	var got []store.Allocation
	v.Ascend(netip.Addr{}, func(a store.Allocation) bool { got = append(got, a); return true })
	if v.Len() != len(want) || !slices.Equal(got, want) {
		t.Fatalf("the view changed with the table: %d allocations, want %d", len(got), len(want))
	}
}

// TestArenaCompacts: deleting most of a large table leaves a few records
// in every chunk; the table moves them together and gives the chunks up,
// and every record still reads back.
func TestArenaCompacts(t *testing.T) {
	tab := New("p", true, 0)
	addr := netip.MustParseAddr("10.0.0.1")
	var all []store.Allocation
	for i := range 20000 {
		a := store.Allocation{Pool: "p", Address: addr, Revision: int64(i + 1), Owner: decide.Owner{Kind: "Pod", Namespace: "ns", Name: fmt.Sprintf("pod-%d", i), UID: fmt.Sprintf("%08x-3b9e-4c5d-8f7a-1b2c3d4e5f60", i)}}
		require(t, tab.Put(&a) == nil, "put")
		all = append(all, a)
		addr = addr.Next()
	}
	for i, a := range all {
		if i%50 != 0 {
			tab.Delete(a.Address)
		}
	}
	total := 0
	for _, c := range tab.arena.chunks {
		total += len(c)
	}
	t.Logf("%d bytes in %d chunks for %d live", total, len(tab.arena.chunks)-len(tab.arena.free), tab.arena.used)
	require(t, total <= 3*tab.arena.used+maxChunk, "%d bytes in chunks for %d live: not compacted", total, tab.arena.used)
	for i, a := range all {
		got, ok := tab.Get(a.Address)
		require(t, ok == (i%50 == 0), "Get(%s) found=%v", a.Address, ok)
		if ok {
			require(t, got == a, "Get(%s) = %+v, want %+v", a.Address, got, a)
			back, ok := tab.Owned(a.Owner)
			require(t, ok && back == a.Address, "Owned(%s) = %s %v", a.Owner.Name, back, ok)
		}
	}
}

func require(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Fatalf(format, args...)
	}
}

// TestSnapshotsReadWhileTableChanges: views are read from other
// goroutines while the table goes on changing (the race detector runs
// this package's tests); each reads what the table held when it was taken.
func TestSnapshotsReadWhileTableChanges(t *testing.T) {
	tab := New("p", true, 0)
	put := func(i, rev int) {
		a := store.Allocation{Pool: "p", Address: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), Owner: decide.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: fmt.Sprint("pod", rev)}, Revision: int64(rev)}
		if err := tab.Put(&a); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3000 {
		put(i, i+1)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 80)
	check := func(round int, v *View, want []store.Allocation) {
		var got []store.Allocation
		v.Ascend(netip.Addr{}, func(a store.Allocation) bool { got = append(got, a); return true })
		if !slices.Equal(got, want) {
			errs <- fmt.Errorf("round %d: the view read %d allocations, want the %d it was taken with", round, len(got), len(want))
		}
	}
	views := make([]*View, 40)
	wants := make([][]store.Allocation, 40)
	rev := 10_000
	for round := range 40 {
		tab.Ascend(netip.Addr{}, func(a store.Allocation) bool { wants[round] = append(wants[round], a); return true })
		views[round] = tab.Snapshot()
		wg.Add(1)
		go func() {
			defer wg.Done()
			check(round, views[round], wants[round])
		}()
		for j := range 300 {
			i := (round*131 + j*17) % 4000
			rev++
			if j%3 == 0 {
				tab.Delete(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}))
			} else {
				put(i, rev)
			}
		}
	}
	wg.Wait()
	// And once the table is done with its changes.
	for round := range views {
		check(round, views[round], wants[round])
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
