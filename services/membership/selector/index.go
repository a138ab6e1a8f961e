package selector

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"unique"
)

// ServiceKey names a Service.
type ServiceKey struct {
	Namespace string
	Name      string
}

// WorkloadKey names a workload. Kind keeps apart objects of different types
// that share a name in one namespace, such as a Pod and an ExternalWorkload.
type WorkloadKey struct {
	Namespace string
	Kind      string
	Name      string
}

// Stats counts what an Index holds.
type Stats struct {
	Namespaces int
	Services   int
	Workloads  int
	// Pairs is the number of distinct (namespace, key=value) pairs in use.
	Pairs int
}

// Option configures an Index.
type Option func(*Index)

// WithIgnoredNamespaces makes the Index disregard Services and workloads of
// the given namespaces: they are never stored, selected or returned. Nothing
// is ignored by default, kube-system included.
func WithIgnoredNamespaces(namespaces ...string) Option {
	return func(x *Index) {
		for _, ns := range namespaces {
			x.ignored[ns] = struct{}{}
		}
	}
}

// Index is an inverted selector index over Services and workloads. It is safe
// for concurrent use: lookups share a read lock, updates take the write lock.
type Index struct {
	mu         sync.RWMutex
	ignored    map[string]struct{}
	namespaces map[string]*namespace

	pairs     []pair
	freePairs []uint32

	services     []service
	freeServices []uint32

	workloads     []workload
	freeWorkloads []uint32
}

type namespace struct {
	name string
	// pairs maps a pair's key (see pairKey) to its id.
	pairs     map[string]uint32
	services  map[string]uint32
	workloads map[workloadName]uint32
}

type workloadName struct {
	kind, name string
}

type pair struct {
	ns *namespace
	// key is the pair's key in ns.pairs.
	key string
	// anchored holds the Services filed under this pair; each Service is
	// filed under exactly one of its pairs.
	anchored []anchorEntry
	// selectors counts the Services whose selector contains this pair; with
	// members it decides when the pair can be forgotten.
	selectors int
	// members holds the workloads that carry this pair, in no order.
	members []uint32
}

// anchorEntry is a Service filed under a pair, with the rest of its selector
// at hand so that checking a candidate does not have to visit the Service.
type anchorEntry struct {
	service uint32
	// others holds the selector's other pairs in ascending order when there
	// are at most len(others) of them; otherwise n is manyOthers and the
	// Service's sel is checked instead.
	others [3]uint32
	n      uint8
}

const manyOthers = 255

type service struct {
	ns   *namespace
	name string
	// sel holds the selector's pair ids in ascending order.
	sel       []uint32
	anchor    uint32
	anchorPos uint32
}

type workload struct {
	ns   *namespace
	kind string
	name string
	// refs holds the workload's pairs in ascending pair order, each with the
	// workload's position in that pair's members list so it can be removed in
	// constant time.
	refs []pairRef
}

type pairRef struct {
	pair uint32
	pos  uint32
}

// New returns an empty Index.
func New(opts ...Option) *Index {
	x := &Index{
		ignored:    map[string]struct{}{},
		namespaces: map[string]*namespace{},
	}
	for _, o := range opts {
		o(x)
	}
	return x
}

// Ignored reports whether the Index disregards the namespace.
func (x *Index) Ignored(namespace string) bool {
	_, ok := x.ignored[namespace]
	return ok
}

