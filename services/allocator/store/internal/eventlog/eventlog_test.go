package eventlog

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/internal/storetest"
	"github.com/plexusnet/plexus/services/allocator/store"
)

func events(rev int64, n int) []store.Event {
	evs := make([]store.Event, n)
	for i := range evs {
		evs[i] = store.Event{Type: store.EventPutAllocation, Revision: rev}
	}
	return evs
}

func revisions(t *testing.T, ch <-chan store.Event, n int) []int64 {
	t.Helper()
	var out []int64
	for len(out) < n {
		select {
		case ev := <-ch:
			require.NoError(t, ev.Err)
			out = append(out, ev.Revision)
		case <-time.After(5 * time.Second):
			require.FailNow(t, "timed out", "got %v", out)
		}
	}
	return out
}

// TestRingKeepsWholeRevisions: once any event of a revision is evicted,
// watches must start at or after that revision.
func TestRingKeepsWholeRevisions(t *testing.T) {
	l := New(4, 10)
	require.Equal(t, int64(10), l.Compacted())
	l.Append(events(11, 1))
	l.Append(events(12, 2))
	require.Equal(t, int64(10), l.Compacted())
	l.Append(events(13, 3)) // evicts 11 and one event of 12
	require.Equal(t, int64(12), l.Compacted())

	_, err := watch(t.Context(), l, 11)
	require.ErrorIs(t, err, store.ErrCompacted)
	ch, err := watch(t.Context(), l, 12)
	require.NoError(t, err)
	require.Equal(t, []int64{13, 13, 13}, revisions(t, ch, 3))

	// A revision larger than the ring leaves only its tail, which no
	// watch may start inside.
	l.Append(events(14, 9))
	require.Equal(t, int64(14), l.Compacted())
	_, err = watch(t.Context(), l, 13)
	require.ErrorIs(t, err, store.ErrCompacted)
}

func TestWatchFromEachRevision(t *testing.T) {
	l := New(100, 0)
	l.Append(events(1, 3))
	l.Append(events(2, 1))
	l.Append(events(4, 2))
	for from, want := range map[int64][]int64{
		0: {1, 1, 1, 2, 4, 4},
		1: {2, 4, 4},
		2: {4, 4},
		3: {4, 4},
	} {
		ch, err := watch(t.Context(), l, from)
		require.NoError(t, err)
		require.Equal(t, want, revisions(t, ch, len(want)), "from %d", from)
	}
}

// TestWatcherBehindCompactionEnds: a watcher reading history that gets
// compacted away ends with ErrCompacted instead of skipping events.
func TestWatcherBehindCompactionEnds(t *testing.T) {
	l := New(100_000, 0)
	ch, err := watch(t.Context(), l, 0)
	require.NoError(t, err)
	for rev := int64(1); rev <= 2000; rev++ {
		l.Append(events(rev, 1))
	}
	l.Compact(1999)
	var last int64
	for ev := range ch {
		if ev.Err != nil {
			require.ErrorIs(t, ev.Err, store.ErrCompacted)
			require.Less(t, last, int64(1999))
			return
		}
		require.Equal(t, last+1, ev.Revision)
		last = ev.Revision
	}
	require.FailNow(t, "channel closed without an error")
}

