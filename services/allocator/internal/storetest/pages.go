package storetest

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// pages reads every allocation of pool ("": of every pool) of s at rev a
// page of limit at a time and checks each page's revision and More.
func pages(t *testing.T, s store.Store, rev int64, pool string, limit int) (int64, []store.Allocation) {
	t.Helper()
	var (
		out   []store.Allocation
		after store.AllocationKey
	)
	for {
		pg, err := s.PageAllocations(t.Context(), rev, pool, after, limit)
		require.NoError(t, err)
		require.LessOrEqual(t, len(pg.Allocations), limit)
		if rev == 0 {
			rev = pg.Revision
		}
		require.Equal(t, rev, pg.Revision, "every page at the revision of the first")
		out = append(out, pg.Allocations...)
		if !pg.More {
			return rev, out
		}
		require.NotEmpty(t, pg.Allocations, "a page with more after it holds some")
		last := pg.Allocations[len(pg.Allocations)-1]
		after = store.AllocationKey{Pool: last.Pool, Address: last.Address}
	}
}

// testPageAllocations: a store's pages give what its snapshot holds, in
// the same order, in pages of the size asked for and across pools whose
// ids share a start, and one pool's what SnapshotPool gives; a page starts
// after the key it is given; a revision read again gives the same pages
// after later commits where the store keeps past revisions, and is
// refused where it does not; and a compacted revision is refused.
func testPageAllocations(t *testing.T, s store.Store, past bool) {
	pg := s
	ctx := t.Context()
	commit(t, s, txn(putPool(newPool("a", "10.0.0.0/24", "2001:db8::/64")), putPool(newPool("ab", "10.1.0.0/24")), putPool(newPool("b", "10.2.0.0/24"))))
	ops := []store.Op{
		putAlloc(newAlloc("a", "2001:db8::1", "v6")),
		putAlloc(newAlloc("a", "10.0.0.10", "ten")),
		putAlloc(newAlloc("a", "10.0.0.9", "nine")),
		putAlloc(newAlloc("ab", "10.1.0.1", "ab")),
	}
	for i := range 7 {
		ops = append(ops, putAlloc(newAlloc("b", fmt.Sprintf("10.2.0.%d", 20-i), fmt.Sprint("b", i))))
	}
	commit(t, s, txn(ops...))
	want := snapshot(t, s)
	require.Len(t, want.Allocations, 11)

	for _, limit := range []int{1, 2, 4, 11, 100} {
		rev, got := pages(t, pg, 0, "", limit)
		require.Equal(t, want.Revision, rev, "limit %d", limit)
		require.Equal(t, want.Allocations, got, "limit %d", limit)
		for _, pool := range []string{"a", "ab", "b", "nosuch"} {
			prev, allocs := pages(t, pg, 0, pool, 1000)
			rev, got := pages(t, pg, prev, pool, limit)
			require.Equal(t, prev, rev)
			require.Equal(t, allocs, got, "pool %s, limit %d", pool, limit)
		}
	}

	// After the key given, whichever pool comes next.
	tenth := store.AllocationKey{Pool: "a", Address: netip.MustParseAddr("10.0.0.10")}
	page, err := pg.PageAllocations(ctx, want.Revision, "", tenth, 2)
	require.NoError(t, err)
	require.Equal(t, want.Allocations[2:4], page.Allocations, "IPv6 after IPv4, then the next pool")
	require.True(t, page.More)
	page, err = pg.PageAllocations(ctx, want.Revision, "a", tenth, 2)
	require.NoError(t, err)
	require.Equal(t, want.Allocations[2:3], page.Allocations, "the pool's alone")
	require.False(t, page.More)
	page, err = pg.PageAllocations(ctx, want.Revision, "", store.AllocationKey{Pool: "a", Address: netip.MustParseAddr("10.0.0.11")}, 1)
	require.NoError(t, err)
	require.Equal(t, want.Allocations[2:3], page.Allocations, "a key that holds no allocation")
	page, err = pg.PageAllocations(ctx, want.Revision, "", store.AllocationKey{Pool: "b", Address: netip.MustParseAddr("10.2.0.20")}, 5)
	require.NoError(t, err)
	require.Empty(t, page.Allocations)
	require.False(t, page.More)
	_, err = pg.PageAllocations(ctx, 0, "", store.AllocationKey{Pool: "a"}, 1)
	require.Error(t, err, "a key with a pool but no address")
	_, err = pg.PageAllocations(ctx, 0, "ab", tenth, 1)
	require.Error(t, err, "a key of another pool")

	// The revision read again, after commits that change every pool.
	latest := commit(t, s, txn(delAlloc("a", "10.0.0.9"), putAlloc(newAlloc("ab", "10.1.0.2", "later")), delPool("b")))
	if past {
		_, again := pages(t, pg, want.Revision, "", 3)
		require.Equal(t, want.Allocations, again, "as they were at the revision")
		_, againB := pages(t, pg, want.Revision, "b", 3)
		require.Equal(t, want.Allocations[4:], againB, "a pool deleted since")
	} else {
		_, err := pg.PageAllocations(ctx, want.Revision, "", store.AllocationKey{}, 3)
		require.ErrorIs(t, err, store.ErrCompacted, "a past revision, not kept")
	}
	rev, now := pages(t, pg, 0, "", 3)
	require.Equal(t, latest, rev)
	require.Equal(t, snapshot(t, s).Allocations, now)

	c, ok := s.(Compactor)
	require.True(t, ok, "every store can compact")
	require.NoError(t, c.Compact(ctx, latest))
	_, err = pg.PageAllocations(ctx, want.Revision, "", store.AllocationKey{}, 3)
	require.ErrorIs(t, err, store.ErrCompacted)
	_, err = pg.PageAllocations(ctx, want.Revision, "a", store.AllocationKey{}, 3)
	require.ErrorIs(t, err, store.ErrCompacted)
	_, now2 := pages(t, pg, latest, "", 3)
	require.Equal(t, now, now2, "the revision it was compacted at is still there")
}

