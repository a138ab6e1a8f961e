package etcd

import (
	"slices"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// A plan is the etcd writes of one store.Txn. etcd refuses a transaction
// that writes a key twice or puts a key inside a range it deletes, so the
// plan keeps only the net effect of the ops on each key, in the order of
// the ops: a later put replaces an earlier put or delete of its key (a
// range delete is split around it), and a later delete drops the earlier
// puts it covers. A watcher therefore sees the net change of each key per
// commit: an allocation put and deleted by the same commit makes no event.
type plan struct {
	writes []write
	// at is where each key written alone sits in writes, once there are
	// indexFrom of them and while the plan deletes no range: a later
	// write of the key finds the one it replaces without a scan, so a txn
	// of n ops plans in O(n), not O(n²). Replaced writes are marked dead
	// and dropped once (live).
	at     map[string]int
	dead   int
	ranges bool
}

type write struct {
	del   bool
	dead  bool
	key   string
	end   string // range end of a delete; "" deletes key alone
	value string
	lease clientv3.LeaseID // of a put; 0: none
}

// covers reports whether w writes key: a put of key, or a delete of key
// or of a range holding it.
func (w write) covers(key string) bool {
	if w.end == "" {
		return key == w.key
	}
	return key >= w.key && key < w.end
}

func (p *plan) put(key, value string) { p.putLease(key, value, 0) }

// putLease puts key attached to lease (0: none), so etcd deletes it when
// the lease expires.
func (p *plan) putLease(key, value string, lease clientv3.LeaseID) {
	if p.ranges {
		p.putAmongRanges(key, value, lease)
		return
	}
	// A key the plan has written already: that write goes, and this one
	// comes last, as if the earlier one had never been.
	p.drop(key)
	p.add(write{key: key, value: value, lease: lease})
}

// putAmongRanges is putLease once the plan deletes a range, which a put
// may have to split: [start, key) and (key, end).
func (p *plan) putAmongRanges(key, value string, lease clientv3.LeaseID) {
	out := p.live()[:0:0]
	for _, w := range p.live() {
		switch {
		case !w.del && w.key == key:
			continue
		case w.del && w.covers(key):
			if w.end == "" {
				continue
			}
			if w.key < key {
				out = append(out, write{del: true, key: w.key, end: key})
			}
			if after := key + "\x00"; after < w.end {
				out = append(out, write{del: true, key: after, end: w.end})
			}
			continue
		}
		out = append(out, w)
	}
	p.writes = append(out, write{key: key, value: value, lease: lease})
}

// del deletes key, or with end != "" the range [key, end).
func (p *plan) del(key, end string) {
	d := write{del: true, key: key, end: end}
	if end == "" && !p.ranges {
		p.drop(key) // a put of key, or the same delete again: the later one stays
		p.add(d)
		return
	}
	out := p.live()[:0:0]
	for _, w := range p.live() {
		if !w.del && d.covers(w.key) {
			continue
		}
		if w.del && w.key == d.key && w.end == d.end {
			continue // the same delete again: keep the later one
		}
		out = append(out, w)
	}
	p.writes = append(out, d)
	p.ranges, p.at = p.ranges || end != "", nil
}

// indexFrom is the number of writes from which a plan indexes them by
// key: below it a scan is cheaper than a map (a commit of one allocation
// plans four writes).
const indexFrom = 16

// find returns where the live write of key alone sits, or -1 (no range
// deleted).
func (p *plan) find(key string) int {
	if p.at != nil {
		if i, ok := p.at[key]; ok {
			return i
		}
		return -1
	}
	for i := range p.writes {
		if w := &p.writes[i]; !w.dead && w.key == key {
			return i
		}
	}
	return -1
}

// drop marks the write of key alone, if any, dead (no range deleted).
func (p *plan) drop(key string) {
	if i := p.find(key); i >= 0 {
		p.writes[i].dead = true
		p.dead++
		delete(p.at, key)
	}
}

// add appends w, a write of one key (no range deleted).
func (p *plan) add(w write) {
	p.writes = append(p.writes, w)
	switch {
	case p.at != nil:
		p.at[w.key] = len(p.writes) - 1
	case len(p.writes) >= indexFrom:
		p.reindex()
	}
}

func (p *plan) reindex() {
	if p.at == nil {
		p.at = make(map[string]int, 2*len(p.writes))
	}
	clear(p.at)
	for i, w := range p.writes {
		if !w.dead {
			p.at[w.key] = i
		}
	}
}

// live returns the writes that stand, in order, dropping the dead ones.
func (p *plan) live() []write {
	if p.dead > 0 {
		p.writes = slices.DeleteFunc(p.writes, func(w write) bool { return w.dead })
		p.dead = 0
		if p.at != nil {
			p.reindex()
		}
	}
	return p.writes
}

// ops returns the plan's writes as etcd ops, with room for extra more.
func (p *plan) ops(extra int) []*pb.RequestOp {
	writes := p.live()
	ops := make([]*pb.RequestOp, len(writes), len(writes)+extra)
	for i, w := range writes {
		if w.del {
			ops[i] = deleteOp(w.key, w.end)
		} else {
			ops[i] = putOp(w.key, w.value)
			ops[i].GetRequestPut().Lease = int64(w.lease)
		}
	}
	return ops
}

// slot is what the plan knows of one allocation key while it walks the
// ops: nothing yet (read it from etcd), absent, or a record.
type slot struct {
	known bool
	rec   *store.Allocation
}

// planner turns a store.Txn into compares and a plan. Deleting or
// replacing an allocation must also delete its owner index entry, whose
// key holds the owner: when the txn does not tell what the allocation
// holds, the planner asks read, and the caller guards the commit with the
// mod revision it read.
type planner struct {
	k keys
	// read returns the allocation stored under key (nil when absent). It
	// is nil in the first pass, which only collects what must be read.
	read func(key string) *store.Allocation
	// lease is what request records are put with (requests.go).
	lease clientv3.LeaseID
	// reads collects the keys the plan depends on, in first-use order.
	reads []string

	slots map[string]*slot
	wiped map[string]bool // pools deleted earlier in the txn
	plan  plan
	// comparedRanges and writtenRanges are the owner index ranges the txn
	// compares or writes into, for touched; comparesRange is set when it
	// compares a range of pools or allocations.
	comparedRanges, writtenRanges []string
	comparesRange                 bool
}

func newPlanner(k keys, lease clientv3.LeaseID, read func(string) *store.Allocation) *planner {
	return &planner{k: k, lease: lease, read: read, slots: map[string]*slot{}, wiped: map[string]bool{}}
}

// current returns the allocation under key as the ops so far left it.
func (pl *planner) current(pool, key string) *store.Allocation {
	s := pl.slots[key]
	if s == nil {
		s = &slot{}
		pl.slots[key] = s
	}
	if !s.known {
		s.known = true
		if !pl.wiped[pool] {
			pl.reads = append(pl.reads, key)
			if pl.read != nil {
				s.rec = pl.read(key)
			}
		}
	}
	return s.rec
}

func (pl *planner) set(key string, rec *store.Allocation) {
	pl.slots[key] = &slot{known: true, rec: rec}
}

// compares translates the conditions. A condition on a revision below 1
// can never hold; ok=false says so, and the txn fails without asking etcd.
func (pl *planner) compares(conds []store.Cond) (cmps []clientv3.Cmp, ok bool) {
	cmps = make([]clientv3.Cmp, 0, len(conds))
	for _, c := range conds {
		switch c.Kind {
		case store.CondPoolAbsent:
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(pl.k.pool(c.Pool)), "=", 0))
		case store.CondPoolRevision:
			if c.Revision < 1 {
				return nil, false
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(pl.k.pool(c.Pool)), "=", c.Revision))
		case store.CondAllocationAbsent:
			key := pl.k.alloc(c.Pool, c.Address)
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
			// If the txn commits, the address was free before it: the
			// plan needs no read to know there is no owner to unindex.
			if _, seen := pl.slots[key]; !seen {
				pl.set(key, nil)
			}
		case store.CondAllocationRevision:
			if c.Revision < 1 {
				return nil, false
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(pl.k.alloc(c.Pool, c.Address)), "=", c.Revision))
		case store.CondOwnerAbsent:
			// Over a range, a compare must hold for every key in it, and an
			// empty range compares as one absent key.
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(pl.k.ownerPrefix(c.Pool, c.OwnerKey)), "=", 0).WithPrefix())
			pl.comparedRanges = append(pl.comparedRanges, pl.k.ownerPrefix(c.Pool, c.OwnerKey))
		case store.CondRequestAbsent:
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(pl.k.request(c.RequestID)), "=", 0))
		case store.CondPoolEmpty:
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(pl.k.poolAllocs(c.Pool)), "=", 0).WithPrefix())
			pl.comparesRange = true
		case store.CondPoolsUnchangedSince:
			// Every commit that puts or deletes a pool puts this key
			// (a compare over the pool keys has etcd read every one of
			// them: 11 ms beside 10,000 pools); absent, its mod revision
			// is 0.
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(pl.k.poolsChanged()), "<", c.Revision+1))
		case store.CondRangeFree:
			// Address keys of one family sort as the addresses do.
			end := pl.k.alloc(c.Pool, c.Last) + "\x00"
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(pl.k.alloc(c.Pool, c.Address)), "=", 0).WithRange(end))
			pl.comparesRange = true
		}
	}
	return cmps, true
}

