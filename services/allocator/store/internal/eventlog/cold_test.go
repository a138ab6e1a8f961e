package eventlog

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// mixedEvents are n commits of every kind of event, with the records
// filled in as stores fill them, from revision rev+1.
func mixedEvents(rev int64, n int) []store.Event {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	var evs []store.Event
	for i := range n {
		rev++
		pool := fmt.Sprintf("pool-%d", i%3)
		a := &store.Allocation{
			Pool: pool, Address: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}),
			Owner:      decide.Owner{Cluster: "east", Kind: "Service", Namespace: "ns", Name: fmt.Sprintf("svc-%d", i), UID: "3f2b8c1e-5d4a-4c3b-9e8f"},
			CreateTime: t0.Add(time.Duration(i) * time.Second), RequestID: fmt.Sprintf("req-%d", i), Revision: rev,
		}
		switch i % 5 {
		case 0:
			p := &store.Pool{
				ID: pool, CIDRs: []string{"10.0.0.0/8", "fd00::/64"}, Reserved: []string{"10.0.0.1"},
				Labels: map[string]string{"team": "net"}, ReuseDelay: time.Second,
				CreateTime: t0, UpdateTime: t0.Add(time.Hour), Revision: rev,
			}
			evs = append(evs, store.Event{Type: store.EventPutPool, Revision: rev, Pool: p})
		case 1:
			a.Address = netip.MustParseAddr(fmt.Sprintf("fd00::%x", i))
			evs = append(evs, store.Event{Type: store.EventPutAllocation, Revision: rev, Allocation: a})
		case 2:
			// A release: the allocation as it was, then its quarantine.
			a.Revision = rev - 1
			q := &store.Quarantine{Pool: pool, Address: a.Address, Until: t0.Add(time.Minute)}
			evs = append(evs,
				store.Event{Type: store.EventDeleteAllocation, Revision: rev, Allocation: a},
				store.Event{Type: store.EventPutQuarantine, Revision: rev, Quarantine: q})
		default:
			evs = append(evs, store.Event{Type: store.EventPutAllocation, Revision: rev, Allocation: a})
		}
	}
	return evs
}

// appendCommits appends evs about per events at a time, never cutting a
// revision's events in two.
// after, if set, is called after each append.
func appendCommits(l *Log, evs []store.Event, per int, after ...func()) {
	for len(evs) > 0 {
		n := min(per, len(evs))
		for n < len(evs) && evs[n].Revision == evs[n-1].Revision {
			n++
		}
		l.Append(evs[:n])
		evs = evs[n:]
		for _, f := range after {
			f()
		}
	}
}

// readAll reads c until it has n events.
func readAll(t *testing.T, c *Cursor, n int) []store.Event {
	t.Helper()
	var out []store.Event
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	buf := make([]store.Event, 0, 50)
	for len(out) < n {
		var err error
		buf, err = c.Next(ctx, buf[:0])
		require.NoError(t, err, "after %d events", len(out))
		out = append(out, buf...)
	}
	return out
}

// withLast sets Last as the log does: on the last event of each revision.
func withLast(evs []store.Event) []store.Event {
	out := make([]store.Event, len(evs))
	for i, ev := range evs {
		ev.Last = i == len(evs)-1 || evs[i+1].Revision != ev.Revision
		out[i] = ev
	}
	return out
}

// TestColdEventsReadAsAppended: events read back from the encoded history
// (further behind than the last events kept as they came) equal those
// appended, every kind of event and record, for a cursor of every pool
// and one of a single pool.
func TestColdEventsReadAsAppended(t *testing.T) {
	l := newLog(1000, DefaultBytes, 0)
	require.Len(t, l.hot, 125)
	evs := mixedEvents(0, 400)
	appendCommits(l, evs, 7)
	want := withLast(evs)
	c, err := l.Cursor(0, "")
	require.NoError(t, err)
	require.Equal(t, want, readAll(t, c, len(want)))

	var pool1 []store.Event
	for _, ev := range want {
		if ev.Allocation != nil && ev.Allocation.Pool == "pool-1" {
			pool1 = append(pool1, ev)
		}
	}
	c, err = l.Cursor(0, "pool-1")
	require.NoError(t, err)
	require.Equal(t, pool1, readAll(t, c, len(pool1)))
}

// TestHistoryBoundedByBytes: past its byte budget the log drops its
// oldest events (whole blocks of them) however few it holds, and watches
// must start after them.
func TestHistoryBoundedByBytes(t *testing.T) {
	const budget = 4 * blockSize
	l := newLog(100_000, budget, 0)
	evs := mixedEvents(0, 20_000)
	appendCommits(l, evs, 10, func() { require.LessOrEqual(t, l.bytes, budget) })
	kept := int(l.head - l.tail)
	require.Less(t, kept, len(evs)/2, "the bytes, not the count, bound the history")
	require.Greater(t, kept, len(evs)/20)
	compacted := l.Compacted()
	require.Equal(t, evs[len(evs)-kept-1].Revision, compacted, "the revision of the last event dropped")
	_, err := l.Cursor(compacted-1, "")
	require.ErrorIs(t, err, store.ErrCompacted)
	c, err := l.Cursor(compacted, "")
	require.NoError(t, err)
	var want []store.Event
	for _, ev := range withLast(evs) {
		if ev.Revision > compacted {
			want = append(want, ev)
		}
	}
	require.Equal(t, want, readAll(t, c, len(want)))

	// Compact drops blocks too.
	l.Compact(evs[len(evs)-5].Revision)
	require.Len(t, l.blocks, 1)
	require.Equal(t, blockSize, l.bytes)
}

