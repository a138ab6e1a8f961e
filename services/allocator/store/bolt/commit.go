package bolt

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/internal/record"
)

// pending is one Commit waiting for the committer.
type pending struct {
	ctx  context.Context
	txn  store.Txn
	rev  int64
	err  error
	done chan struct{}
}

// Commit implements store.Store: it queues txn for the committer and waits
// until its batch is on disk. A txn whose ctx ends while queued is dropped;
// once its batch is being written, Commit waits for the outcome.
func (s *Store) Commit(ctx context.Context, txn store.Txn) (int64, error) {
	if err := txn.Validate(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	p := &pending{ctx: ctx, txn: txn, done: make(chan struct{})}
	s.qmu.Lock()
	if s.closing {
		s.qmu.Unlock()
		return 0, store.ErrClosed
	}
	s.queue = append(s.queue, p)
	s.qmu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default: // the committer is already due to look at the queue
	}
	<-p.done
	return p.rev, p.err
}

// run is the committer: it writes whatever is queued, batch after batch,
// and sleeps only when the queue is empty. It drains the queue before
// Close completes.
func (s *Store) run() {
	defer close(s.stopped)
	<-s.indexed
	if s.indexErr != nil {
		s.logger.Error("store cannot commit: its index could not be built", "path", s.path, "err", s.indexErr)
	}
	var batch []*pending
	for {
		s.qmu.Lock()
		n, ops := 0, 0
		for n < len(s.queue) && n < maxBatch && (n == 0 || ops < maxBatchOps) {
			ops += len(s.queue[n].txn.Ops)
			n++
		}
		batch = append(batch[:0], s.queue[:n]...)
		rest := copy(s.queue, s.queue[n:])
		clear(s.queue[rest:])
		s.queue = s.queue[:rest]
		closing := s.closing
		s.qmu.Unlock()

		if n == 0 {
			if closing {
				return
			}
			<-s.kick
			continue
		}
		s.commitBatch(batch)
		clear(batch)
	}
}

// commitBatch writes batch and replies to every Commit in it.
func (s *Store) commitBatch(batch []*pending) {
	if s.indexErr != nil {
		for _, p := range batch {
			p.err = s.indexErr
			close(p.done)
		}
		return
	}
	live := 0
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.err = fmt.Errorf("commit not attempted: %w", err)
			continue
		}
		live++
	}
	if live > 0 {
		if err := s.write(batch); err != nil {
			s.logger.Error("store batch write failed; retrying its transactions one by one",
				"path", s.path, "txns", live, "err", err)
			// One bad transaction must not fail the others: write each
			// alone.
			for _, p := range batch {
				if p.err != nil {
					continue
				}
				if err := s.write([]*pending{p}); err != nil {
					p.err = fmt.Errorf("commit to %s: %w", s.path, err)
				}
			}
		}
	}
	for _, p := range batch {
		close(p.done)
	}
}

// write applies the live transactions of batch in one bbolt transaction,
// and sets each one's revision or ErrConflict; on an error, nothing.
func (s *Store) write(batch []*pending) error {
	tx, err := s.db.Begin(true)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit

	w := newWriter(tx, s.index, s.seq)
	s.index.begin()
	committed := false
	defer func() {
		if committed {
			s.index.commit()
			s.seq = w.seq
		} else {
			// The bbolt transaction is rolled back too.
			s.index.rollback()
		}
	}()
	rev := s.rev
	revs := make([]int64, len(batch)) // 0: failed a condition
	var events []store.Event
	for i, p := range batch {
		if p.err != nil {
			continue
		}
		ok, err := w.holds(p.txn.Conds)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		rev++
		for _, op := range p.txn.Ops {
			if events, err = w.apply(op, rev, events); err != nil {
				return err
			}
		}
		revs[i] = rev
	}

	conflicts := 0
	if rev > s.rev {
		meta := tx.Bucket(bucketMeta)
		if err := putUint64(meta, keyRevision, uint64(rev)); err != nil {
			return err
		}
		if err := putUint64(meta, keyAllocs, uint64(s.allocs+w.allocDelta)); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		s.batches.Add(1)
	}
	committed = true
	// Else every transaction failed its conditions: nothing to write, and
	// the verdicts rest on state that is already on disk.
	s.rev = rev
	s.allocs += w.allocDelta
	s.log.Append(events)
	for i, p := range batch {
		if p.err != nil {
			continue
		}
		if revs[i] == 0 {
			p.err = store.ErrConflict
			conflicts++
		}
		p.rev = revs[i]
		s.txns.Add(1)
	}
	s.conflicts.Add(uint64(conflicts))
	return nil
}