// apply adds the writes of ops to the plan.
func (pl *planner) apply(ops []store.Op) {
	for _, op := range ops {
		switch op.Kind {
		case store.OpPutPool:
			pl.plan.put(pl.k.pool(op.Pool.ID), encodePool(op.Pool))
			pl.plan.put(pl.k.poolsChanged(), "")

		case store.OpDeletePool:
			id := op.PoolID
			// Allocations first, so their DeleteAllocation events come
			// before the pool's DeletePool event.
			pl.plan.del(pl.k.poolAllocs(id), rangeEnd(pl.k.poolAllocs(id)))
			pl.plan.del(pl.k.poolOwners(id), rangeEnd(pl.k.poolOwners(id)))
			pl.plan.del(pl.k.poolQuarantine(id), rangeEnd(pl.k.poolQuarantine(id)))
			pl.plan.del(pl.k.pool(id), "")
			pl.plan.put(pl.k.poolsChanged(), "")
			pl.wiped[id] = true
			prefix := pl.k.poolAllocs(id)
			for key, s := range pl.slots {
				if strings.HasPrefix(key, prefix) {
					s.known, s.rec = true, nil
				}
			}

		case store.OpPutAllocation:
			a := op.Allocation
			key := pl.k.alloc(a.Pool, a.Address)
			if old := pl.current(a.Pool, key); old != nil {
				pl.plan.del(pl.k.owner(a.Pool, old.Owner.Key(), a.Address), "")
			}
			pl.plan.put(key, encodeAlloc(a))
			pl.plan.put(pl.k.owner(a.Pool, a.Owner.Key(), a.Address), "")
			pl.writtenRanges = append(pl.writtenRanges, pl.k.ownerPrefix(a.Pool, a.Owner.Key()))
			pl.plan.del(pl.k.quarantine(a.Pool, a.Address), "")
			rec := *a
			pl.set(key, &rec)

		case store.OpDeleteAllocation:
			key := pl.k.alloc(op.PoolID, op.Address)
			old := pl.current(op.PoolID, key)
			if old == nil {
				continue // nothing to delete: no write, no event
			}
			pl.plan.del(key, "")
			pl.plan.del(pl.k.owner(op.PoolID, old.Owner.Key(), op.Address), "")
			pl.set(key, nil)

		case store.OpPutQuarantine:
			q := op.Quarantine
			pl.plan.put(pl.k.quarantine(q.Pool, q.Address), encodeQuarantine(q))

		case store.OpPutRequest:
			pl.plan.putLease(pl.k.request(op.Request.ID), encodeRequest(op.Request), pl.lease)
		}
	}
}

