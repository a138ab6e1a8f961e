// Package eventlog keeps the recent history of a store's events in a ring
// and serves watchers from it.
//
// Appending never waits for a watcher: each watcher reads the ring at its
// own cursor, either itself (Cursor: no goroutine or buffer per watch) or
// through a goroutine that copies events into a bounded channel (Watch). A
// watcher that reads so slowly that it falls more than half the log's
// capacity behind (or, starting far back, a quarter of it further than
// where it started) ends with an error that wraps store.ErrTooSlow: what it
// missed is still in the ring, so it resumes from its last revision. One
// whose cursor falls out of the ring (history was compacted past it) ends
// with store.ErrCompacted. The ring grows to its capacity as events come.
package eventlog

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// DefaultCapacity is the number of events kept when New is given zero.
const DefaultCapacity = 100_000

// Watcher channel and read-batch sizes. The channel absorbs bursts; the
// batch bounds how long a watcher holds the lock.
const (
	chanBuffer = 256
	readBatch  = 128
)

// initialRing is the ring's length before it grows: a store that watchers
// barely use holds little history.
const initialRing = 1024

// Log is the event history of one store. It is safe for concurrent use.
type Log struct {
	mu sync.Mutex
	// ring grows, doubling, up to capacity events; event sequence i is
	// at ring[i%len(ring)].
	ring     []store.Event
	capacity uint64
	// Events are numbered by sequence; the ring holds [tail, head).
	head, tail uint64
	// compacted is the highest revision whose events are not (or not all)
	// kept: watches must start at or after it.
	compacted int64
	// notify is closed and replaced on every append and on close, waking
	// watchers that caught up.
	notify chan struct{}
	// waiting holds, for each pool that cursors of one pool wait on, what
	// wakes them: the pool's next allocation event, or Close. Appends of
	// other pools' events do not wake them. An entry outlives cursors
	// that went away until the pool's next event: one per pool name,
	// however many cursors.
	waiting  map[string]*poolWait
	closed   bool
	closeErr error
}

// A poolWait is what the cursors of one pool that caught up wait on.
type poolWait struct {
	// ch is closed at the pool's next allocation event, or on Close.
	ch chan struct{}
	// upto is set when ch is closed: the sequence before which no event of
	// the pool was appended since the wait began (the event's, or the
	// head at Close).
	upto uint64
}

// New returns a log that keeps the last capacity events (DefaultCapacity
// when capacity <= 0) and holds history for revisions after startRev: the
// revision the store had when it was opened.
func New(capacity int, startRev int64) *Log {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	return &Log{
		ring:      make([]store.Event, min(capacity, initialRing)),
		capacity:  uint64(capacity),
		compacted: startRev,
		notify:    make(chan struct{}),
		waiting:   map[string]*poolWait{},
	}
}

// Append adds the events of one or more commits, in revision order. The
// caller must append commits in the order of their revisions and before
// it acknowledges them, so a watch started after a commit returned sees
// it.
func (l *Log) Append(events []store.Event) {
	if len(events) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	n := uint64(len(l.ring))
	for i, ev := range events {
		ev.Last = i == len(events)-1 || events[i+1].Revision != ev.Revision
		if l.head-l.tail == n && n < l.capacity {
			l.grow()
			n = uint64(len(l.ring))
		}
		if l.head-l.tail == n {
			// Losing any event of a revision makes the whole revision
			// unwatchable.
			l.compacted = max(l.compacted, l.ring[l.tail%n].Revision)
			l.ring[l.tail%n] = store.Event{}
			l.tail++
		}
		l.ring[l.head%n] = ev
		if len(l.waiting) > 0 && ev.Allocation != nil {
			if w, ok := l.waiting[ev.Allocation.Pool]; ok {
				w.upto = l.head
				close(w.ch)
				delete(l.waiting, ev.Allocation.Pool)
			}
		}
		l.head++
	}
	close(l.notify)
	l.notify = make(chan struct{})
}

// grow doubles the ring, up to its capacity.
func (l *Log) grow() {
	old, n := l.ring, uint64(len(l.ring))
	l.ring = make([]store.Event, min(2*n, l.capacity))
	for i := l.tail; i < l.head; i++ {
		l.ring[i%uint64(len(l.ring))] = old[i%n]
	}
}

// Compact drops the history of revisions up to rev. Watchers still
// reading it end with ErrCompacted.
func (l *Log) Compact(rev int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rev <= l.compacted {
		return
	}
	n := uint64(len(l.ring))
	for l.tail < l.head && l.ring[l.tail%n].Revision <= rev {
		l.ring[l.tail%n] = store.Event{}
		l.tail++
	}
	l.compacted = rev
	// Wake watchers so the ones left behind notice now.
	close(l.notify)
	l.notify = make(chan struct{})
}

// Compacted returns the revision a watch must start at or after.
func (l *Log) Compacted() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.compacted
}

// Close ends every watch with an Err event carrying err (after the events
// already appended) and makes later watches fail with err.
func (l *Log) Close(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	l.closeErr = err
	close(l.notify)
	for pool, w := range l.waiting {
		w.upto = l.head
		close(w.ch)
		delete(l.waiting, pool)
	}
}

// Watch implements store.Store.Watch on the history: a cursor read by a
// goroutine of the watch's own into a bounded channel.
func (l *Log) Watch(ctx context.Context, fromRev int64) (<-chan store.Event, error) {
	c, err := l.Cursor(fromRev, "")
	if err != nil {
		return nil, err
	}
	out := make(chan store.Event, chanBuffer)
	go c.pump(ctx, out)
	return out, nil
}

