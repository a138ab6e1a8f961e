package storetest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// history commits a small, varied history and returns the revisions of
// its commits and the events each should produce.
func history(t *testing.T, s store.Store) ([]int64, [][]string) {
	r1 := commit(t, s, txn(putPool(newPool("p", "10.0.0.0/24"))))
	r2 := commit(t, s, txn(putAlloc(newAlloc("p", "10.0.0.1", "web-0")), putAlloc(newAlloc("p", "10.0.0.2", "web-1"))))
	r3 := commit(t, s, txn(delAlloc("p", "10.0.0.1"), putQuarantine("p", "10.0.0.1")))
	r4 := commit(t, s, txn(putPool(newPool("p", "10.0.0.0/23"))))
	e := func(ev store.Event) string { return describe(ev) }
	a := func(addr, name string, rev int64) *store.Allocation {
		return &store.Allocation{Pool: "p", Address: netip.MustParseAddr(addr), Owner: owner(name, ""), Revision: rev}
	}
	q := &store.Quarantine{Pool: "p", Address: netip.MustParseAddr("10.0.0.1")}
	return []int64{r1, r2, r3, r4}, [][]string{
		{e(store.Event{Type: store.EventPutPool, Revision: r1, Pool: &store.Pool{ID: "p", Revision: r1}})},
		{
			e(store.Event{Type: store.EventPutAllocation, Revision: r2, Allocation: a("10.0.0.1", "web-0", r2)}),
			e(store.Event{Type: store.EventPutAllocation, Revision: r2, Allocation: a("10.0.0.2", "web-1", r2)}),
		},
		{
			e(store.Event{Type: store.EventDeleteAllocation, Revision: r3, Allocation: a("10.0.0.1", "web-0", r2)}),
			e(store.Event{Type: store.EventPutQuarantine, Revision: r3, Quarantine: q}),
		},
		{e(store.Event{Type: store.EventPutPool, Revision: r4, Pool: &store.Pool{ID: "p", Revision: r4}})},
	}
}

// requireLastOfRevision checks that exactly the last event of each
// revision in evs (whole revisions, in order) is marked Last.
func requireLastOfRevision(t *testing.T, evs []store.Event) {
	t.Helper()
	for i, ev := range evs {
		last := i == len(evs)-1 || evs[i+1].Revision != ev.Revision
		require.Equal(t, last, ev.Last, "event %d (%s) of revision %d", i, describe(ev), ev.Revision)
	}
}

func testWatchFromZero(t *testing.T, s store.Store) {
	_, want := history(t, s)
	ch, err := Watch(t.Context(), s, 0)
	require.NoError(t, err)
	all := slices.Concat(want...)
	got := receive(t, ch, len(all))
	require.Equal(t, all, describeAll(got))
	requireLastOfRevision(t, got)
	requireQuiet(t, ch)

	web9 := newAlloc("p", "10.0.0.9", "web-9")
	web9.CreatorCluster = "east"
	rev := commit(t, s, txn(putAlloc(web9)))
	ev := receive(t, ch, 1)[0]
	require.Equal(t, rev, ev.Revision)
	require.Equal(t, rev, ev.Allocation.Revision)
	require.Equal(t, normAlloc(*ev.Allocation), store.Allocation{
		Pool: "p", Address: netip.MustParseAddr("10.0.0.9"), Owner: owner("web-9", "uid-web-9"),
		CreateTime: t0, RequestID: "req-web-9", Revision: rev, CreatorCluster: "east",
	})
}

func testWatchFromRevision(t *testing.T, s store.Store) {
	revs, want := history(t, s)
	ch, err := Watch(t.Context(), s, revs[1])
	require.NoError(t, err)
	later := slices.Concat(want[2:]...)
	require.Equal(t, later, describeAll(receive(t, ch, len(later))))
	requireQuiet(t, ch)

	current, err := Watch(t.Context(), s, revs[3])
	require.NoError(t, err)
	requireQuiet(t, current)
	rev := commit(t, s, txn(delPool("p")))
	for _, c := range []<-chan store.Event{ch, current} {
		evs := receive(t, c, 2)
		require.Equal(t, []int64{rev, rev}, []int64{evs[0].Revision, evs[1].Revision})
		require.Equal(t, []bool{false, true}, []bool{evs[0].Last, evs[1].Last}, "only the commit's last event is marked")
		require.Equal(t, store.EventDeleteAllocation, evs[0].Type)
		require.Equal(t, store.EventDeletePool, evs[1].Type)
	}
}

func testWatchFromFutureRevision(t *testing.T, s store.Store) {
	from := commit(t, s, txn(putPool(newPool("p", "10.0.0.0/24"))))
	ch, err := Watch(t.Context(), s, from+1)
	require.NoError(t, err)
	commit(t, s, txn(putAlloc(newAlloc("p", "10.0.0.1", "web-0"))))
	rev := commit(t, s, txn(putAlloc(newAlloc("p", "10.0.0.2", "web-1"))))
	ev := receive(t, ch, 1)[0]
	require.Equal(t, rev, ev.Revision)
	require.Equal(t, "10.0.0.2", ev.Allocation.Address.String())
}