// SetService records the selector of a Service, replacing any previous one. A
// nil or empty selector selects nothing, as for a Service without a selector,
// so the Service is dropped from the Index.
func (x *Index) SetService(namespace, name string, selector map[string]string) {
	if x.Ignored(namespace) {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(selector) == 0 {
		x.deleteServiceLocked(namespace, name)
		return
	}
	n := x.namespaceFor(namespace)
	ids := make([]uint32, 0, len(selector))
	for k, v := range selector {
		ids = append(ids, x.internPair(n, k, v))
	}
	slices.Sort(ids)

	sid, ok := n.services[name]
	if !ok {
		sid = x.newService(n, name)
	} else if slices.Equal(x.services[sid].sel, ids) {
		return
	}
	// Count the new pairs before the old ones are let go, so a pair in both
	// is never forgotten and reissued in between.
	for _, p := range ids {
		x.pairs[p].selectors++
	}
	if ok {
		x.detachService(sid)
	}
	x.services[sid].sel = ids
	x.anchorService(sid)
}

// DeleteService forgets a Service. Deleting an unknown Service does nothing.
func (x *Index) DeleteService(namespace, name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.deleteServiceLocked(namespace, name)
}

// SetWorkload records the labels of a workload, replacing any previous ones.
func (x *Index) SetWorkload(key WorkloadKey, labels map[string]string) {
	if x.Ignored(key.Namespace) {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	n := x.namespaceFor(key.Namespace)
	ids := make([]uint32, 0, len(labels))
	for k, v := range labels {
		ids = append(ids, x.internPair(n, k, v))
	}
	slices.Sort(ids)

	wn := workloadName{kind: key.Kind, name: key.Name}
	wid, ok := n.workloads[wn]
	if !ok {
		wid = x.newWorkload(n, key)
	}
	x.relabelWorkload(wid, ids)
}

// DeleteWorkload forgets a workload. Deleting an unknown workload does
// nothing.
func (x *Index) DeleteWorkload(key WorkloadKey) {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := x.namespaces[key.Namespace]
	if n == nil {
		return
	}
	wn := workloadName{kind: key.Kind, name: key.Name}
	wid, ok := n.workloads[wn]
	if !ok {
		return
	}
	x.relabelWorkload(wid, nil)
	delete(n.workloads, wn)
	x.workloads[wid] = workload{}
	x.freeWorkloads = append(x.freeWorkloads, wid)
	x.dropNamespaceIfEmpty(n)
}

// Select returns the Services of the namespace that select a workload with
// these labels, sorted by name: those whose every selector pair is among the
// labels.
func (x *Index) Select(namespace string, labels map[string]string) []ServiceKey {
	if len(labels) == 0 || x.Ignored(namespace) {
		return nil
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := x.namespaces[namespace]
	if n == nil {
		return nil
	}
	// Labels rarely number more than a dozen and pairs rarely run past a
	// hundred bytes; the buffers keep the common case off the heap.
	var buf [16]uint32
	var kbuf [128]byte
	have := buf[:0]
	for k, v := range labels {
		if p, ok := n.pairs[string(pairKey(kbuf[:0], k, v))]; ok {
			have = append(have, p)
		}
	}
	return x.selectLocked(n, have, false)
}

// ServicesFor returns the Services that select a stored workload, sorted by
// name, or nil when the workload is unknown.
func (x *Index) ServicesFor(key WorkloadKey) []ServiceKey {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := x.namespaces[key.Namespace]
	if n == nil {
		return nil
	}
	wid, ok := n.workloads[workloadName{kind: key.Kind, name: key.Name}]
	if !ok {
		return nil
	}
	refs := x.workloads[wid].refs
	var buf [16]uint32
	have := buf[:0]
	for _, r := range refs {
		have = append(have, r.pair)
	}
	return x.selectLocked(n, have, true)
}

// Members returns the stored workloads that a Service selects, sorted by name
// and kind, or nil when the Service is unknown or has no selector.
func (x *Index) Members(namespace, name string) []WorkloadKey {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := x.namespaces[namespace]
	if n == nil {
		return nil
	}
	sid, ok := n.services[name]
	if !ok {
		return nil
	}
	sel := x.services[sid].sel
	shortest := x.pairs[sel[0]].members
	for _, p := range sel[1:] {
		if m := x.pairs[p].members; len(m) < len(shortest) {
			shortest = m
		}
	}
	var out []WorkloadKey
	for _, wid := range shortest {
		w := &x.workloads[wid]
		if carriesAll(w.refs, sel) {
			out = append(out, WorkloadKey{Namespace: namespace, Kind: w.kind, Name: w.name})
		}
	}
	slices.SortFunc(out, func(a, b WorkloadKey) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Kind, b.Kind))
	})
	return out
}

// Stats reports how much the Index holds.
func (x *Index) Stats() Stats {
	x.mu.RLock()
	defer x.mu.RUnlock()
	s := Stats{Namespaces: len(x.namespaces)}
	for _, n := range x.namespaces {
		s.Services += len(n.services)
		s.Workloads += len(n.workloads)
		s.Pairs += len(n.pairs)
	}
	return s
}