// testStreamSnapshot: a store hands over what Snapshot returns, in its
// order, and stops at the first error of the caller's.
func testStreamSnapshot(t *testing.T, s store.Store) {
	st := s
	ctx := t.Context()
	commit(t, s, txn(putPool(newPool("a", "10.0.0.0/24", "2001:db8::/64")), putPool(newPool("ab", "10.1.0.0/24"))))
	commit(t, s, txn(putAlloc(newAlloc("a", "2001:db8::1", "v6")), putAlloc(newAlloc("ab", "10.1.0.1", "ab")), putAlloc(newAlloc("a", "10.0.0.9", "nine")), putQuarantine("a", "10.0.0.3")))
	want := snapshot(t, s)

	got := &store.Snapshot{}
	var err error
	got.Revision, got.Quarantine, err = st.StreamSnapshot(ctx,
		func(ps []store.Pool, held []int) error {
			require.Empty(t, got.Allocations, "the pools first")
			got.Pools = ps
			require.Len(t, held, len(ps))
			if held[0] != 0 { // a store that knows tells the truth
				require.Equal(t, []int{2, 1}, held)
			}
			return nil
		},
		func(a *store.Allocation) error { got.Allocations = append(got.Allocations, *a); return nil })
	require.NoError(t, err)
	require.Equal(t, want, got, "Snapshot's order")

	stop := errors.New("enough")
	calls := 0
	_, _, err = st.StreamSnapshot(ctx, func([]store.Pool, []int) error { return nil }, func(*store.Allocation) error { calls++; return stop })
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, calls)
	_, _, err = st.StreamSnapshot(ctx, func([]store.Pool, []int) error { return stop }, func(*store.Allocation) error { calls++; return nil })
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, calls)
}