// TestTooSlowResumes: a watcher that stops reading while the log grows is
// cut off once it is more than half the ring behind, before the events it
// missed leave the ring. Its memory stays bounded (the ring is shared; its
// channel holds storetest.PumpBuffer events), and resumed at once from the last
// revision it received, it gets every later event, none twice.
func TestTooSlowResumes(t *testing.T) {
	const ring = 2000
	l := New(ring, 0)
	ch, err := watch(t.Context(), l, 0)
	require.NoError(t, err)
	rev := int64(0)
	appendN := func(n int) {
		for range n {
			rev++
			l.Append(events(rev, 1))
		}
	}
	appendN(ring * 3 / 4) // more than half the ring, less than all of it

	var got []int64
	var endErr error
	for ev := range ch {
		if ev.Err != nil {
			endErr = ev.Err
			break
		}
		got = append(got, ev.Revision)
	}
	require.ErrorIs(t, endErr, store.ErrTooSlow)
	require.NotErrorIs(t, endErr, store.ErrCompacted)
	require.Less(t, len(got), ring*3/4, "cut off before it caught up")
	require.LessOrEqual(t, len(got), storetest.PumpBuffer+storetest.PumpBatch, "what it was sent before the cut-off is bounded")
	for i, r := range got {
		require.Equal(t, int64(i+1), r)
	}

	last := int64(0)
	if len(got) > 0 {
		last = got[len(got)-1]
	}
	resumed, err := watch(t.Context(), l, last)
	require.NoError(t, err, "what it missed is still kept")
	appendN(10) // and the log goes on
	got = append(got, revisions(t, resumed, int(rev-last))...)
	for i, r := range got {
		require.Equal(t, int64(i+1), r, "no event lost or repeated")
	}

	// A watch that starts far back is not cut off for where it started.
	from := rev - int64(ring)*7/10
	far, err := watch(t.Context(), l, from)
	require.NoError(t, err)
	appendN(ring / 10)
	require.Len(t, revisions(t, far, int(rev-from)), int(rev-from))
}

// TestCursor: a cursor read by its caller gets the events a channel watch
// gets, at most as many as its buffer has room for at a time, waits for
// the next commit, stops when its context ends, is cut off as too slow
// and ends with the log, each error after the events before it. It runs in
// a bubble so that "waits" is seen, not assumed after a sleep.
func TestCursor(t *testing.T) {
	synctest.Test(t, testCursor)
}

