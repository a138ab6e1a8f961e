// Package eventlog keeps the recent history of a store's events in a ring
// and serves watchers from it.
//
// Appending never waits for a watcher: each reads the ring at its own
// Cursor, with no goroutine or buffer of its own. One that falls more than
// half the capacity behind (or, starting far back, a quarter further than
// where it started) ends with store.ErrTooSlow and resumes from its last
// revision; one whose place left the ring ends with store.ErrCompacted.
//
// The history is kept encoded (package record) in blocks with no pointers,
// bounded by a number of events and by bytes. The last events are also
// kept as they came; a watcher reading further back decodes, outside the
// log's lock, into segments other cursors share.
package eventlog

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/internal/record"
)

// DefaultCapacity is the number of events kept when New is given zero.
const DefaultCapacity = 100_000

// DefaultBytes bounds the encoded size of the events kept: about 150,000
// allocation events of common owners, 12,000 of the longest allowed.
const DefaultBytes = 24 << 20

const (
	initialRing = 1024     // the ring's length before it grows
	hotEvents   = 4096     // the last events kept as they came (at most an eighth of the capacity)
	blockSize   = 64 << 10 // of the blocks encoded events are written in
	segEvents   = 256      // the consecutive events a segment of decoded events spans
)

// Log is the event history of one store. It is safe for concurrent use.
type Log struct {
	mu sync.Mutex
	// ring grows, doubling, up to capacity events; event sequence i is
	// at ring[i%len(ring)].
	ring     []slot
	capacity uint64
	// hot holds the last events as they came: sequence i, if at least
	// head-len(hot), is at hot[i%len(hot)].
	hot []store.Event
	// blocks hold the encoded events of the ring, oldest first. Bytes in
	// a block are never written again, so readers decode them after
	// letting go of mu.
	blocks   []block
	bytes    int // the blocks' capacities
	maxBytes int
	// end is the stream position after the last encoded event.
	end     uint64
	scratch []byte       // an event encoded before it is copied into a block
	seed    maphash.Seed // hashes pool names into slots
	// segs holds weakly the segments of decoded events that cursors
	// hold, by sequence / segEvents.
	segs map[uint64]weak.Pointer[segment]
	// Events are numbered by sequence; the ring holds [tail, head).
	head, tail uint64
	// compacted is the highest revision whose events are not (or not all)
	// kept: watches must start at or after it.
	compacted int64
	// notify is closed and replaced on every append and on close, waking
	// watchers that caught up.
	notify chan struct{}
	// waiting holds what wakes the cursors of a pool that caught up: the
	// pool's next allocation event, its deletion, or Close. One entry per
	// pool; the last of its cursors closed takes it out.
	waiting  map[string]*poolWait
	closed   bool
	closeErr error
}

// A slot is an event of the ring, with no pointers: where its encoding
// is, and what cursors choose events by without decoding them.
type slot struct {
	rev int64
	// pos is the stream position of the event's encoding, n its length.
	pos uint64
	n   uint32
	// pool is a hash of the pool of an allocation event.
	pool uint32
	typ  uint8
	last bool
}

// A block holds encoded events from stream position start.
type block struct {
	start uint64
	b     []byte
}

// A segment holds the events of segEvents consecutive sequences once
// decoded, for every cursor reading them (a hundred watches replaying the
// same history decode each event once). The log holds it weakly, so it
// goes once no cursor is in it.
type segment struct {
	key uint64
	evs [segEvents]atomic.Pointer[store.Event]
}

// A poolWait is what the cursors of one pool that caught up wait on.
type poolWait struct {
	ch chan struct{} // closed by what wakes them, or by the last closed
	n  int           // cursors waiting
	// upto is set when ch is closed: no event of the pool was appended
	// since the wait began before this sequence.
	upto uint64
}

// New returns a log that keeps the last capacity events (DefaultCapacity
// when capacity <= 0), of at most DefaultBytes encoded, and holds history
// for revisions after startRev: the revision the store had when it was
// opened.
func New(capacity int, startRev int64) *Log {
	return newLog(capacity, DefaultBytes, startRev)
}

func newLog(capacity, maxBytes int, startRev int64) *Log {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	return &Log{
		ring:      make([]slot, min(capacity, initialRing)),
		capacity:  uint64(capacity),
		hot:       make([]store.Event, max(1, min(capacity/8, hotEvents))),
		maxBytes:  maxBytes,
		seed:      maphash.MakeSeed(),
		segs:      map[uint64]weak.Pointer[segment]{},
		compacted: startRev,
		notify:    make(chan struct{}),
		waiting:   map[string]*poolWait{},
	}
}

// poolHash is the hash of pool a slot keeps.
func (l *Log) poolHash(pool string) uint32 {
	h := maphash.String(l.seed, pool)
	return uint32(h>>32) ^ uint32(h)
}

