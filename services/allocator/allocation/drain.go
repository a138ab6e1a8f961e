package allocation

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// deleteChunk is how many allocations a forced DeletePool releases per
// commit when the pool holds more. Deleting them all in the commit that
// deletes the pool makes one revision of as many events: every replica
// decodes it at once (a million took replicas on etcd to 1.9 GB, and
// stalled etcd for tens of seconds), and it overflows the history a
// follower resumes from, so each one rebuilds from a snapshot. 4,096
// deletions fit the etcd limits of docs/deploy.md; a store that refuses
// a chunk as too large (etcd at its default --max-txn-ops) gets half as
// many until it takes them.
const deleteChunk = 4096

// deletion is a forced deletion in chunks under way on this replica.
// released and err are set before done closes.
type deletion struct {
	done     chan struct{}
	released int
	err      error
}

// startDeletion returns the deletion of pool id (ps) under way here, or
// marks the pool deleting and starts one. It goes on when the request
// that started it ends (a client's deadline is seldom as long as a
// million releases take); a DeletePool meanwhile waits for it, and one
// after it failed starts it again. It ends with the store (ErrClosed).
// The caller holds s.mu and ps.mu.
func (s *Allocator) startDeletion(ctx context.Context, id string, ps *poolState) (*deletion, error) {
	if ps.deletion != nil {
		return ps.deletion, nil
	}
	if err := s.markDeleting(ctx, ps); err != nil {
		return nil, err
	}
	d := &deletion{done: make(chan struct{})}
	ps.deletion = d
	go s.finishDeletion(context.WithoutCancel(ctx), id, ps, d)
	return d, nil
}

// finishDeletion drains pool id (ps) and deletes it, and settles d.
func (s *Allocator) finishDeletion(ctx context.Context, id string, ps *poolState, d *deletion) {
	released, err := s.drain(ctx, id, ps)
	if err == nil {
		s.mu.Lock()
		ps.mu.Lock()
		if !ps.deleted { // else another replica's deletion finished first
			var n int
			n, err = s.deleteLocked(ctx, id, ps, true)
			released += n
		}
		ps.mu.Unlock()
		s.mu.Unlock()
	}
	if errors.Is(err, decide.ErrEtagMismatch) && s.deletedMeanwhile(ctx, ps) {
		// Another replica finished the same deletion first (an operator
		// and repair each finishing one cut short): a chunk or the
		// pool's deletion lost to its deletion of the pool.
		err = nil
	}
	if err != nil {
		s.logger.Error("forced deletion of a pool stopped; DeletePool with force goes on with it, and repair does once it sees it stalled", "pool", id, "released", released, "err", err)
	}
	d.released, d.err = released, err
	ps.mu.Lock()
	ps.deletion = nil
	ps.mu.Unlock()
	close(d.done)
}

// deletedMeanwhile reports whether pool ps, a commit of whose deletion
// lost its guard, is gone from the store: once this replica holds every
// commit the store held, it has applied the deletion if there was one.
func (s *Allocator) deletedMeanwhile(ctx context.Context, ps *poolState) bool {
	if err := s.Sync(ctx); err != nil {
		return false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.deleted
}

// markDeleting commits ps as being deleted (store.Pool.Deleting), unless
// it is already: from then on no replica allocates in it or updates it,
// and requests in flight against its earlier revision fail. The caller
// holds s.mu and ps.mu.
func (s *Allocator) markDeleting(ctx context.Context, ps *poolState) error {
	if ps.rec.Deleting {
		return nil // a deletion cut short before: go on with it
	}
	next := ps.rec
	next.Deleting = true
	next.UpdateTime = s.now().UTC()
	rev, err := s.commit(ctx, store.Txn{
		Conds: []store.Cond{{Kind: store.CondPoolRevision, Pool: next.ID, Revision: ps.rec.Revision}},
		Ops:   []store.Op{{Kind: store.OpPutPool, Pool: &next}},
	})
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("delete pool %s: the pool changed meanwhile: %w", next.ID, decide.ErrEtagMismatch)
	}
	if err != nil {
		return fmt.Errorf("delete pool %s: mark it deleting: %w", next.ID, err)
	}
	next.Revision = rev
	ps.rec = next
	trace.SpanFromContext(ctx).AddEvent("pool marked deleting", trace.WithAttributes(attribute.Int("plexus.pool.allocations", ps.held.Len())))
	return nil
}