// selectLocked returns the Services whose selector pairs are all in have.
// have is sorted when sorted is set, which allows a merge instead of a search.
func (x *Index) selectLocked(n *namespace, have []uint32, sorted bool) []ServiceKey {
	// Matches are gathered as ids first so that the answer is allocated once,
	// at its final size.
	var buf [16]uint32
	found := buf[:0]
	for _, p := range have {
		for i := range x.pairs[p].anchored {
			e := &x.pairs[p].anchored[i]
			want := e.others[:min(e.n, uint8(len(e.others)))]
			if e.n == manyOthers {
				want = x.services[e.service].sel
			}
			if containsAll(have, want, sorted) {
				found = append(found, e.service)
			}
		}
	}
	if len(found) == 0 {
		return nil
	}
	out := make([]ServiceKey, len(found))
	for i, sid := range found {
		out[i] = ServiceKey{Namespace: n.name, Name: x.services[sid].name}
	}
	slices.SortFunc(out, compareServiceKeys)
	return out
}

// containsAll reports whether every id of want (ascending) is in have.
func containsAll(have, want []uint32, sorted bool) bool {
	if !sorted {
		for _, w := range want {
			if !slices.Contains(have, w) {
				return false
			}
		}
		return true
	}
	i := 0
	for _, w := range want {
		for i < len(have) && have[i] < w {
			i++
		}
		if i == len(have) || have[i] != w {
			return false
		}
	}
	return true
}

// carriesAll reports whether refs (ascending) hold every pair of want
// (ascending).
func carriesAll(refs []pairRef, want []uint32) bool {
	i := 0
	for _, w := range want {
		for i < len(refs) && refs[i].pair < w {
			i++
		}
		if i == len(refs) || refs[i].pair != w {
			return false
		}
	}
	return true
}

func compareServiceKeys(a, b ServiceKey) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// pairKey appends the key under which a pair is found in its namespace: the
// length of the label key, the key and the value, which no two pairs share
// whatever their characters. One string rather than two keeps a lookup to one
// hash and one comparison.
func pairKey(buf []byte, key, value string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(key)))
	buf = append(buf, key...)
	return append(buf, value...)
}

func (x *Index) namespaceFor(name string) *namespace {
	n := x.namespaces[name]
	if n == nil {
		n = &namespace{
			name:      strings.Clone(name),
			pairs:     map[string]uint32{},
			services:  map[string]uint32{},
			workloads: map[workloadName]uint32{},
		}
		x.namespaces[n.name] = n
	}
	return n
}

func (x *Index) dropNamespaceIfEmpty(n *namespace) {
	if len(n.pairs) == 0 && len(n.services) == 0 && len(n.workloads) == 0 {
		delete(x.namespaces, n.name)
	}
}

// internPair returns the id of a pair, creating it unreferenced if needed.
// The caller must reference it (or release it) before letting go of the lock.
func (x *Index) internPair(n *namespace, key, value string) uint32 {
	var kbuf [128]byte
	b := pairKey(kbuf[:0], key, value)
	if p, ok := n.pairs[string(b)]; ok {
		return p
	}
	pk := string(b) // a copy: the index never holds the caller's memory
	var id uint32
	if k := len(x.freePairs); k > 0 {
		id = x.freePairs[k-1]
		x.freePairs = x.freePairs[:k-1]
	} else {
		id = uint32(len(x.pairs))
		x.pairs = append(x.pairs, pair{})
	}
	x.pairs[id] = pair{ns: n, key: pk}
	n.pairs[pk] = id
	return id
}

// releasePair forgets a pair that nothing refers to any more.
func (x *Index) releasePair(id uint32) {
	p := &x.pairs[id]
	if p.selectors > 0 || len(p.members) > 0 {
		return
	}
	n := p.ns
	delete(n.pairs, p.key)
	*p = pair{}
	x.freePairs = append(x.freePairs, id)
	x.dropNamespaceIfEmpty(n)
}

func (x *Index) newService(n *namespace, name string) uint32 {
	var id uint32
	if k := len(x.freeServices); k > 0 {
		id = x.freeServices[k-1]
		x.freeServices = x.freeServices[:k-1]
	} else {
		id = uint32(len(x.services))
		x.services = append(x.services, service{})
	}
	x.services[id] = service{ns: n, name: strings.Clone(name)}
	n.services[x.services[id].name] = id
	return id
}