// Cursor implements store.CursorStore.WatchCursor on the history: the
// events after fromRev, read from the ring by the caller; with a pool,
// only the allocation events of that pool.
//
// A cursor of one pool that has read everything waits for that pool's
// next event, not for the next append: a thousand watches of quiet pools
// cost a commit nothing. Events of other pools it did not read do not
// count as falling behind, whether it waited or was busy sending: it is
// cut off as too slow only with more of its own pool's events to read
// than one read takes.
func (l *Log) Cursor(fromRev int64, pool string) (*Cursor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, l.closeErr
	}
	if fromRev < l.compacted {
		return nil, fmt.Errorf("watch from revision %d, history starts after %d: %w", fromRev, l.compacted, store.ErrCompacted)
	}
	n := uint64(len(l.ring))
	// Revisions in the ring never decrease, so the first event to send is
	// found by binary search.
	i := sort.Search(int(l.head-l.tail), func(i int) bool {
		return l.ring[(l.tail+uint64(i))%n].Revision > fromRev
	})
	c := &Cursor{log: l, next: l.tail + uint64(i), after: fromRev, pool: pool}
	// A watch that starts far back (resuming) may fall a quarter of the
	// ring further behind than where it started.
	c.allowance = max(l.capacity/2, l.head-c.next+l.capacity/4)
	return c, nil
}

// A Cursor is a watch's place in the history. It is not safe for
// concurrent use.
type Cursor struct {
	log  *Log
	next uint64
	// pool, when set, keeps the allocation events of that pool only.
	pool string
	// wait is what the cursor of a pool waits on once it has read
	// everything.
	wait *poolWait
	// after filters out events of revisions the caller already has: a
	// commit may be visible in the store before its events are appended.
	after int64
	// allowance is how far behind the head the cursor may fall before it
	// is cut off as too slow.
	allowance uint64
	// last is the revision of the last event read.
	last int64
	// err ends the cursor once returned.
	err error
}

// Next implements store.Cursor.
func (c *Cursor) Next(ctx context.Context, buf []store.Event) ([]store.Event, error) {
	if c.err != nil {
		return buf, c.err
	}
	if cap(buf) == len(buf) {
		buf = slices.Grow(buf, 1)
	}
	for n := len(buf); ; {
		var notify <-chan struct{}
		buf, notify, c.err = c.read(buf)
		if len(buf) > n || c.err != nil {
			return buf, c.err
		}
		select {
		case <-notify:
		case <-ctx.Done():
			return buf, ctx.Err()
		}
	}
}

// pump copies the cursor's events into out until ctx ends or after the
// event that carries the error ending the watch, then closes out.
func (c *Cursor) pump(ctx context.Context, out chan<- store.Event) {
	defer close(out)
	batch := make([]store.Event, 0, readBatch)
	for {
		var err error
		batch, err = c.Next(ctx, batch[:0])
		for _, ev := range batch {
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				select {
				case out <- store.Event{Err: err}:
				case <-ctx.Done():
				}
			}
			return
		}
	}
}

// read copies the next events into buf, up to its capacity. With nothing
// to read it returns the channel to wait on, or the error that ends the
// watch.
func (c *Cursor) read(buf []store.Event) ([]store.Event, <-chan struct{}, error) {
	l := c.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := c.wait; w != nil {
		select {
		case <-w.ch:
			// Nothing of the pool came before w.upto: the events up to
			// there are not the cursor's to read, nor to fall behind on.
			c.next = max(c.next, w.upto)
			c.wait = nil
		default:
			// Nothing of the pool came since the wait began.
			c.next = l.head
			return buf, w.ch, nil
		}
	}
	if c.next < l.tail {
		return buf, nil, fmt.Errorf("watcher fell too far behind (history kept after revision %d): %w", l.compacted, store.ErrCompacted)
	}
	if lag := l.head - c.next; lag > c.allowance && !c.catchesUp(cap(buf)-len(buf)) {
		return buf, nil, fmt.Errorf("watcher fell %d events behind, more than the %d allowed, after revision %d: %w", lag, c.allowance, c.last, store.ErrTooSlow)
	}
	n, read := uint64(len(l.ring)), len(buf)
	for c.next < l.head && len(buf) < cap(buf) {
		ev := l.ring[c.next%n]
		c.next++
		if ev.Revision > c.after && c.keeps(ev) {
			buf = append(buf, ev)
			c.last = ev.Revision
		}
	}
	switch {
	case c.next == l.head && l.closed:
		return buf, nil, l.closeErr
	case c.pool != "" && len(buf) == read:
		// Caught up with nothing of its pool: wait for the pool.
		w, ok := l.waiting[c.pool]
		if !ok {
			w = &poolWait{ch: make(chan struct{})}
			l.waiting[c.pool] = w
		}
		c.wait = w
		return buf, w.ch, nil
	}
	return buf, l.notify, nil
}

// catchesUp tells whether the cursor of a pool has at most room events of
// its pool left to read: it is behind on other pools' events only, which
// it skips, so it is not too slow however many there are. (The log's
// lock is held; the scan is as long as the cursor is behind, which is
// more than the allowance only this once.)
func (c *Cursor) catchesUp(room int) bool {
	if c.pool == "" {
		return false
	}
	l := c.log
	n, left := uint64(len(l.ring)), room
	for i := c.next; i < l.head; i++ {
		if ev := l.ring[i%n]; ev.Revision > c.after && c.keeps(ev) {
			if left--; left < 0 {
				return false
			}
		}
	}
	return true
}

// keeps reports whether ev is one of the cursor's events.
func (c *Cursor) keeps(ev store.Event) bool {
	return c.pool == "" || ev.Allocation != nil && ev.Allocation.Pool == c.pool
}