// drain releases the allocations of pool id (ps), being deleted, a chunk per
// commit, each guarded by the pool's revision, until this replica holds
// none, and returns how many it released. Other replicas apply each
// chunk as a release; an allocation this one has not applied yet goes
// with the pool's own deletion. It takes ps.mu for each chunk only.
func (s *Allocator) drain(ctx context.Context, id string, ps *poolState) (int, error) {
	start := s.now()
	size, released, commits := s.deleteChunk, 0, 0
	for {
		c, err := s.nextChunk(ctx, id, ps, size)
		if err != nil || len(c.allocs) == 0 {
			if err == nil && commits > 0 {
				s.logger.Info("released a deleted pool's allocations in chunks", "pool", id,
					"allocations", released, "commits", commits, "took", s.now().Sub(start).Round(time.Millisecond))
			}
			return released, err
		}
		txn := store.Txn{
			Conds: []store.Cond{{Kind: store.CondPoolRevision, Pool: id, Revision: c.rev}},
			Ops:   make([]store.Op, len(c.allocs)),
		}
		for i, a := range c.allocs {
			txn.Ops[i] = store.Op{Kind: store.OpDeleteAllocation, PoolID: id, Address: a.Address}
		}
		_, err = s.commit(ctx, txn)
		s.settle(ps, c, err == nil)
		switch {
		case err == nil:
			released += len(c.allocs)
			commits++
		case errors.Is(err, store.ErrTooLarge) && size > 1:
			size /= 2
			s.logger.Debug("store refused a chunk of a pool's deletion as too large; halving it", "pool", id, "chunk", size)
		case errors.Is(err, store.ErrConflict):
			return released, fmt.Errorf("delete pool %s: the pool changed meanwhile: %w", id, decide.ErrEtagMismatch)
		default:
			return released, fmt.Errorf("delete pool %s: release %d allocations: %w", id, len(c.allocs), err)
		}
	}
}

// chunk is a part of a pool's allocations whose release is committing.
type chunk struct {
	allocs []store.Allocation
	// rev is the pool's revision the commit is guarded by.
	rev int64
	// done closes when the commit is settled, for releases that wait.
	done chan struct{}
}

// nextChunk takes up to n of the allocations ps holds and no release is
// committing, marks them releasing and counts their commit in the gate,
// and returns them with the pool's revision. None means the pool is
// drained here, or already deleted.
func (s *Allocator) nextChunk(ctx context.Context, id string, ps *poolState, n int) (chunk, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if err := ps.gate.pass(ctx, &ps.mu); err != nil {
		return chunk{}, err
	}
	if ps.deleted {
		return chunk{}, nil
	}
	if !ps.rec.Deleting {
		return chunk{}, fmt.Errorf("delete pool %s: the pool was changed by a replica that does not know deletions in chunks: %w", id, decide.ErrEtagMismatch)
	}
	c := chunk{allocs: make([]store.Allocation, 0, min(n, ps.held.Len())), rev: ps.rec.Revision}
	ps.held.Ascend(netip.Addr{}, func(a store.Allocation) bool {
		if _, busy := ps.releasing[a.Address]; !busy {
			c.allocs = append(c.allocs, a)
		}
		return len(c.allocs) < n
	})
	if len(c.allocs) == 0 {
		return chunk{}, nil
	}
	c.done = make(chan struct{})
	for _, a := range c.allocs {
		ps.releasing[a.Address] = c.done
	}
	ps.gate.enter()
	return c, nil
}

// settle ends the commit of a chunk that nextChunk took: its addresses
// are no longer releasing, and, once committed, forgotten.
func (s *Allocator) settle(ps *poolState, c chunk, committed bool) {
	now := s.now()
	ps.mu.Lock()
	for _, a := range c.allocs {
		delete(ps.releasing, a.Address)
		if committed {
			s.forget(ps, a, now)
		}
	}
	ps.gate.leave()
	ps.mu.Unlock()
	close(c.done)
}