// Append adds the events of one or more commits, in revision order,
// before the caller acknowledges them: a watch started after a commit
// returned sees it.
func (l *Log) Append(events []store.Event) {
	if len(events) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	for i, ev := range events {
		ev.Last = i == len(events)-1 || events[i+1].Revision != ev.Revision
		ev.Err = nil
		if l.head-l.tail == uint64(len(l.ring)) && uint64(len(l.ring)) < l.capacity {
			l.grow()
		}
		if l.head-l.tail == uint64(len(l.ring)) {
			l.evict()
		}
		s := slot{rev: ev.Revision, typ: uint8(ev.Type), last: ev.Last}
		s.pos, s.n = l.encode(&ev)
		if a := ev.Allocation; a != nil {
			s.pool = l.poolHash(a.Pool)
			l.wake(a.Pool)
		}
		if p := ev.Pool; p != nil && ev.Type == store.EventDeletePool {
			// The cursors of the pool that are still read wait again; the
			// entry of those that went away goes.
			l.wake(p.ID)
		}
		l.ring[l.head%uint64(len(l.ring))] = s
		l.hot[l.head%uint64(len(l.hot))] = ev
		l.head++
	}
	close(l.notify)
	l.notify = make(chan struct{})
}

// wake wakes the cursors of pool that wait, if any, for the event about
// to be appended or for Close.
func (l *Log) wake(pool string) {
	if w, ok := l.waiting[pool]; ok {
		w.upto = l.head
		close(w.ch)
		delete(l.waiting, pool)
	}
}

// encode writes ev's records at the end of the stream, in the last block
// or a new one (making room within maxBytes), and returns where.
func (l *Log) encode(ev *store.Event) (pos uint64, n uint32) {
	l.scratch = record.AppendEvent(l.scratch[:0], ev)
	enc := l.scratch
	if k := len(l.blocks); k == 0 || cap(l.blocks[k-1].b)-len(l.blocks[k-1].b) < len(enc) {
		size := max(blockSize, len(enc))
		for l.bytes+size > l.maxBytes && l.tail < l.head {
			l.evict()
		}
		l.blocks = append(l.blocks, block{start: l.end, b: make([]byte, 0, size)})
		l.bytes += size
	}
	b := &l.blocks[len(l.blocks)-1]
	b.b = append(b.b, enc...)
	pos = l.end
	l.end += uint64(len(enc))
	if cap(l.scratch) > blockSize {
		l.scratch = nil // a large pool's records
	}
	return pos, uint32(len(enc))
}

// evict drops the oldest event, and the blocks no event kept is in.
// Losing any event of a revision makes the whole revision unwatchable.
func (l *Log) evict() {
	s := l.ring[l.tail%uint64(len(l.ring))]
	l.compacted = max(l.compacted, s.rev)
	if l.head-l.tail <= uint64(len(l.hot)) {
		l.hot[l.tail%uint64(len(l.hot))] = store.Event{}
	}
	l.tail++
	if l.tail%segEvents == 0 {
		delete(l.segs, l.tail/segEvents-1)
	}
	keep := l.end
	if l.tail < l.head {
		keep = l.ring[l.tail%uint64(len(l.ring))].pos
	}
	for len(l.blocks) > 0 && l.blocks[0].start+uint64(len(l.blocks[0].b)) <= keep {
		l.bytes -= cap(l.blocks[0].b)
		l.blocks[0] = block{}
		l.blocks = l.blocks[1:]
	}
}

// grow doubles the ring, up to its capacity.
func (l *Log) grow() {
	old, n := l.ring, uint64(len(l.ring))
	l.ring = make([]slot, min(2*n, l.capacity))
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
	for l.tail < l.head && l.ring[l.tail%uint64(len(l.ring))].rev <= rev {
		l.evict()
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
	for pool := range l.waiting {
		l.wake(pool)
	}
}

// Cursor implements store.Store.WatchCursor on the history. A cursor of
// one pool that has read everything waits for that pool's next event, not
// for the next append (a thousand watches of quiet pools cost a commit
// nothing), and other pools' events do not count as falling behind.
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
		return l.ring[(l.tail+uint64(i))%n].rev > fromRev
	})
	c := &Cursor{log: l, next: l.tail + uint64(i), after: fromRev, pool: pool}
	if pool != "" {
		c.poolHash = l.poolHash(pool)
	}
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
	// pool, when set, keeps the allocation events of that pool only;
	// poolHash is its hash, which the slots of its events have.
	pool     string
	poolHash uint32
	// wait is what the cursor of a pool waits on once it has read
	// everything.
	wait *poolWait
	// after filters out revisions the caller has: a commit may be
	// visible in the store before its events are appended.
	after     int64
	allowance uint64      // how far behind the head it may fall
	last      int64       // the revision of the last event read
	err       error       // ends the cursor once returned
	cold      []coldEvent // of the last read, to decode outside the lock
	seg       *segment    // of the last event read behind the hot ones
	closed    bool        // set by Close, under the log's lock
}