// writer evaluates conditions and applies ops in one bbolt write
// transaction. Keys and values put stay unchanged until it commits.
type writer struct {
	meta, pools, records, quarantine, requests *bbolt.Bucket
	index                                      *index
	// seq is the number the next new allocation is filed under.
	seq        uint64
	allocDelta int64
	// now dates the request records the batch puts.
	now time.Time
}

func newWriter(tx *bbolt.Tx, x *index, seq uint64) *writer {
	w := &writer{
		meta:       tx.Bucket(bucketMeta),
		pools:      tx.Bucket(bucketPools),
		records:    tx.Bucket(bucketRecords),
		index:      x,
		seq:        seq,
		quarantine: tx.Bucket(bucketQuarantine),
		requests:   tx.Bucket(bucketRequests),
		now:        time.Now(),
	}
	// New records go to the end of the tree: fill pages split by an
	// append more than bbolt's default half.
	w.records.FillPercent = allocFill
	return w
}

// allocation reads pool's allocation of addr: its record's number and
// its decoded form.
func (w *writer) allocation(pool string, addr netip.Addr) (uint64, store.Allocation, bool, error) {
	seq, ok := w.index.seq(pool, addr)
	if !ok {
		return 0, store.Allocation{}, false, nil
	}
	v := w.records.Get(recordKey(seq))
	if v == nil {
		return 0, store.Allocation{}, false, fmt.Errorf("allocation %s/%s: record %d is missing", pool, addr, seq)
	}
	a, err := record.DecodeRecord(v)
	if err == nil && (a.Pool != pool || a.Address != addr) {
		err = fmt.Errorf("allocation %s/%s: record %d holds %s/%s", pool, addr, seq, a.Pool, a.Address)
	}
	return seq, a, err == nil, err
}