// anchorService files a Service under the rarest pair of its selector: the
// one fewest Services select on, then the one with the fewest Services filed
// under it. A pair many selectors share (tier=frontend) is likely carried by
// many workloads too, while a rare one (app=checkout) singles out the few
// Services worth checking.
func (x *Index) anchorService(sid uint32) {
	s := &x.services[sid]
	best := s.sel[0]
	for _, p := range s.sel[1:] {
		a, b := &x.pairs[p], &x.pairs[best]
		if a.selectors < b.selectors || (a.selectors == b.selectors && len(a.anchored) < len(b.anchored)) {
			best = p
		}
	}
	s.anchor = best
	s.anchorPos = uint32(len(x.pairs[best].anchored))
	e := anchorEntry{service: sid, n: manyOthers}
	if len(s.sel)-1 <= len(e.others) {
		e.n = 0
		for _, p := range s.sel {
			if p != best {
				e.others[e.n] = p
				e.n++
			}
		}
	}
	x.pairs[best].anchored = append(x.pairs[best].anchored, e)
}

// detachService takes a Service out of its anchor list and drops its
// references to its selector pairs.
func (x *Index) detachService(sid uint32) {
	s := &x.services[sid]
	p := &x.pairs[s.anchor]
	last := p.anchored[len(p.anchored)-1]
	p.anchored[s.anchorPos] = last
	x.services[last.service].anchorPos = s.anchorPos
	p.anchored = shrink(p.anchored[:len(p.anchored)-1])
	for _, id := range s.sel {
		x.pairs[id].selectors--
		x.releasePair(id)
	}
	s.sel = nil
}

func (x *Index) deleteServiceLocked(namespace, name string) {
	n := x.namespaces[namespace]
	if n == nil {
		return
	}
	sid, ok := n.services[name]
	if !ok {
		return
	}
	x.detachService(sid)
	delete(n.services, name)
	x.services[sid] = service{}
	x.freeServices = append(x.freeServices, sid)
	x.dropNamespaceIfEmpty(n)
}

func (x *Index) newWorkload(n *namespace, key WorkloadKey) uint32 {
	var id uint32
	if k := len(x.freeWorkloads); k > 0 {
		id = x.freeWorkloads[k-1]
		x.freeWorkloads = x.freeWorkloads[:k-1]
	} else {
		id = uint32(len(x.workloads))
		x.workloads = append(x.workloads, workload{})
	}
	w := workload{ns: n, kind: unique.Make(key.Kind).Value(), name: strings.Clone(key.Name)}
	x.workloads[id] = w
	n.workloads[workloadName{kind: w.kind, name: w.name}] = id
	return id
}

// relabelWorkload moves a workload from its current pairs to ids (ascending),
// touching only the pairs that differ.
func (x *Index) relabelWorkload(wid uint32, ids []uint32) {
	old := x.workloads[wid].refs
	if len(old) == len(ids) {
		same := true
		for i := range ids {
			if old[i].pair != ids[i] {
				same = false
				break
			}
		}
		if same {
			return
		}
	}
	refs := make([]pairRef, 0, len(ids))
	var gone []uint32
	i, j := 0, 0
	for i < len(old) || j < len(ids) {
		switch {
		case j == len(ids) || (i < len(old) && old[i].pair < ids[j]):
			x.removeMember(old[i], wid)
			gone = append(gone, old[i].pair)
			i++
		case i == len(old) || ids[j] < old[i].pair:
			p := &x.pairs[ids[j]]
			refs = append(refs, pairRef{pair: ids[j], pos: uint32(len(p.members))})
			p.members = append(p.members, wid)
			j++
		default:
			refs = append(refs, old[i])
			i++
			j++
		}
	}
	if len(refs) == 0 {
		refs = nil
	}
	x.workloads[wid].refs = refs
	for _, p := range gone {
		x.releasePair(p)
	}
}

// removeMember takes a workload out of a pair's members list by moving the
// last member into its place.
func (x *Index) removeMember(r pairRef, wid uint32) {
	p := &x.pairs[r.pair]
	last := p.members[len(p.members)-1]
	if last != wid {
		p.members[r.pos] = last
		lrefs := x.workloads[last].refs
		k, _ := slices.BinarySearchFunc(lrefs, r.pair, func(a pairRef, t uint32) int { return cmp.Compare(a.pair, t) })
		lrefs[k].pos = r.pos
	}
	p.members = shrink(p.members[:len(p.members)-1])
}

// shrink gives back the memory of a list that lost most of its entries, so a
// label that once had many members does not hold on to their room forever.
func shrink[E any](s []E) []E {
	if cap(s) >= 64 && len(s) < cap(s)/4 {
		return append(make([]E, 0, 2*len(s)), s...)
	}
	if len(s) == 0 {
		return nil
	}
	return s
}