// collidingPools returns two pool names whose hashes in l are equal.
func collidingPools(t *testing.T, l *Log) (string, string) {
	seen := make(map[uint32]string, 1<<20)
	for i := range 1 << 22 {
		name := fmt.Sprintf("pool-%d", i)
		h := l.poolHash(name)
		if other, ok := seen[h]; ok {
			return other, name
		}
		seen[h] = name
	}
	require.FailNow(t, "no two pool names with the same hash")
	return "", ""
}

// TestPoolCursorOfCollidingHash: a cursor of one pool chooses events by a
// hash of the pool name, so it drops those of another pool with the same
// hash once it has them, read as they came or decoded. It runs in a bubble,
// so synctest.Wait says that the caught-up cursor still waits.
func TestPoolCursorOfCollidingHash(t *testing.T) {
	synctest.Test(t, testPoolCursorOfCollidingHash)
}

func testPoolCursorOfCollidingHash(t *testing.T) {
	l := newLog(1000, DefaultBytes, 0)
	a, b := collidingPools(t, l)
	var evs []store.Event
	for i := range 300 {
		pool := a
		if i%3 > 0 {
			pool = b
		}
		evs = append(evs, poolEvents(pool, int64(i), 1)...)
	}
	l.Append(evs)
	c, err := l.Cursor(0, a)
	require.NoError(t, err)
	got := readAll(t, c, 100)
	for i, ev := range got {
		require.Equal(t, a, ev.Allocation.Pool)
		require.Equal(t, int64(3*i+1), ev.Revision)
	}
	// Caught up, the cursor waits for its own pool's events, not b's,
	// whether they came before it waited or while it waits.
	l.Append(poolEvents(b, 300, 1))
	type result struct {
		buf []store.Event
		err error
	}
	next := make(chan result, 1)
	go func() {
		buf, err := c.Next(t.Context(), make([]store.Event, 0, 8))
		next <- result{buf, err}
	}()
	waits := func() {
		t.Helper()
		synctest.Wait()
		select {
		case r := <-next:
			t.Fatalf("the cursor of %s read %v, %v", a, r.buf, r.err)
		default:
		}
	}
	waits()
	l.Append(poolEvents(b, 301, 1))
	waits()
	l.Append(poolEvents(a, 302, 1))
	r := <-next
	require.NoError(t, r.err)
	require.Len(t, r.buf, 1)
	require.Equal(t, int64(303), r.buf[0].Revision)
}

// TestColdReadsWhileAppending: cursors decode the encoded history outside
// the log's lock while appends evict the blocks they read (run under the
// race detector by make test). The readers report to the test goroutine,
// which alone may end the test.
func TestColdReadsWhileAppending(t *testing.T) {
	l := newLog(4000, 2*blockSize, 0)
	evs := mixedEvents(0, 20_000)
	last := evs[len(evs)-1].Revision
	read := func(r int) error {
		from := int64(0)
		buf := make([]store.Event, 0, 64)
		for from < last {
			c, err := l.Cursor(from, "")
			if err != nil {
				if !errors.Is(err, store.ErrCompacted) {
					return fmt.Errorf("reader %d: cursor from %d: %w", r, from, err)
				}
				from = l.Compacted()
				continue
			}
			for {
				buf, err = c.Next(t.Context(), buf[:0])
				for _, ev := range buf {
					if ev.Revision <= from {
						return fmt.Errorf("reader %d: revision %d after %d", r, ev.Revision, from)
					}
					if ev.Pool == nil && ev.Allocation == nil && ev.Quarantine == nil {
						return fmt.Errorf("reader %d: revision %d: an empty event", r, ev.Revision)
					}
					if ev.Last {
						from = ev.Revision
					}
				}
				if err != nil {
					// Cut off, it resumes from its last whole revision.
					if !errors.Is(err, store.ErrCompacted) && !errors.Is(err, store.ErrTooSlow) {
						return fmt.Errorf("reader %d: %w", r, err)
					}
					break
				}
				if from == last {
					return nil
				}
			}
		}
		return nil
	}
	errs := make(chan error, 4)
	for r := range 4 {
		go func() { errs <- read(r) }()
	}
	appendCommits(l, evs, 5)
	for range 4 {
		require.NoError(t, <-errs)
	}
}

// TestCursorsShareDecodedEvents: cursors reading the same events behind
// the hot ones at the same time share one decoding of each (the same
// records), and once no cursor is in a segment, its decoded events are
// the collector's.
func TestCursorsShareDecodedEvents(t *testing.T) {
	l := newLog(4000, DefaultBytes, 0)
	evs := mixedEvents(0, 3000)
	appendCommits(l, evs, 5)
	cursor := func() *Cursor {
		c, err := l.Cursor(0, "")
		require.NoError(t, err)
		return c
	}
	// In step, 64 events at a time: the cursor ahead is still in the
	// segment the other reads.
	a, b := cursor(), cursor()
	var gotA, gotB []store.Event
	for len(gotA) < 640 {
		bufA, err := a.Next(t.Context(), make([]store.Event, 0, 64))
		require.NoError(t, err)
		bufB, err := b.Next(t.Context(), make([]store.Event, 0, 64))
		require.NoError(t, err)
		require.Len(t, bufA, 64)
		gotA, gotB = append(gotA, bufA...), append(gotB, bufB...)
	}
	require.Equal(t, withLast(evs)[:640], gotA)
	for i := range gotA {
		require.True(t, gotA[i].Pool == gotB[i].Pool && gotA[i].Allocation == gotB[i].Allocation && gotA[i].Quarantine == gotB[i].Quarantine,
			"event %d decoded twice", i)
	}
	require.NotEmpty(t, l.segs)
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	a, b, gotA, gotB = nil, nil, nil, nil
	runtime.GC()
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, seg := range l.segs {
		require.Nil(t, seg.Value(), "segment %d still held", k)
	}
}