func (w *writer) holds(conds []store.Cond) (bool, error) {
	for _, c := range conds {
		ok, err := w.holdsOne(c)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func (w *writer) holdsOne(c store.Cond) (bool, error) {
	switch c.Kind {
	case store.CondPoolAbsent:
		return w.pools.Get([]byte(c.Pool)) == nil, nil
	case store.CondPoolRevision:
		v := w.pools.Get([]byte(c.Pool))
		if v == nil {
			return false, nil
		}
		p, err := record.DecodePool(c.Pool, v)
		return err == nil && p.Revision == c.Revision, err
	case store.CondAllocationAbsent:
		_, ok := w.index.seq(c.Pool, c.Address)
		return !ok, nil
	case store.CondAllocationRevision:
		_, a, ok, err := w.allocation(c.Pool, c.Address)
		return ok && a.Revision == c.Revision, err
	case store.CondOwnerAbsent:
		return w.ownerAbsent(c.Pool, c.OwnerKey)
	case store.CondPoolEmpty:
		return w.index.len(c.Pool) == 0, nil
	case store.CondRequestAbsent:
		return w.requests.Get([]byte(c.RequestID)) == nil, nil
	case store.CondPoolsUnchangedSince:
		return int64(getUint64(w.meta, keyPoolsChanged)) <= c.Revision, nil
	case store.CondRangeFree:
		return !w.index.anyIn(c.Pool, c.Address, c.Last), nil
	}
	return false, fmt.Errorf("unknown condition kind %d", c.Kind)
}

// ownerAbsent looks the owner up in the index and confirms each hit
// against its allocation.
func (w *writer) ownerAbsent(pool, ownerKey string) (bool, error) {
	absent := true
	var err error
	w.index.eachOwner(w.index.ownerHash(pool, ownerKey), func(addr netip.Addr) bool {
		var (
			a  store.Allocation
			ok bool
		)
		if _, a, ok, err = w.allocation(pool, addr); !ok {
			return err == nil // an owner of another pool with the same hash
		}
		absent = a.Owner.Key() != ownerKey
		return absent
	})
	return absent && err == nil, err
}

func (w *writer) apply(op store.Op, rev int64, events []store.Event) ([]store.Event, error) {
	switch op.Kind {
	case store.OpPutPool:
		if err := w.pools.Put([]byte(op.Pool.ID), record.EncodePool(op.Pool, rev)); err != nil {
			return events, err
		}
		if err := putUint64(w.meta, keyPoolsChanged, uint64(rev)); err != nil {
			return events, err
		}
		p := *op.Pool
		p.CIDRs, p.Reserved, p.Labels = slices.Clone(p.CIDRs), slices.Clone(p.Reserved), maps.Clone(p.Labels)
		p.Revision = rev
		return append(events, store.Event{Type: store.EventPutPool, Revision: rev, Pool: &p}), nil

	case store.OpDeletePool:
		if err := putUint64(w.meta, keyPoolsChanged, uint64(rev)); err != nil {
			return events, err
		}
		return w.deletePool(op.PoolID, rev, events)

	case store.OpPutAllocation:
		a := *op.Allocation
		a.Revision = rev
		seq, prev, ok, err := w.allocation(a.Pool, a.Address)
		if err != nil {
			return events, err
		}
		if ok {
			w.index.removeOwner(w.index.ownerHash(a.Pool, prev.Owner.Key()), a.Address)
		} else {
			if w.seq > maxSeq {
				return events, fmt.Errorf("allocation %s/%s: record numbers exhausted", a.Pool, a.Address)
			}
			seq = w.seq
			w.seq++
			w.index.put(a.Pool, a.Address, seq)
			w.allocDelta++
		}
		if err := w.records.Put(recordKey(seq), record.EncodeRecord(&a, rev)); err != nil {
			return events, err
		}
		w.index.addOwner(w.index.ownerHash(a.Pool, a.Owner.Key()), a.Address)
		if err := w.quarantine.Delete(addrKey(a.Pool, a.Address)); err != nil {
			return events, err
		}
		return append(events, store.Event{Type: store.EventPutAllocation, Revision: rev, Allocation: &a}), nil

	case store.OpDeleteAllocation:
		seq, prev, ok, err := w.allocation(op.PoolID, op.Address)
		if !ok {
			return events, err
		}
		if err := w.drop(seq, &prev); err != nil {
			return events, err
		}
		return append(events, store.Event{Type: store.EventDeleteAllocation, Revision: rev, Allocation: &prev}), nil

	case store.OpPutQuarantine:
		q := *op.Quarantine
		if err := w.quarantine.Put(addrKey(q.Pool, q.Address), record.EncodeQuarantine(&q)); err != nil {
			return events, err
		}
		return append(events, store.Event{Type: store.EventPutQuarantine, Revision: rev, Quarantine: &q}), nil

	case store.OpPutRequest:
		return events, w.requests.Put([]byte(op.Request.ID), record.EncodeRequest(op.Request, rev, w.now))
	}
	return events, fmt.Errorf("unknown op kind %d", op.Kind)
}

// deletePool removes a pool and everything filed under it. Keys are
// collected before deleting, as deleting under a bbolt cursor can skip
// entries.
func (w *writer) deletePool(id string, rev int64, events []store.Event) ([]store.Event, error) {
	prefix := poolPrefix(id)

	// In address order, as the events of a pool's deletion always were.
	for _, addr := range w.index.addrs(id) {
		seq, a, _, err := w.allocation(id, addr)
		if err != nil {
			return events, err
		}
		events = append(events, store.Event{Type: store.EventDeleteAllocation, Revision: rev, Allocation: &a})
		if err := w.drop(seq, &a); err != nil {
			return events, err
		}
	}

	var keys [][]byte
	qc := w.quarantine.Cursor()
	for k, _ := qc.Seek(prefix); bytes.HasPrefix(k, prefix); k, _ = qc.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := w.quarantine.Delete(k); err != nil {
			return events, err
		}
	}

	if v := w.pools.Get([]byte(id)); v != nil {
		p, err := record.DecodePool(id, v)
		if err != nil {
			return events, err
		}
		if err := w.pools.Delete([]byte(id)); err != nil {
			return events, err
		}
		events = append(events, store.Event{Type: store.EventDeletePool, Revision: rev, Pool: &p})
	}
	return events, nil
}

// drop deletes allocation a, filed under seq: its record and its
// entries in the index.
func (w *writer) drop(seq uint64, a *store.Allocation) error {
	if err := w.records.Delete(recordKey(seq)); err != nil {
		return err
	}
	w.index.removeOwner(w.index.ownerHash(a.Pool, a.Owner.Key()), a.Address)
	w.index.del(a.Pool, a.Address)
	w.allocDelta--
	return nil
}