// Close implements store.Cursor: a cursor of a pool that waits leaves
// the pool's wait, and the last to leave takes it out of the log.
func (c *Cursor) Close() {
	l := c.log
	l.mu.Lock()
	defer l.mu.Unlock()
	c.closed = true
	w := c.wait
	if w == nil {
		return
	}
	c.wait = nil
	select {
	case <-w.ch: // woken, and out of the log already
		return
	default:
	}
	if w.n--; w.n == 0 {
		delete(l.waiting, c.pool)
		w.upto = l.head
		close(w.ch)
	}
}

// A coldEvent is an event read from the encoded history: buf[i] is to be
// decoded from enc, unless another cursor has put it in seg meanwhile.
type coldEvent struct {
	i   int
	enc []byte
	seg *segment
	j   int // in seg
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
		buf = c.decode(buf, n)
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

// read copies the next events into buf, up to its capacity. With nothing
// to read it returns the channel to wait on, or the error that ends the
// watch.
func (c *Cursor) read(buf []store.Event) ([]store.Event, <-chan struct{}, error) {
	l := c.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.closed {
		return buf, nil, fmt.Errorf("cursor closed: %w", store.ErrClosed)
	}
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
	hot := l.head - min(l.head, uint64(len(l.hot)))
	for c.next < l.head && len(buf) < cap(buf) {
		s := l.ring[c.next%n]
		c.next++
		if s.rev <= c.after || !c.keeps(s) {
			continue
		}
		switch seq := c.next - 1; {
		case c.next > hot:
			buf = append(buf, l.hot[seq%uint64(len(l.hot))])
			c.seg = nil
		default:
			if c.seg == nil || c.seg.key != seq/segEvents {
				c.seg = l.segmentAt(seq)
			}
			if ev := c.seg.evs[seq%segEvents].Load(); ev != nil {
				buf = append(buf, *ev)
				break
			}
			buf = append(buf, store.Event{Type: store.EventType(s.typ), Revision: s.rev, Last: s.last})
			c.cold = append(c.cold, coldEvent{i: len(buf) - 1, enc: l.encoded(s), seg: c.seg, j: int(seq % segEvents)})
		}
		c.last = s.rev
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
		w.n++
		return buf, w.ch, nil
	}
	return buf, l.notify, nil
}

// catchesUp tells whether the cursor of a pool has at most room events of
// its pool left to read: behind on other pools' events only, it is not too
// slow. The log's lock is held.
func (c *Cursor) catchesUp(room int) bool {
	if c.pool == "" {
		return false
	}
	l := c.log
	n, left := uint64(len(l.ring)), room
	for i := c.next; i < l.head; i++ {
		if s := l.ring[i%n]; s.rev > c.after && c.keeps(s) {
			if left--; left < 0 {
				return false
			}
		}
	}
	return true
}

// keeps reports whether s may be one of the cursor's events: one of
// another pool whose name has the same hash is dropped once decoded.
func (c *Cursor) keeps(s slot) bool {
	return c.pool == "" || s.pool == c.poolHash && isAllocation(store.EventType(s.typ))
}

func isAllocation(t store.EventType) bool {
	return t == store.EventPutAllocation || t == store.EventDeleteAllocation
}

// segmentAt returns the segment of sequence seq, shared with the cursors
// that hold it.
func (l *Log) segmentAt(seq uint64) *segment {
	k := seq / segEvents
	if seg := l.segs[k].Value(); seg != nil {
		return seg
	}
	seg := &segment{key: k}
	l.segs[k] = weak.Make(seg)
	return seg
}

// encoded returns the bytes of s's encoding, which stay as they are
// after l.mu is let go.
func (l *Log) encoded(s slot) []byte {
	i := sort.Search(len(l.blocks), func(i int) bool { return l.blocks[i].start > s.pos }) - 1
	b := l.blocks[i]
	off := s.pos - b.start
	return b.b[off : off+uint64(s.n) : off+uint64(s.n)]
}

// decode fills in the events of the last read (buf[from:]) that came
// from the encoded history, and drops those of another pool whose name
// has the same hash.
func (c *Cursor) decode(buf []store.Event, from int) []store.Event {
	for _, ce := range c.cold {
		ev := &buf[ce.i]
		slot := &ce.seg.evs[ce.j]
		if got := slot.Load(); got != nil {
			*ev = *got
			continue
		}
		if err := record.DecodeEvent(ce.enc, ev); err != nil {
			if c.err == nil {
				c.err = fmt.Errorf("event history: %w", err)
			}
			continue
		}
		shared := *ev
		slot.CompareAndSwap(nil, &shared)
	}
	clear(c.cold) // the blocks may be dropped from the log meanwhile
	c.cold = c.cold[:0]
	if c.pool == "" {
		return buf
	}
	read := slices.DeleteFunc(buf[from:], func(ev store.Event) bool {
		return ev.Allocation == nil || ev.Allocation.Pool != c.pool
	})
	return buf[:from+len(read)]
}