func testCursor(t *testing.T) {
	l := New(100, 0)
	l.Append(events(1, 3))
	l.Append(events(2, 2))
	c, err := l.Cursor(1, "")
	require.NoError(t, err)
	buf, err := c.Next(t.Context(), make([]store.Event, 0, 1))
	require.NoError(t, err)
	require.Len(t, buf, 1, "no more than the buffer holds")
	buf, err = c.Next(t.Context(), buf[:0])
	require.NoError(t, err)
	require.Len(t, buf, 1)
	require.Equal(t, int64(2), buf[0].Revision)

	// Nothing to read: it waits for the next commit, or for its context.
	short, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	buf, err = c.Next(short, nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Empty(t, buf)
	type result struct {
		buf []store.Event
		err error
	}
	next := make(chan result, 1)
	go func() {
		buf, err := c.Next(t.Context(), nil) // a nil buffer reads one
		next <- result{buf, err}
	}()
	synctest.Wait()
	select {
	case r := <-next:
		t.Fatalf("Next returned %v, %v with nothing to read", r.buf, r.err)
	default: // it waits
	}
	l.Append(events(3, 2))
	r := <-next
	require.NoError(t, r.err)
	require.Equal(t, []store.Event{{Type: store.EventPutAllocation, Revision: 3, Last: false}}, r.buf)

	// Too slow: more than half the ring behind.
	for rev := int64(4); rev < 70; rev++ {
		l.Append(events(rev, 1))
	}
	_, err = c.Next(t.Context(), make([]store.Event, 0, 8))
	require.ErrorIs(t, err, store.ErrTooSlow)
	_, err = c.Next(t.Context(), make([]store.Event, 0, 8))
	require.ErrorIs(t, err, store.ErrTooSlow, "the cursor is done")

	// The log closes: what is left comes first, with the error.
	c, err = l.Cursor(68, "")
	require.NoError(t, err)
	l.Close(store.ErrClosed)
	buf, err = c.Next(t.Context(), make([]store.Event, 0, 8))
	require.ErrorIs(t, err, store.ErrClosed)
	require.Len(t, buf, 1)
	require.Equal(t, int64(69), buf[0].Revision)
	_, err = l.Cursor(69, "")
	require.ErrorIs(t, err, store.ErrClosed)
}

// TestRingGrows: the ring starts small and doubles up to its capacity as
// history accumulates, keeping every event in place for the cursors that
// are reading it, however far behind; at capacity it drops the oldest.
func TestRingGrows(t *testing.T) {
	const capacity = 10000
	l := New(capacity, 0)
	require.Len(t, l.ring, initialRing)
	behind, err := l.Cursor(0, "")
	require.NoError(t, err)
	rev := int64(0)
	appendRevs := func(n, perRev int) {
		for range n {
			rev++
			l.Append(events(rev, perRev))
		}
	}
	appendRevs(initialRing-10, 1)
	mid, err := l.Cursor(rev, "")
	require.NoError(t, err)
	appendRevs(1000, 3) // grows twice, inside commits of three events
	require.Len(t, l.ring, 4*initialRing)
	read := func(c *Cursor, n int) []int64 {
		var out []int64
		buf := make([]store.Event, 0, 100)
		for len(out) < n {
			var err error
			buf, err = c.Next(t.Context(), buf[:0])
			require.NoError(t, err)
			for _, ev := range buf {
				out = append(out, ev.Revision)
			}
		}
		return out
	}
	got := read(behind, initialRing-10+3000)
	for i, r := range got[:initialRing-10] {
		require.Equal(t, int64(i+1), r)
	}
	for i, r := range got[initialRing-10:] {
		require.Equal(t, int64(initialRing-10+1+i/3), r)
	}
	require.Equal(t, got[initialRing-10:], read(mid, 3000))

	appendRevs(7000, 1) // past the capacity: the oldest go
	require.Len(t, l.ring, capacity)
	require.Equal(t, uint64(capacity), l.head-l.tail)
	_, err = l.Cursor(0, "")
	require.ErrorIs(t, err, store.ErrCompacted)
	c, err := l.Cursor(rev-10, "")
	require.NoError(t, err)
	require.Len(t, read(c, 10), 10)
}

// poolEvents are n allocation events of pool, one revision each from rev+1.
func poolEvents(pool string, rev int64, n int) []store.Event {
	evs := make([]store.Event, n)
	for i := range evs {
		evs[i] = store.Event{Type: store.EventPutAllocation, Revision: rev + int64(i) + 1, Allocation: &store.Allocation{Pool: pool}}
	}
	return evs
}

// TestPoolCursor: a cursor of one pool reads that pool's allocation events
// only; once caught up it waits for its pool, and other pools' events
// neither wake it nor count as falling behind, however many pass, even
// out of the ring; it still falls behind on its own pool's events, and
// the log's end reaches it.
func TestPoolCursor(t *testing.T) {
	l := New(100, 0)
	ctx := t.Context()
	a, err := l.Cursor(0, "a")
	require.NoError(t, err)
	all, err := l.Cursor(0, "")
	require.NoError(t, err)
	buf := make([]store.Event, 0, 8)
	next := func(c *Cursor) []int64 {
		t.Helper()
		var err error
		buf, err = c.Next(ctx, buf[:0])
		require.NoError(t, err)
		var revs []int64
		for _, ev := range buf {
			revs = append(revs, ev.Revision)
		}
		return revs
	}
	rev := int64(0)
	add := func(pool string, n int) {
		l.Append(poolEvents(pool, rev, n))
		rev += int64(n)
	}
	waiting := func(pool string) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		w, ok := l.waiting[pool]
		if !ok {
			return false
		}
		select {
		case <-w.ch:
			return false
		default:
			return true
		}
	}

	add("b", 30)
	add("a", 1)
	require.Equal(t, []int64{31}, next(a))
	require.Len(t, next(all), 8)

	// Caught up: a waits for pool a, and 250 events of b (more than the
	// ring, far more than the 50 a cursor may fall behind) do not wake it.
	ready := make(chan []int64)
	go func() { ready <- next(a) }()
	require.Eventually(t, func() bool { return waiting("a") }, 5*time.Second, time.Millisecond)
	add("b", 250)
	require.True(t, waiting("a"), "other pools' events do not wake a cursor of pool a")
	add("a", 2)
	select {
	case got := <-ready:
		require.Equal(t, []int64{282, 283}, got)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the cursor of pool a did not wake for its pool's events")
	}
	_, err = all.Next(ctx, buf[:0])
	require.ErrorIs(t, err, store.ErrCompacted, "the cursor of every pool fell out of the ring")

	// Two cursors of pool c, caught up at different places, both wake.
	c1, err := l.Cursor(rev, "c")
	require.NoError(t, err)
	buf, err = c1.Next(canceled(), buf[:0])
	require.ErrorIs(t, err, context.Canceled)
	add("b", 5)
	c2, err := l.Cursor(rev, "c")
	require.NoError(t, err)
	buf, err = c2.Next(canceled(), buf[:0])
	require.ErrorIs(t, err, context.Canceled)
	add("c", 1)
	require.Equal(t, []int64{rev}, next(c1))
	require.Equal(t, []int64{rev}, next(c2))

	// Its own pool's events, unread, still cut a cursor off: its event
	// left the ring before it read.
	_, err = c1.Next(canceled(), buf[:0])
	require.ErrorIs(t, err, context.Canceled)
	add("c", 1)
	add("b", 150)
	_, err = c1.Next(ctx, buf[:0])
	require.ErrorIs(t, err, store.ErrCompacted)

	// Between two reads, though, a cursor is not waiting for its pool:
	// the events that left the ring while it did not read might have
	// held its pool's, so c2, which did not read while 150 went, ends.
	_, err = c2.Next(ctx, buf[:0])
	require.ErrorIs(t, err, store.ErrCompacted)

	// Close ends a waiting cursor of a pool.
	c3, err := l.Cursor(rev, "c")
	require.NoError(t, err)
	done := make(chan error)
	go func() {
		_, err := c3.Next(ctx, buf[:0])
		done <- err
	}()
	require.Eventually(t, func() bool { return waiting("c") }, 5*time.Second, time.Millisecond)
	l.Close(store.ErrClosed)
	select {
	case err := <-done:
		require.ErrorIs(t, err, store.ErrClosed)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Close did not end the waiting cursor of a pool")
	}
}

