package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// watchBuffer is the channel capacity of a direct watch (etcd's client
// buffers beyond it).
const watchBuffer = 256

// WatchCursor implements store.Store with an etcd watch on the state range,
// with previous values, so a delete carries the record as it was. fromRev
// 0 is the store's whole history, from its first commit. A watch from a
// revision the shared watch's history holds reads it there (feed.go); one
// from before it, or from 0, gets an etcd watch of its own.
func (s *Store) WatchCursor(ctx context.Context, fromRev int64, pool string) (store.Cursor, error) {
	l, err := s.feedFor(ctx, fromRev)
	if err != nil {
		return nil, err
	}
	if l != nil {
		c, err := l.Cursor(fromRev, pool)
		switch {
		case err == nil:
			return c, nil
		case !errors.Is(err, store.ErrCompacted):
			return nil, err
		}
	}
	ch, err := s.watchDirect(ctx, fromRev)
	if err != nil {
		return nil, err
	}
	return store.ChanCursor(ch), nil
}

// watchDirect is a watch with an etcd watch of its own. It starts at
// fromRev, not fromRev+1, and drops fromRev's events: a compaction at
// fromRev still lets it start with the previous values its deletes need.
func (s *Store) watchDirect(ctx context.Context, fromRev int64) (<-chan store.Event, error) {
	if s.isClosed() {
		return nil, store.ErrClosed
	}
	if fromRev == 0 {
		first, err := s.firstRevision(ctx)
		if err != nil {
			return nil, err
		}
		fromRev = first - 1
	}
	if err := s.checkWatchable(ctx, fromRev); err != nil {
		return nil, err
	}
	out := make(chan store.Event, watchBuffer)
	w := &watcher{s: s, ctx: ctx, from: fromRev, seen: fromRev}
	w.emit = func(evs []store.Event) bool {
		for _, e := range evs {
			if !w.send(out, e) {
				return false
			}
		}
		return true
	}
	w.end = func(err error) { w.send(out, store.Event{Err: err}) }
	if !s.startWatcher(ctx, w, func() { close(out) }) {
		return nil, store.ErrClosed
	}
	return out, nil
}

// checkWatchable tells whether etcd still has the history after fromRev,
// by a read at it (a watch reports compaction only once created).
func (s *Store) checkWatchable(ctx context.Context, fromRev int64) error {
	_, err := s.cli.Get(ctx, s.k.markers(), clientv3.WithPrefix(), clientv3.WithRev(max(fromRev, 1)), clientv3.WithCountOnly())
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("watch from revision %d: %w", fromRev, store.ErrCompacted)
	case errors.Is(err, rpctypes.ErrFutureRev):
		// Watching from the future is allowed: events come when it does.
		return nil
	}
	return s.readError(ctx, fmt.Sprintf("watch from revision %d", fromRev), err)
}

// startWatcher opens w's etcd watch and runs it until ctx ends or w ends,
// then calls done; false when the store is closed.
func (s *Store) startWatcher(ctx context.Context, w *watcher, done func()) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.watchers.Add(1)
	s.mu.Unlock()
	wctx, cancel := context.WithCancel(ctx)
	wch := s.cli.Watch(wctx, s.k.state(), clientv3.WithPrefix(), clientv3.WithRev(max(w.from, 1)), clientv3.WithPrevKV())
	go func() {
		defer s.watchers.Done()
		defer cancel()
		defer done()
		w.run(wch)
	}()
	return true
}

