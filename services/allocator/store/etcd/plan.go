package etcd

import (
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// A write is one etcd write of a plan: a put of key, or a delete of key
// or, with end, of the range [key, end).
type write struct {
	del   bool
	key   string
	end   string
	value string
	lease clientv3.LeaseID // of a put; 0: none
}

// planner turns a store.Txn into compares and writes. etcd refuses a
// transaction that writes a key twice; no two ops of a valid txn name one
// record, so their writes are distinct keys.
//
// Deleting or replacing an allocation also deletes its owner index entry,
// whose key holds the owner: when the txn does not say what the address
// holds, the planner asks read, and the caller guards the commit with the
// mod revision it read.
type planner struct {
	k keys
	// read returns the allocation stored under key (nil when absent). It
	// is nil in the first pass, which only collects what must be read.
	read func(key string) *store.Allocation
	// lease is what request records are put with (requests.go).
	lease clientv3.LeaseID
	// reads collects the keys the writes depend on, in first-use order.
	reads []string
	// absent holds the allocation keys a condition requires absent: if
	// the txn commits there is no owner to unindex, so no read.
	absent map[string]bool

	writes       []write
	poolsChanged bool
	// The owner index ranges compared or written into, and whether a
	// range of allocations is compared, for touched.
	comparedRanges, writtenRanges []string
	comparesRange                 bool
}

func newPlanner(k keys, lease clientv3.LeaseID, read func(string) *store.Allocation) *planner {
	return &planner{k: k, lease: lease, read: read}
}

func (pl *planner) put(key, value string) {
	pl.writes = append(pl.writes, write{key: key, value: value})
}

// del deletes key, or with end != "" the range [key, end).
func (pl *planner) del(key, end string) {
	pl.writes = append(pl.writes, write{del: true, key: key, end: end})
}

// current returns the allocation under key before the txn.
func (pl *planner) current(key string) *store.Allocation {
	if pl.absent[key] {
		return nil
	}
	pl.reads = append(pl.reads, key)
	if pl.read == nil {
		return nil
	}
	return pl.read(key)
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
			if pl.absent == nil {
				pl.absent = map[string]bool{}
			}
			pl.absent[key] = true
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
			// (bench/results/allocator-pools.md); absent, it is 0.
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

// apply adds the writes of ops.
func (pl *planner) apply(ops []store.Op) {
	for _, op := range ops {
		switch op.Kind {
		case store.OpPutPool:
			pl.put(pl.k.pool(op.Pool.ID), encodePool(op.Pool))
			pl.poolsChanged = true

		case store.OpDeletePool:
			id := op.PoolID
			// Allocations first, so their DeleteAllocation events come
			// before the pool's DeletePool event.
			pl.del(pl.k.poolAllocs(id), rangeEnd(pl.k.poolAllocs(id)))
			pl.del(pl.k.poolOwners(id), rangeEnd(pl.k.poolOwners(id)))
			pl.del(pl.k.poolQuarantine(id), rangeEnd(pl.k.poolQuarantine(id)))
			pl.del(pl.k.pool(id), "")
			pl.poolsChanged = true

		case store.OpPutAllocation:
			a := op.Allocation
			key, owner := pl.k.alloc(a.Pool, a.Address), pl.k.owner(a.Pool, a.Owner.Key(), a.Address)
			old := pl.current(key)
			var oldOwner string
			if old != nil {
				oldOwner = pl.k.owner(a.Pool, old.Owner.Key(), a.Address)
			}
			if old != nil && oldOwner != owner {
				pl.del(oldOwner, "")
			}
			pl.put(key, encodeAlloc(a))
			if oldOwner != owner {
				pl.put(owner, "")
			}
			pl.writtenRanges = append(pl.writtenRanges, pl.k.ownerPrefix(a.Pool, a.Owner.Key()))
			pl.del(pl.k.quarantine(a.Pool, a.Address), "")

		case store.OpDeleteAllocation:
			key := pl.k.alloc(op.PoolID, op.Address)
			old := pl.current(key)
			if old == nil {
				continue // nothing to delete: no write, no event
			}
			pl.del(key, "")
			pl.del(pl.k.owner(op.PoolID, old.Owner.Key(), op.Address), "")

		case store.OpPutQuarantine:
			q := op.Quarantine
			pl.put(pl.k.quarantine(q.Pool, q.Address), encodeQuarantine(q))

		case store.OpPutRequest:
			pl.writes = append(pl.writes, write{key: pl.k.request(op.Request.ID), value: encodeRequest(op.Request), lease: pl.lease})
		}
	}
}

// ops are the etcd writes of the txn, pools-changed for a pool op, the
// commit marker of slot (keys.marker), and the tick when nothing else is
// put under state/, so every commit takes a revision a watcher sees.
func (pl *planner) ops(slot int) []*pb.RequestOp {
	ops := make([]*pb.RequestOp, len(pl.writes), len(pl.writes)+3) // and at most the three below
	for i, w := range pl.writes {
		if w.del {
			ops[i] = deleteOp(w.key, w.end)
		} else {
			ops[i] = putOp(w.key, w.value)
			ops[i].GetRequestPut().Lease = int64(w.lease)
		}
	}
	if pl.poolsChanged {
		ops = append(ops, putOp(pl.k.poolsChanged(), ""))
	}
	ops = append(ops, putOp(pl.k.marker(slot), ""))
	if !pl.putsUnder(pl.k.state()) {
		ops = append(ops, putOp(pl.k.tick(), ""))
	}
	return ops
}

// nops is the number of ops ops returns, without building them.
func (pl *planner) nops() int {
	n := len(pl.writes) + 1
	if pl.poolsChanged {
		n++
	}
	if !pl.putsUnder(pl.k.state()) {
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
	writes = make([]string, 0, len(pl.writtenRanges)+len(pl.writes)+1)
	reads = append(reads, pl.comparedRanges...)
	for _, c := range cmps {
		reads = append(reads, string(c.Key))
	}
	writes = append(writes, pl.writtenRanges...)
	for _, w := range pl.writes {
		if w.end != "" {
			return nil, nil, false
		}
		writes = append(writes, w.key)
	}
	if pl.poolsChanged {
		writes = append(writes, pl.k.poolsChanged())
	}
	return reads, writes, true
}

// putsUnder reports whether the plan puts a key that starts with prefix.
// Deletes do not count: one of an absent key makes no watch event.
func (pl *planner) putsUnder(prefix string) bool {
	for _, w := range pl.writes {
		if !w.del && strings.HasPrefix(w.key, prefix) {
			return true
		}
	}
	return false
}