// canceled is a context that has ended.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestPoolCursorBehindOnOtherPools: a cursor of a pool that is busy (it
// read, and has not come back to wait) while other pools' events pass
// the allowance is not too slow: it skips them. With more of its own
// pool's events to read than a read takes, it is.
func TestPoolCursorBehindOnOtherPools(t *testing.T) {
	l := New(100, 0) // a cursor may fall 50 events behind
	ctx := t.Context()
	rev := int64(0)
	add := func(pool string, n int) {
		l.Append(poolEvents(pool, rev, n))
		rev += int64(n)
	}
	a, err := l.Cursor(0, "a")
	require.NoError(t, err)
	slow, err := l.Cursor(0, "a")
	require.NoError(t, err)
	buf := make([]store.Event, 0, 8)

	add("a", 3)
	buf, err = a.Next(ctx, buf[:0])
	require.NoError(t, err)
	require.Len(t, buf, 3)
	buf, err = slow.Next(ctx, buf[:0])
	require.NoError(t, err)
	require.Len(t, buf, 3)

	// Both are busy sending what they read; 80 events of b and 5 of a
	// come meanwhile.
	add("b", 40)
	add("a", 5)
	add("b", 40)
	buf, err = a.Next(ctx, buf[:0])
	require.NoError(t, err, "80 events of another pool do not make a cursor of pool a too slow")
	require.Len(t, buf, 5)
	require.Equal(t, int64(44), buf[0].Revision)

	// Nine of its own, one more than a read takes, past the allowance:
	// too slow, and it resumes from its last revision.
	add("a", 4)
	_, err = slow.Next(ctx, buf[:4]) // room for 4 in this read
	require.ErrorIs(t, err, store.ErrTooSlow)
	resumed, err := l.Cursor(3, "a")
	require.NoError(t, err)
	buf, err = resumed.Next(ctx, buf[:0])
	require.NoError(t, err)
	require.Len(t, buf, 8, "the first read after resuming")
}

