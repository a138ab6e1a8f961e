package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// testRequestRetention: a request record answers retries for the
// retention period after the commit that put it, then the store drops it
// on its own, record by record: without an event, and leaving the
// allocations it names alone. Its id then counts as new. A record put
// again over an old one is kept for the period from the new put.
func testRequestRetention(t *testing.T, s store.Store, retention time.Duration) {
	ctx := t.Context()
	commit(t, s, txn(putPool(newPool("p", "10.0.0.0/24"))))
	put := func(id, addr, name string) int64 {
		t.Helper()
		return commit(t, s, store.Txn{Ops: []store.Op{
			putAlloc(newAlloc("p", addr, name)),
			{Kind: store.OpPutRequest, Request: &store.Request{ID: id, Allocations: []string{"p/" + addr}}},
		}})
	}
	// present reports whether request id is recorded, and checks that a
	// record still kept gives the answer of the put at revision rev.
	present := func(id, addr string, rev int64) bool {
		t.Helper()
		r, ok, err := s.GetRequest(ctx, id)
		require.NoError(t, err)
		if ok {
			require.Equal(t, store.Request{ID: id, Allocations: []string{"p/" + addr}, Revision: rev}, r)
		}
		return ok
	}
	// keptUntil checks the records stay for the retention period after
	// since (up to a tenth of it before the end: Never's last check may
	// otherwise land just past the moment the record is due to go, which
	// failed on a busy machine), then waits until the store drops them.
	// Expiry is checked often enough for a record kept too short a while
	// to show.
	keptUntil := func(since time.Time, missing func() bool) {
		t.Helper()
		require.Never(t, missing, retention-retention/10-time.Since(since), retention/50)
	}
	tick := retention / 50

	start1 := time.Now()
	rev1 := put("req-1", "10.0.0.1", "web-1")
	rev3 := put("req-3", "10.0.0.3", "web-3")
	ch, err := Watch(ctx, s, rev3)
	require.NoError(t, err)
	require.True(t, present("req-1", "10.0.0.1", rev1))
	require.True(t, present("req-3", "10.0.0.3", rev3))

	// Halfway through, put req-2 and req-3 again.
	require.Never(t, func() bool { return !present("req-1", "10.0.0.1", rev1) }, retention/2, tick)
	start2 := time.Now()
	rev2 := put("req-2", "10.0.0.2", "web-2")
	rev4 := put("req-3", "10.0.0.4", "web-4")

	keptUntil(start1, func() bool { return !present("req-1", "10.0.0.1", rev1) })
	require.Eventually(t, func() bool { return !present("req-1", "10.0.0.1", rev1) }, retention+20*time.Second, tick,
		"a record older than the retention period is dropped")
	keptUntil(start2, func() bool {
		return !present("req-2", "10.0.0.2", rev2) || !present("req-3", "10.0.0.4", rev4)
	})
	require.Eventually(t, func() bool {
		return !present("req-2", "10.0.0.2", rev2) && !present("req-3", "10.0.0.4", rev4)
	}, retention+20*time.Second, tick)

	// Dropping a record is no change a watcher sees.
	evs := receive(t, ch, 2)
	require.Equal(t, []int64{rev2, rev4}, []int64{evs[0].Revision, evs[1].Revision})
	requireQuiet(t, ch)
	snap := snapshot(t, s)
	require.Len(t, snap.Allocations, 4, "only the request records expire")

	// The ids count as new again.
	require.True(t, holds(t, s, store.Cond{Kind: store.CondRequestAbsent, RequestID: "req-1"}))
	require.True(t, holds(t, s, store.Cond{Kind: store.CondRequestAbsent, RequestID: "req-3"}))
	rev := put("req-1", "10.0.0.5", "web-5")
	require.True(t, present("req-1", "10.0.0.5", rev))
}