// ops are the etcd writes of the txn: the plan's, and the commit marker
// of slot (see keys.marker), so every commit takes a revision even when
// its ops change nothing, and the latest mod revision of the markers is
// the latest commit. A watcher follows the state range only; a commit
// that puts nothing there puts the tick too, so the watcher still sees
// it. Each combined commit puts its own marker in its own nested
// transaction (etcd refuses one key put by two of them): a transaction
// whose commits all failed writes nothing and takes no revision.
func (pl *planner) ops(slot int) []*pb.RequestOp {
	ops := append(pl.plan.ops(2), putOp(pl.k.marker(slot), ""))
	if !pl.plan.putsUnder(pl.k.state()) {
		ops = append(ops, putOp(pl.k.tick(), ""))
	}
	return ops
}

// nops is the number of ops ops returns, without building them.
func (pl *planner) nops() int {
	n := len(pl.plan.live()) + 1
	if !pl.plan.putsUnder(pl.k.state()) {
		n++
	}
	return n
}

// touched lists the keys the txn compares (reads) and writes, an owner
// index range counting as one key, for combining commits; ok=false when
// it deletes a key range or compares a range of pools or allocations,
// which the lists cannot describe.
func (pl *planner) touched(cmps []clientv3.Cmp) (reads, writes []string, ok bool) {
	if pl.comparesRange {
		return nil, nil, false
	}
	reads = make([]string, 0, len(pl.comparedRanges)+len(cmps))
	writes = make([]string, 0, len(pl.writtenRanges)+len(pl.plan.live()))
	reads = append(reads, pl.comparedRanges...)
	for _, c := range cmps {
		reads = append(reads, string(c.Key))
	}
	writes = append(writes, pl.writtenRanges...)
	for _, w := range pl.plan.live() {
		if w.end != "" {
			return nil, nil, false
		}
		writes = append(writes, w.key)
	}
	return reads, writes, true
}

// putsUnder reports whether the plan puts a key that starts with prefix.
// Deletes do not count: one of an absent key makes no watch event.
func (p *plan) putsUnder(prefix string) bool {
	for _, w := range p.live() {
		if !w.del && strings.HasPrefix(w.key, prefix) {
			return true
		}
	}
	return false
}
