package decide

import "fmt"

// judgeDeletions follows the pools being deleted. The allocator releases a
// large pool's allocations in chunks before it deletes the pool; a replica
// that stops, or a store that fails, half way leaves the pool deleting with
// addresses still taken, and nothing on the allocator's side goes on with it
// (its replicas would race over the same chunks). Repair, one leader at a
// time, is the owner that does: a pool that holds as many allocations as it
// did in the pass before is stalled; once it was seen stalled in
// Config.LeakStrikes consecutive passes and was marked deleting longer ago
// than Config.LeakGrace, the pass finishes its deletion (Output.PoolDeletes).
// A deletion under way shrinks the pool between two passes and is not a
// finding. The first pass to see a pool cannot tell, so a deletion is
// finished LeakStrikes passes after the first sighting at the earliest.
func (p *pass) judgeDeletions() {
	for _, pi := range p.pools.list {
		if !pi.deleting {
			continue
		}
		pool := &p.in.Pools[pi.idx]
		remaining := p.poolCounts[pi.idx]
		watch := deletionWatch{etag: pool.Etag, remaining: remaining}
		if before, ok := p.in.Strikes.deletions[pool.ID]; ok && before.etag == pool.Etag && remaining >= before.remaining {
			watch.stalls = before.stalls + 1
		}
		if p.advancing {
			p.next.deletions[pool.ID] = watch
		}
		if watch.stalls == 0 {
			continue
		}
		f := Finding{Kind: KindStalledDeletion, Pool: pool.ID, Etag: pool.Etag, Strikes: watch.stalls}
		f.FirstSeen = p.firstSeen(&f)
		what := fmt.Sprintf("pool %s is being deleted and still holds %d allocations, as many as in the pass before", pool.ID, remaining)
		if pool.Etag == "" {
			// Without it the deletion could not be guarded.
			f.Action = ActionReported
			f.Message = what + "; not acted on: the allocator gave no etag for the pool"
		} else if p.in.Config.ClusterBound {
			f.Action = ActionReported
			f.Message = what + "; " + leftToFleet
		} else if p.deletion(&f, deletionSteps{
			what: what, seen: "stalled in", age: p.in.Now.Sub(pool.UpdateTime), aged: "marked deleting %s ago",
			doing: "finishing its deletion", wouldDo: "its deletion would be finished",
		}) {
			p.out.PoolDeletes = append(p.out.PoolDeletes, PoolDelete{Pool: pool.ID, Etag: pool.Etag})
		}
		p.add(f)
	}
}