// TestDeletedPoolDropsItsWait: the deletion of a pool wakes the cursors
// that wait for its events, and the entry they waited on goes unless one
// of them is still read: pools that come and go leave nothing behind.
func TestDeletedPoolDropsItsWait(t *testing.T) {
	l := New(100, 0)
	gone, err := l.Cursor(0, "gone")
	require.NoError(t, err)
	kept, err := l.Cursor(0, "kept")
	require.NoError(t, err)
	for _, c := range []*Cursor{gone, kept} {
		buf, err := c.Next(canceled(), make([]store.Event, 0, 8))
		require.ErrorIs(t, err, context.Canceled)
		require.Empty(t, buf)
	}
	require.Len(t, l.waiting, 2)

	// "gone" is deleted; its cursor is never read again.
	l.Append([]store.Event{{Type: store.EventDeletePool, Revision: 1, Pool: &store.Pool{ID: "gone"}}})
	require.Len(t, l.waiting, 1)
	l.Append([]store.Event{{Type: store.EventDeletePool, Revision: 2, Pool: &store.Pool{ID: "kept"}}})
	require.Empty(t, l.waiting)

	// "kept" is read again: it waits for the pool, created anew.
	buf, err := kept.Next(canceled(), make([]store.Event, 0, 8))
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, buf)
	require.Len(t, l.waiting, 1)
	l.Append(poolEvents("kept", 2, 1))
	buf, err = kept.Next(t.Context(), buf)
	require.NoError(t, err)
	require.Len(t, buf, 1)
	require.Equal(t, int64(3), buf[0].Revision)
}

// TestClosedCursorsLeaveTheirWait: cursors of a pool that caught up share
// the pool's wait; the last one closed takes it out of the log, and a
// Next waiting on it ends with ErrClosed. A closed cursor reads nothing
// more. It runs in a bubble, so synctest.Wait says when Next waits.
func TestClosedCursorsLeaveTheirWait(t *testing.T) {
	synctest.Test(t, testClosedCursorsLeaveTheirWait)
}

func testClosedCursorsLeaveTheirWait(t *testing.T) {
	l := New(100, 0)
	wait := func(c *Cursor) {
		t.Helper()
		buf, err := c.Next(canceled(), make([]store.Event, 0, 8))
		require.ErrorIs(t, err, context.Canceled)
		require.Empty(t, buf)
	}
	a, err := l.Cursor(0, "p")
	require.NoError(t, err)
	b, err := l.Cursor(0, "p")
	require.NoError(t, err)
	wait(a)
	wait(b)
	require.Len(t, l.waiting, 1)
	a.Close()
	a.Close()
	require.Len(t, l.waiting, 1, "b still waits")

	// b waits in Next while it is closed from another goroutine.
	done := make(chan error, 1)
	go func() {
		_, err := b.Next(t.Context(), make([]store.Event, 0, 8))
		done <- err
	}()
	synctest.Wait()
	select {
	case err := <-done:
		t.Fatalf("Next returned %v with nothing to read", err)
	default: // it waits
	}
	b.Close()
	synctest.Wait()
	select {
	case err := <-done:
		require.ErrorIs(t, err, store.ErrClosed)
	default:
		t.Fatal("Next still waits after Close")
	}
	require.Empty(t, l.waiting)

	l.Append(poolEvents("p", 0, 1))
	_, err = a.Next(t.Context(), make([]store.Event, 0, 8))
	require.ErrorIs(t, err, store.ErrClosed)
}

// watch reads l's history from rev through a channel.
func watch(ctx context.Context, l *Log, from int64) (<-chan store.Event, error) {
	c, err := l.Cursor(from, "")
	if err != nil {
		return nil, err
	}
	return storetest.Pump(ctx, c), nil
}