// firstRevision is the revision of the store's first commit (the first
// commit marker's creation), or the revision after the current one for a
// store that has never committed.
func (s *Store) firstRevision(ctx context.Context) (int64, error) {
	resp, err := s.cli.Get(ctx, s.k.markers(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, s.readError(ctx, "watch from the first revision", err)
	}
	if len(resp.Kvs) == 0 {
		return resp.Header.Revision + 1, nil
	}
	first := resp.Kvs[0].CreateRevision
	for _, kv := range resp.Kvs[1:] {
		first = min(first, kv.CreateRevision)
	}
	return first, nil
}

// A watcher reads one etcd watch and hands its events, whole revisions
// at a time, to emit (false stops it), and the error that ends it to end.
type watcher struct {
	s    *Store
	ctx  context.Context
	emit func([]store.Event) bool
	end  func(error)
	from int64 // events at it or before are not delivered
	// seen is the revision of the last etcd event read, ticks included:
	// Close waits until it reaches the store's last commit.
	seen int64
	// drain is set once the store is closing, and closed when the
	// watcher gives up delivering (closeDrain).
	drain chan struct{}
	dec   allocDecoder
}

func (w *watcher) run(wch clientv3.WatchChan) {
	closing := w.s.closing
	for {
		if w.drain != nil && w.seen >= w.s.closeRev {
			w.end(store.ErrClosed)
			return
		}
		select {
		case <-w.ctx.Done():
			return
		case <-closing:
			closing = nil
			w.startDrain()
			continue
		case <-w.drain:
			w.end(store.ErrClosed)
			return
		case resp, ok := <-wch:
			if !ok {
				if w.ctx.Err() == nil {
					w.end(w.ended(nil))
				}
				return
			}
			if err := resp.Err(); err != nil {
				w.end(w.ended(err))
				return
			}
			if !w.deliver(resp.Events) {
				return
			}
		}
	}
}

// startDrain starts the deadline of a closing store, once.
func (w *watcher) startDrain() {
	if w.drain != nil {
		return
	}
	d := make(chan struct{})
	time.AfterFunc(closeDrain, func() { close(d) })
	w.drain = d
}

// ended explains why etcd ended the watch.
func (w *watcher) ended(err error) error {
	switch {
	case w.s.isClosed():
		return store.ErrClosed
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("watch fell behind compaction after revision %d: %w", w.seen, store.ErrCompacted)
	case err == nil:
		return errors.New("etcd ended the watch")
	}
	return fmt.Errorf("etcd ended the watch: %w", err)
}

// send delivers e on out; false means the watch is over (its context
// ended, or the store closed and the reader did not take it in time).
func (w *watcher) send(out chan<- store.Event, e store.Event) bool {
	closing := w.s.closing
	for {
		select {
		case out <- e:
			return true
		case <-w.ctx.Done():
			return false
		case <-closing:
			closing = nil
			w.startDrain()
		case <-w.drain:
			return false
		}
	}
}

// deliver converts and emits the events of one etcd response (whole
// revisions: the watch is not fragmented); false stops the watcher.
func (w *watcher) deliver(evs []*clientv3.Event) bool {
	out := make([]store.Event, 0, len(evs))
	for _, ev := range evs {
		if ev.Kv.ModRevision <= w.from {
			continue
		}
		w.seen = ev.Kv.ModRevision
		e, ok, err := w.s.convert(ev, &w.dec)
		if err != nil {
			// A value this store cannot read: the watcher cannot go on
			// with a gap, so it ends and the caller re-lists.
			w.end(fmt.Errorf("watch at revision %d: %w", w.seen, err))
			return false
		}
		if ok {
			out = append(out, e)
		}
	}
	for i := range out {
		out[i].Last = i == len(out)-1 || out[i+1].Revision != out[i].Revision
	}
	return len(out) == 0 || w.emit(out)
}

// convert turns one etcd event into a store event; ok=false for keys that
// make none.
func (s *Store) convert(ev *clientv3.Event, dec *allocDecoder) (store.Event, bool, error) {
	p, err := s.k.parse(string(ev.Kv.Key))
	if err != nil {
		return store.Event{}, false, err
	}
	rev := ev.Kv.ModRevision
	put := ev.Type == mvccpb.PUT
	switch p.kind {
	case kindPool:
		if put {
			pool, err := s.k.decodePool(ev.Kv)
			return store.Event{Type: store.EventPutPool, Revision: rev, Pool: &pool}, true, err
		}
		pool := store.Pool{ID: p.pool}
		if ev.PrevKv != nil {
			if pool, err = s.k.decodePool(ev.PrevKv); err != nil {
				return store.Event{}, false, err
			}
		}
		return store.Event{Type: store.EventDeletePool, Revision: rev, Pool: &pool}, true, nil
	case kindAlloc:
		if put {
			a, err := dec.decode(ev.Kv)
			return store.Event{Type: store.EventPutAllocation, Revision: rev, Allocation: &a}, true, err
		}
		// Without the previous value (compacted away), the key still
		// says which address was freed.
		a := store.Allocation{Pool: p.pool, Address: p.addr}
		if ev.PrevKv != nil {
			if a, err = dec.decode(ev.PrevKv); err != nil {
				return store.Event{}, false, err
			}
		}
		return store.Event{Type: store.EventDeleteAllocation, Revision: rev, Allocation: &a}, true, nil
	case kindQuarantine:
		if !put {
			return store.Event{}, false, nil // ends when the address is handed out again
		}
		q, err := s.k.decodeQuarantine(ev.Kv)
		return store.Event{Type: store.EventPutQuarantine, Revision: rev, Quarantine: &q}, true, err
	}
	return store.Event{}, false, nil
}