func testWatchCompacted(t *testing.T, s store.Store) {
	c, ok := s.(Compactor)
	require.True(t, ok, "%T does not implement storetest.Compactor", s)
	revs, want := history(t, s)
	require.NoError(t, c.Compact(t.Context(), revs[1]))

	for _, from := range []int64{0, revs[0]} {
		_, err := Watch(t.Context(), s, from)
		require.ErrorIs(t, err, store.ErrCompacted, "watch from %d after compacting %d", from, revs[1])
	}
	ch, err := Watch(t.Context(), s, revs[1])
	require.NoError(t, err)
	later := slices.Concat(want[2:]...)
	require.Equal(t, later, describeAll(receive(t, ch, len(later))))
}

func testWatchCancel(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := Watch(ctx, s, 0)
	require.NoError(t, err)
	commit(t, s, txn(putPool(newPool("p", "10.0.0.0/24"))))
	cancel()
	timeout := time.After(eventWait)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				// The store still works for others.
				commit(t, s, txn(putPool(newPool("q", "10.0.0.0/24"))))
				return
			}
			require.NoError(t, ev.Err, "a canceled watch ends by closing, not with an error")
		case <-timeout:
			require.FailNow(t, "watch channel not closed after cancel")
		}
	}
}

// testSlowWatcher: a watcher that reads nothing while many commits happen
// must not hold them up. It then gets a gap-free, ordered prefix of the
// events, and either all of them, or an error telling it to resume from its
// last revision (after which it gets the rest), or one telling it to
// re-list.
func testSlowWatcher(t *testing.T, s store.Store, history int) {
	from := snapshot(t, s).Revision
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := Watch(ctx, s, from)
	require.NoError(t, err)

	n := 1000
	if history > 0 {
		n = max(n, 2*history+1000)
	}
	revs := commitMany(t, s, n)
	got, endErr := readUntilEnd(t, ch, n)
	require.Equal(t, revs[:len(got)], got, "events must be an ordered prefix without gaps")
	if errors.Is(endErr, store.ErrTooSlow) {
		// Cut off while what it missed is still kept: resumed from its
		// last revision, it gets every event after it, none twice.
		last := from
		if len(got) > 0 {
			last = got[len(got)-1]
		}
		resumed, err := Watch(ctx, s, last)
		if errors.Is(err, store.ErrCompacted) && n > 2*history {
			// This watcher came back only after every commit, more
			// than the history holds; a watcher that resumes at once
			// finds its events (eventlog's TestTooSlowResumes).
			return
		}
		require.NoError(t, err, "a watcher cut off as too slow resumes from its last revision")
		require.Equal(t, revs, readResumed(t, resumed, got, n), "cut off and resumed, the watcher lost no event")
	}
	if history > 0 {
		require.Error(t, endErr, "a watcher %d events behind a history of %d must be told it fell behind", n, history)
	}
}

// commitMany commits n allocations from 8 goroutines at once and returns
// their revisions, sorted; none may fail.
func commitMany(t *testing.T, s store.Store, n int) []int64 {
	const committers = 8
	commitCtx, stop := context.WithTimeout(t.Context(), time.Minute)
	defer stop()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		revs []int64
		errs []error
	)
	for g := range committers {
		wg.Go(func() {
			for i := g; i < n; i += committers {
				addr := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String()
				rev, err := s.Commit(commitCtx, txn(putAlloc(newAlloc("p", addr, fmt.Sprint("w", i)))))
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					revs = append(revs, rev)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs, "commits failed or were held up while a watcher did not read")
	slices.Sort(revs)
	return revs
}

// readUntilEnd reads the revisions of a watch's events until it has n or
// the watch ends with an error, which must be ErrTooSlow or ErrCompacted
// and must close the channel.
func readUntilEnd(t *testing.T, ch <-chan store.Event, n int) ([]int64, error) {
	var (
		got    = []int64{} // not nil: the watch may end before its first event
		endErr error
	)
	timeout := time.After(eventWait)
	for done := false; !done; {
		select {
		case ev, ok := <-ch:
			switch {
			case !ok:
				require.FailNow(t, "watch channel closed without an error", "after %d events", len(got))
			case ev.Err != nil:
				endErr = ev.Err
				done = true
			default:
				got = append(got, ev.Revision)
				done = len(got) == n
			}
		case <-timeout:
			require.FailNow(t, "slow watcher neither caught up nor ended", "got %d of %d events", len(got), n)
		}
	}
	if endErr != nil {
		if !errors.Is(endErr, store.ErrTooSlow) {
			require.ErrorIs(t, endErr, store.ErrCompacted)
		}
		select {
		case _, ok := <-ch:
			require.False(t, ok, "a watch must close after its error")
		case <-time.After(eventWait):
			require.FailNow(t, "watch channel not closed after its error")
		}
	}
	return got, endErr
}

// readResumed appends the revisions of a resumed watch's events to got
// until it holds n.
func readResumed(t *testing.T, resumed <-chan store.Event, got []int64, n int) []int64 {
	timeout := time.After(eventWait)
	for len(got) < n {
		select {
		case ev, ok := <-resumed:
			require.True(t, ok, "the resumed watch closed after %d of %d events", len(got), n)
			require.NoError(t, ev.Err)
			got = append(got, ev.Revision)
		case <-timeout:
			require.FailNow(t, "the resumed watch did not catch up", "got %d of %d events", len(got), n)
		}
	}
	return got
}
