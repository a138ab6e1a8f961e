// Package held keeps the allocations a pool holds, in memory, in a compact
// form: the allocator's record of what is allocated, beside the free-space
// index of package ipam.
//
// A Table holds each allocation as a packed record in an arena of byte
// chunks, found through a tree of (address, place) ordered by address
// (package addrtree: a page of a list costs O(log n + page)); it interns
// the owners' cluster/kind/namespace prefixes, and finds an owner's address through a
// map of hashes. Neither the records nor the tree's items nor the map
// hold pointers, so the garbage collector has a few thousand objects to
// look at for a million allocations, not millions.
//
// A Table is not safe for concurrent use: the allocator holds the pool's
// lock around it.
package held

import (
	"fmt"
	"hash/maphash"
	"net/netip"
	"strings"
	"unsafe"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/internal/addrtree"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// key is an address as 128 bits (a table holds one family); an item's
// value is the ref of its record.
type (
	key  = addrtree.Key
	item = addrtree.Item
)

var keyOf = addrtree.KeyOf

// ownerKey is an owner as the table compares it: its interned prefix and
// its name (an allocation's uid is not part of the owner's identity).
type ownerKey struct {
	prefix uint32
	name   string
}

// Table holds the allocations of one pool.
type Table struct {
	pool  string
	is4   bool
	tree  addrtree.Tree
	arena arena
	// scratch is where a record is packed before it is copied in.
	scratch []byte

	prefixes prefixes
	// owners maps the hash of an owner key to its address. An owner
	// whose hash is another's is kept in overflow instead (32-bit hashes:
	// about a hundred owners of a million); a lookup looks there first,
	// and compares the record it finds through owners with the key it
	// asked for.
	owners   ownerLinks
	overflow map[ownerKey]key
	seed     maphash.Seed
	hash     func(ownerKey) uint32
	// clusters counts the allocations charged to each member cluster
	// (decide.ChargedCluster: an owner's cluster, or a clusterset VIP's
	// creator's), kept as records come and go, so a per-cluster quota
	// costs a lookup.
	clusters map[string]int
}

// New returns an empty table of pool, for addresses of one family;
// sizeHint is the number of allocations expected.
func New(pool string, is4 bool, sizeHint int) *Table {
	t := &Table{
		pool:   pool,
		is4:    is4,
		tree:   addrtree.New(),
		arena:  newArena(),
		owners: newOwnerLinks(is4, sizeHint),
		seed:   maphash.MakeSeed(),

		clusters: map[string]int{},
	}
	t.hash = func(o ownerKey) uint32 {
		h := maphash.Comparable(t.seed, o)
		return uint32(h ^ h>>32)
	}
	return t
}

// Len returns the number of allocations held.
func (t *Table) Len() int { return t.tree.Len() }

// ClusterLen returns the number of allocations charged to cluster: those
// of its owners and the clusterset VIPs its callers created.
func (t *Table) ClusterLen(cluster string) int { return t.clusters[cluster] }

// fits tells whether a can be held: an address of the table's family.
func (t *Table) fits(a netip.Addr) bool {
	return a.IsValid() && a.Zone() == "" && a.Is4() == t.is4
}

func (t *Table) addr(k key) netip.Addr { return k.Addr(t.is4) }

func (t *Table) find(a netip.Addr) (item, bool) {
	if !t.fits(a) {
		return item{}, false
	}
	return t.tree.Get(keyOf(a))
}

// Has tells whether a is allocated.
func (t *Table) Has(a netip.Addr) bool {
	_, ok := t.find(a)
	return ok
}

// Revision returns the revision of a's allocation.
func (t *Table) Revision(a netip.Addr) (int64, bool) {
	it, ok := t.find(a)
	if !ok {
		return 0, false
	}
	return t.arena.record(ref(it.Val)).revision(), true
}

// Get returns the allocation of a.
func (t *Table) Get(a netip.Addr) (store.Allocation, bool) {
	it, ok := t.find(a)
	if !ok {
		return store.Allocation{}, false
	}
	return t.decode(it), true
}

func (t *Table) decode(it item) store.Allocation {
	// A copy: what is returned outlives the chunk's place in the table.
	f, err := record(strings.Clone(string(t.arena.record(ref(it.Val))))).decode()
	if err != nil {
		// Records are only ever made by encode.
		panic(fmt.Sprintf("held: record of %s in pool %s: %v", t.addr(it.Key), t.pool, err))
	}
	p, _ := t.prefixes.get(f.prefix)
	return store.Allocation{
		Pool:       t.pool,
		Address:    t.addr(it.Key),
		Owner:      decide.Owner{Cluster: p.cluster, Kind: p.kind, Namespace: p.namespace, Name: f.name, UID: f.uid},
		CreateTime: f.create,
		RequestID:  f.requestID,
		Revision:   f.revision,

		CreatorCluster: f.creatorCluster(p.cluster),
	}
}

// creatorCluster is the creator's cluster of a record whose owner is of
// cluster.
func (f *fields) creatorCluster(cluster string) string {
	if f.sameCreator {
		return cluster
	}
	return f.creator
}

// creatorFields sets how f records a's creator.
func creatorFields(f *fields, a *store.Allocation) {
	if a.CreatorCluster != "" && a.CreatorCluster == a.Owner.Cluster {
		f.sameCreator = true
	} else {
		f.creator = a.CreatorCluster
	}
}

// Owned returns the address o's key (cluster, kind, namespace, name) holds.
func (t *Table) Owned(o decide.Owner) (netip.Addr, bool) {
	id, ok := t.prefixes.lookup(prefix{o.Cluster, o.Kind, o.Namespace})
	if !ok {
		return netip.Addr{}, false
	}
	k, ok := t.ownerAt(ownerKey{id, o.Name})
	if !ok {
		return netip.Addr{}, false
	}
	return t.addr(k), true
}

func (t *Table) ownerAt(o ownerKey) (key, bool) {
	if len(t.overflow) > 0 {
		if k, ok := t.overflow[o]; ok {
			return k, true
		}
	}
	k, ok := t.owners.get(t.hash(o))
	if !ok || !t.holds(k, o) {
		return key{}, false
	}
	return k, true
}

// holds tells whether the record at k belongs to owner o.
func (t *Table) holds(k key, o ownerKey) bool {
	it, ok := t.tree.Get(k)
	if !ok {
		return false
	}
	p, n := t.arena.record(ref(it.Val)).prefixAndName()
	return p == o.prefix && n == o.name
}

// Put records a, replacing any allocation of its address. It fails only
// for an address of another family.
func (t *Table) Put(a *store.Allocation) error {
	if !t.fits(a.Address) {
		return fmt.Errorf("held: address %s does not fit pool %s", a.Address, t.pool)
	}
	k := keyOf(a.Address)
	// One descent of the tree: the new record goes in, and the one it
	// replaces (still in the arena) is unlinked after. Its prefix is
	// counted before the old one's is dropped, so a prefix they share
	// stays interned.
	id := t.prefixes.ref(prefix{a.Owner.Cluster, a.Owner.Kind, a.Owner.Namespace})
	f := fields{revision: a.Revision, create: a.CreateTime, prefix: id, name: a.Owner.Name, uid: a.Owner.UID, requestID: a.RequestID}
	creatorFields(&f, a)
	t.scratch = appendRecord(t.scratch[:0], f)
	old, replaced := t.tree.Put(item{Key: k, Val: uint64(t.arena.add(k, unsafe.String(unsafe.SliceData(t.scratch), len(t.scratch))))})
	if replaced {
		t.unlink(old)
	}
	t.link(ownerKey{id, a.Owner.Name}, k)
	if c := decide.ChargedCluster(a.Owner, a.CreatorCluster); c != "" {
		t.clusters[c]++
	}
	if replaced {
		t.arena.drop(ref(old.Val))
		t.compact()
	}
	return nil
}

// Delete forgets the allocation of a, if any.
func (t *Table) Delete(a netip.Addr) bool {
	it, ok := t.find(a)
	if !ok {
		return false
	}
	t.unlink(it)
	t.tree.Delete(it.Key)
	t.arena.drop(ref(it.Val))
	t.compact()
	return true
}

// compactChunks bounds the work of one compaction: a few chunks, about a
// thousand records each, so a Put or Delete that triggers it stays short.
const compactChunks = 8

// compact moves the live records of the emptiest chunks to the current
// one when garbage has grown larger than what is live, and gives the
// emptied chunks up.
func (t *Table) compact() {
	if !t.arena.wasteful() {
		return
	}
	for _, c := range t.arena.victims(compactChunks) {
		t.arena.each(c, func(r ref, k key, rec record) {
			it, ok := t.tree.Get(k)
			if !ok || ref(it.Val) != r {
				return // dropped
			}
			t.tree.Put(item{Key: k, Val: uint64(t.arena.add(k, string(rec)))})
			t.arena.drop(r)
		})
		if t.arena.chunks[c] != nil && t.arena.live[c] == 0 {
			t.arena.release(c)
		}
	}
}

// link makes k the address of owner o, whose record is in the tree.
func (t *Table) link(o ownerKey, k key) {
	if _, ok := t.overflow[o]; ok {
		o.name = strings.Clone(o.name) // a map update stores the key too
		t.overflow[o] = k
		return
	}
	h := t.hash(o)
	if cur, ok := t.owners.get(h); ok && cur != k && !t.holds(cur, o) {
		// Another owner with the same hash.
		if t.overflow == nil {
			t.overflow = map[ownerKey]key{}
		}
		o.name = strings.Clone(o.name) // kept: not a slice of the caller's
		t.overflow[o] = k
		return
	}
	t.owners.set(h, k)
}

func (t *Table) linked(h uint32, k key) bool {
	v, ok := t.owners.get(h)
	return ok && v == k
}

// unlink drops what its record refers to: its owner's link, if the owner
// still holds it, and its prefix.
func (t *Table) unlink(it item) {
	p, n := t.arena.record(ref(it.Val)).prefixAndName()
	o := ownerKey{p, n}
	if v, ok := t.overflow[o]; ok {
		if v == it.Key {
			delete(t.overflow, o)
		}
	} else if h := t.hash(o); t.linked(h, it.Key) {
		t.owners.delete(h)
	}
	t.uncharge(t.prefixes.list[p].cluster, ref(it.Val))
	t.prefixes.unref(p)
}

// uncharge drops the charge of the record at r, whose owner is of
// cluster.
func (t *Table) uncharge(cluster string, r ref) {
	if cluster == "" {
		// A clusterset VIP: charged to its creator's cluster, if any.
		if cluster = t.arena.record(r).creator(); cluster == "" {
			return
		}
	}
	if t.clusters[cluster] > 1 {
		t.clusters[cluster]--
	} else {
		delete(t.clusters, cluster)
	}
}

// Ascend calls fn with each allocation from address from (all of them
// when from is the zero Addr) in address order, until fn returns false.
// The order of netip.Addr is kept: IPv4 before IPv6.
func (t *Table) Ascend(from netip.Addr, fn func(store.Allocation) bool) {
	t.ascend(from, func(it item) bool { return fn(t.decode(it)) })
}

// Addrs calls fn with each allocated address in order, until fn returns
// false.
func (t *Table) Addrs(fn func(netip.Addr) bool) {
	t.ascend(netip.Addr{}, func(it item) bool { return fn(t.addr(it.Key)) })
}

func (t *Table) ascend(from netip.Addr, fn func(item) bool) {
	switch {
	case !from.IsValid() || (from.Is4() && !t.is4):
		t.tree.Ascend(key{}, true, fn)
	case !from.Is4() && t.is4:
		// Every IPv4 address comes before from.
	default:
		t.tree.Ascend(keyOf(from.WithZone("")), false, fn)
	}
}

// View is a table as it was when Snapshot was called. It is read-only and
// safe to read from any number of goroutines while the table changes.
type View struct {
	t Table
}

// Snapshot returns a view of the table as it is now. It costs a copy of
// the index's list of leaves (a pointer and a key per 127 allocations) and
// of the interned prefixes: the leaves are shared, copy-on-write, so the
// table's later writes copy the leaves they touch, once.
func (t *Table) Snapshot() *View {
	v := &View{t: Table{pool: t.pool, is4: t.is4, tree: t.tree.Clone(), arena: t.arena.view()}}
	v.t.prefixes.list = append([]prefix(nil), t.prefixes.list...)
	v.t.prefixes.refs = append([]uint32(nil), t.prefixes.refs...)
	return v
}

// Len returns the number of allocations in the view.
func (v *View) Len() int { return v.t.Len() }

// Ascend calls fn with each allocation of the view from address from
// (all of them when from is the zero Addr) in address order, until fn
// returns false.
func (v *View) Ascend(from netip.Addr, fn func(store.Allocation) bool) { v.t.Ascend(from, fn) }
