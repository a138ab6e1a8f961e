package storetest

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

func testEmptyStore(t *testing.T, s store.Store) {
	snap := snapshot(t, s)
	require.Empty(t, snap.Pools)
	require.Empty(t, snap.Allocations)
	require.Empty(t, snap.Quarantine)
	_, ok, err := s.GetRequest(t.Context(), "nothing")
	require.NoError(t, err)
	require.False(t, ok)

	rev := commit(t, s, txn(putPool(newPool("p", "10.0.0.0/24"))))
	require.Equal(t, snap.Revision+1, rev)
}

// testRoundTrip checks every field of every record comes back as written,
// with the store's revision filled in.
func testRoundTrip(t *testing.T, s store.Store) {
	p4 := newPool("p4", "10.0.0.0/24", "10.1.0.0/16")
	p6 := &store.Pool{ID: "p6", CIDRs: []string{"2001:db8::/64"}, CreateTime: t0}
	a4 := newAlloc("p4", "10.0.0.10", "web-0")
	a4.Owner = decide.Owner{Cluster: "", Kind: "ClusterSetService", Namespace: "ns", Name: "svc", UID: ""}
	a4.CreatorCluster = "c1"
	a6 := newAlloc("p6", "2001:db8::ff", "web-1")
	a6.RequestID = ""
	q := putQuarantine("p6", "2001:db8::1")
	rev := commit(t, s, txn(putPool(p4), putPool(p6), putAlloc(a4), putAlloc(a6), q))

	snap := snapshot(t, s)
	require.Equal(t, rev, snap.Revision)
	wantP4, wantP6 := *p4, *p6
	wantP4.Revision, wantP6.Revision = rev, rev
	require.Equal(t, []store.Pool{normPool(wantP4), normPool(wantP6)}, snap.Pools)
	wantA4, wantA6 := *a4, *a6
	wantA4.Revision, wantA6.Revision = rev, rev
	require.Equal(t, []store.Allocation{wantA4, wantA6}, snap.Allocations)
	require.Equal(t, []store.Quarantine{*q.Quarantine}, snap.Quarantine)

	// The store keeps its own copy: changing what was committed changes
	// nothing stored.
	p4.Labels["team"] = "changed"
	p4.CIDRs[0] = "192.0.2.0/24"
	require.Equal(t, snap, snapshot(t, s))
}

// testSnapshotPool: a pool's pages hold its allocations in address
// order, IPv4 first, and no other pool's, not even one whose id starts
// with its id; an unknown pool has none, at the current revision.
func testSnapshotPool(t *testing.T, s store.Store) {
	commit(t, s, txn(putPool(newPool("a", "10.0.0.0/24", "2001:db8::/64")), putPool(newPool("ab", "10.1.0.0/24"))))
	commit(t, s, txn(putAlloc(newAlloc("a", "2001:db8::1", "v6")), putAlloc(newAlloc("a", "10.0.0.9", "nine")), putAlloc(newAlloc("ab", "10.1.0.1", "other"))))
	rev := commit(t, s, txn(putAlloc(newAlloc("a", "10.0.0.10", "ten"))))

	got, allocs := pages(t, s, 0, "a", 1000)
	require.Equal(t, rev, got)
	var names []string
	for _, a := range allocs {
		require.Equal(t, "a", a.Pool)
		names = append(names, a.Owner.Name)
	}
	require.Equal(t, []string{"nine", "ten", "v6"}, names)
	full := snapshot(t, s)
	require.Equal(t, full.Allocations[:3], allocs, "as the whole-store snapshot has them")

	got, allocs = pages(t, s, 0, "nosuch", 1000)
	require.Equal(t, rev, got)
	require.Empty(t, allocs)
}

func testConditions(t *testing.T, s store.Store) {
	ctx := t.Context()
	rPool := commit(t, s, txn(putPool(newPool("p", "10.0.0.0/24"))))
	a := newAlloc("p", "10.0.0.1", "web-0")
	rAlloc := commit(t, s, txn(putAlloc(a)))
	commit(t, s, txn(store.Op{Kind: store.OpPutRequest, Request: &store.Request{ID: "req-1"}}))
	sameKeyOtherUID := a.Owner
	sameKeyOtherUID.UID = "another-uid"
	otherName := a.Owner
	otherName.Name = "web-1"
	addr1, addr2 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")

	tests := []struct {
		name string
		cond store.Cond
		want bool
	}{
		{"pool absent: existing", store.Cond{Kind: store.CondPoolAbsent, Pool: "p"}, false},
		{"pool absent: missing", store.Cond{Kind: store.CondPoolAbsent, Pool: "q"}, true},
		{"pool absent: prefix of existing", store.Cond{Kind: store.CondPoolAbsent, Pool: "pp"}, true},
		{"pool revision: current", store.Cond{Kind: store.CondPoolRevision, Pool: "p", Revision: rPool}, true},
		{"pool revision: other", store.Cond{Kind: store.CondPoolRevision, Pool: "p", Revision: rAlloc}, false},
		{"pool revision: missing pool", store.Cond{Kind: store.CondPoolRevision, Pool: "q", Revision: rPool}, false},
		{"allocation absent: held", store.Cond{Kind: store.CondAllocationAbsent, Pool: "p", Address: addr1}, false},
		{"allocation absent: free", store.Cond{Kind: store.CondAllocationAbsent, Pool: "p", Address: addr2}, true},
		{"allocation absent: other pool", store.Cond{Kind: store.CondAllocationAbsent, Pool: "q", Address: addr1}, true},
		{"allocation revision: current", store.Cond{Kind: store.CondAllocationRevision, Pool: "p", Address: addr1, Revision: rAlloc}, true},
		{"allocation revision: other", store.Cond{Kind: store.CondAllocationRevision, Pool: "p", Address: addr1, Revision: rPool}, false},
		{"allocation revision: free address", store.Cond{Kind: store.CondAllocationRevision, Pool: "p", Address: addr2, Revision: rAlloc}, false},
		{"owner absent: holder", ownerAbsent("p", a.Owner), false},
		{"owner absent: same key, other uid", ownerAbsent("p", sameKeyOtherUID), false},
		{"owner absent: other name", ownerAbsent("p", otherName), true},
		{"owner absent: other pool", ownerAbsent("q", a.Owner), true},
		{"request absent: recorded", store.Cond{Kind: store.CondRequestAbsent, RequestID: "req-1"}, false},
		{"request absent: unknown", store.Cond{Kind: store.CondRequestAbsent, RequestID: "req-2"}, true},
		{"pool empty: holds an allocation", store.Cond{Kind: store.CondPoolEmpty, Pool: "p"}, false},
		{"pool empty: missing pool", store.Cond{Kind: store.CondPoolEmpty, Pool: "q"}, true},
		{"pool empty: prefix of a pool that holds one", store.Cond{Kind: store.CondPoolEmpty, Pool: "pp"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, err := s.Snapshot(ctx)
			require.NoError(t, err)
			got := holds(t, s, tc.cond)
			require.Equal(t, tc.want, got)
			after, err := s.Snapshot(ctx)
			require.NoError(t, err)
			if tc.want {
				require.Equal(t, before.Revision+1, after.Revision)
			} else {
				require.Equal(t, before.Revision, after.Revision, "a failed condition must not take a revision")
			}
		})
	}

	// Conditions are a conjunction: one failing condition among holding
	// ones fails the transaction.
	requireConflict(t, s, store.Txn{
		Conds: []store.Cond{tests[1].cond, tests[3].cond, tests[6].cond, tests[8].cond},
		Ops:   []store.Op{putAlloc(newAlloc("p", "10.0.0.3", "web-3"))},
	})
	// Conditions see the state before the transaction's own ops.
	commit(t, s, store.Txn{
		Conds: []store.Cond{allocAbsent("p", "10.0.0.3"), ownerAbsent("p", owner("web-4", "uid-web-4"))},
		Ops:   []store.Op{putAlloc(newAlloc("p", "10.0.0.3", "web-4"))},
	})
	snap := snapshot(t, s)
	require.Len(t, snap.Allocations, 2)
	require.Equal(t, "web-4", snap.Allocations[1].Owner.Name)
}

func testFailedConditionWritesNothing(t *testing.T, s store.Store) {
	commit(t, s, txn(putPool(newPool("p", "10.0.0.0/24")), putPool(newPool("r", "10.2.0.0/24")), putAlloc(newAlloc("p", "10.0.0.1", "web-0"))))
	ch, err := Watch(t.Context(), s, snapshot(t, s).Revision)
	require.NoError(t, err)

	// Every kind of op, guarded by conditions of which only the last
	// fails.
	requireConflict(t, s, store.Txn{
		Conds: []store.Cond{
			allocAbsent("p", "10.0.0.2"),
			ownerAbsent("p", owner("web-2", "x")),
			{Kind: store.CondRequestAbsent, RequestID: "r"},
			allocAbsent("p", "10.0.0.1"),
		},
		Ops: []store.Op{
			putPool(newPool("q", "10.1.0.0/24")),
			putAlloc(newAlloc("p", "10.0.0.2", "web-2")),
			delAlloc("p", "10.0.0.1"),
			putQuarantine("p", "10.0.0.3"),
			{Kind: store.OpPutRequest, Request: &store.Request{ID: "r"}},
			delPool("r"),
		},
	})
	_, ok, err := s.GetRequest(t.Context(), "r")
	require.NoError(t, err)
	require.False(t, ok, "a failed transaction recorded its request")
	requireQuiet(t, ch)
}

func testRevisionsIncreaseByOne(t *testing.T, s store.Store) {
	last := snapshot(t, s).Revision
	for i := range 20 {
		addr := netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}).String()
		rev := commit(t, s, store.Txn{Conds: []store.Cond{allocAbsent("p", addr)}, Ops: []store.Op{putAlloc(newAlloc("p", addr, "w"))}})
		require.Equal(t, last+1, rev)
		last = rev
		if i%5 == 0 {
			_, err := s.Commit(t.Context(), store.Txn{Conds: []store.Cond{allocAbsent("p", addr)}, Ops: []store.Op{putAlloc(newAlloc("p", addr, "w"))}})
			require.ErrorIs(t, err, store.ErrConflict)
		}
	}
	require.Equal(t, last, snapshot(t, s).Revision)
}

// testAllocationEtag checks the revision of an allocation works as its
// etag: a guarded release succeeds against the revision seen, and fails
// once the address changed hands.
func testAllocationEtag(t *testing.T, s store.Store) {
	rp := commit(t, s, txn(putPool(newPool("p", "10.0.0.0/24"))))
	r1 := commit(t, s, txn(putAlloc(newAlloc("p", "10.0.0.1", "web-0"))))
	commit(t, s, txn(putAlloc(newAlloc("p", "10.0.0.2", "web-1"))))
	snap := snapshot(t, s)
	require.Equal(t, r1, snap.Allocations[0].Revision, "a later commit changed another allocation's etag")
	require.Equal(t, rp, snap.Pools[0].Revision, "allocating changed the pool's etag")

	guarded := func(rev int64) store.Txn {
		return store.Txn{
			Conds: []store.Cond{{Kind: store.CondAllocationRevision, Pool: "p", Address: netip.MustParseAddr("10.0.0.1"), Revision: rev}},
			Ops:   []store.Op{delAlloc("p", "10.0.0.1")},
		}
	}
	// Released and handed to someone else: the old etag no longer
	// releases it.
	commit(t, s, guarded(r1))
	r3 := commit(t, s, store.Txn{Conds: []store.Cond{allocAbsent("p", "10.0.0.1")}, Ops: []store.Op{putAlloc(newAlloc("p", "10.0.0.1", "web-9"))}})
	requireConflict(t, s, guarded(r1))
	// Replacing an allocation in place gives it a new etag too.
	r4 := commit(t, s, txn(putAlloc(newAlloc("p", "10.0.0.1", "web-9"))))
	requireConflict(t, s, guarded(r3))
	commit(t, s, guarded(r4))
	require.Len(t, snapshot(t, s).Allocations, 1)
}

func testOwnerIndex(t *testing.T, s store.Store) {
	a := newAlloc("p", "10.0.0.1", "web-0")
	commit(t, s, txn(putPool(newPool("p", "10.0.0.0/24")), putAlloc(a)))
	otherUID := a.Owner
	otherUID.UID = "new-incarnation"
	require.False(t, holds(t, s, ownerAbsent("p", otherUID)), "the owner key must not include the uid")

	// Replacing the allocation with another owner moves the index entry.
	b := newAlloc("p", "10.0.0.1", "web-1")
	commit(t, s, txn(putAlloc(b)))
	require.True(t, holds(t, s, ownerAbsent("p", a.Owner)))
	require.False(t, holds(t, s, ownerAbsent("p", b.Owner)))

	commit(t, s, txn(delAlloc("p", "10.0.0.1")))
	require.True(t, holds(t, s, ownerAbsent("p", b.Owner)))

	// An owner holding two addresses (the store does not forbid it) stays
	// indexed until both are gone.
	c2, c3 := newAlloc("p", "10.0.0.2", "web-2"), newAlloc("p", "10.0.0.3", "web-2")
	commit(t, s, txn(putAlloc(c2), putAlloc(c3)))
	commit(t, s, txn(delAlloc("p", "10.0.0.2")))
	require.False(t, holds(t, s, ownerAbsent("p", c2.Owner)))
	commit(t, s, txn(delAlloc("p", "10.0.0.3")))
	require.True(t, holds(t, s, ownerAbsent("p", c2.Owner)))

	// Owner keys that share a prefix are different owners.
	long := newAlloc("p", "10.0.0.4", "web-22")
	commit(t, s, txn(putAlloc(long)))
	require.True(t, holds(t, s, ownerAbsent("p", c2.Owner)))
}

func testDeletePoolCascades(t *testing.T, s store.Store) {
	// "p2" extends "p": a store keyed by prefix must keep them apart.
	commit(t, s, txn(
		putPool(newPool("p", "10.0.0.0/24")),
		putPool(newPool("p2", "10.0.0.0/24")),
	))
	r1 := commit(t, s, txn(putAlloc(newAlloc("p", "10.0.0.2", "web-0"))))
	r2 := commit(t, s, txn(
		putAlloc(newAlloc("p", "10.0.0.1", "web-1")),
		putQuarantine("p", "10.0.0.3"),
		putAlloc(newAlloc("p2", "10.0.0.1", "web-0")),
		putQuarantine("p2", "10.0.0.3"),
	))
	from := snapshot(t, s).Revision
	ch, err := Watch(t.Context(), s, from)
	require.NoError(t, err)

	rev := commit(t, s, txn(delPool("p")))
	evs := receive(t, ch, 3)
	for _, ev := range evs {
		require.Equal(t, rev, ev.Revision)
	}
	require.ElementsMatch(t, []string{
		describe(store.Event{Type: store.EventDeleteAllocation, Revision: rev, Allocation: &store.Allocation{Pool: "p", Address: netip.MustParseAddr("10.0.0.1"), Owner: owner("web-1", ""), Revision: r2}}),
		describe(store.Event{Type: store.EventDeleteAllocation, Revision: rev, Allocation: &store.Allocation{Pool: "p", Address: netip.MustParseAddr("10.0.0.2"), Owner: owner("web-0", ""), Revision: r1}}),
	}, describeAll(evs[:2]))
	require.Equal(t, store.EventDeletePool, evs[2].Type, "the pool's deletion must come after its allocations'")
	require.Equal(t, "p", evs[2].Pool.ID)
	requireQuiet(t, ch)

	snap := snapshot(t, s)
	require.Len(t, snap.Pools, 1)
	require.Equal(t, "p2", snap.Pools[0].ID)
	require.Len(t, snap.Allocations, 1)
	require.Equal(t, "p2", snap.Allocations[0].Pool)
	require.Len(t, snap.Quarantine, 1)
	require.Equal(t, "p2", snap.Quarantine[0].Pool)

	require.True(t, holds(t, s, store.Cond{Kind: store.CondPoolAbsent, Pool: "p"}))
	require.True(t, holds(t, s, ownerAbsent("p", owner("web-0", ""))))
	require.True(t, holds(t, s, ownerAbsent("p", owner("web-1", ""))))
	require.False(t, holds(t, s, ownerAbsent("p2", owner("web-0", ""))))

	// A pool created again under the same id starts empty.
	commit(t, s, store.Txn{
		Conds: []store.Cond{{Kind: store.CondPoolAbsent, Pool: "p"}, allocAbsent("p", "10.0.0.1")},
		Ops:   []store.Op{putPool(newPool("p", "10.0.0.0/24")), putAlloc(newAlloc("p", "10.0.0.1", "web-5"))},
	})
	snap = snapshot(t, s)
	require.Len(t, snap.Allocations, 2)
	require.Len(t, snap.Quarantine, 1)
}

func testPutAllocationClearsQuarantine(t *testing.T, s store.Store) {
	commit(t, s, txn(putPool(newPool("p", "10.0.0.0/24")), putAlloc(newAlloc("p", "10.0.0.1", "web-0"))))
	from := commit(t, s, txn(delAlloc("p", "10.0.0.1"), putQuarantine("p", "10.0.0.1"), putQuarantine("p", "10.0.0.2")))
	snap := snapshot(t, s)
	require.Empty(t, snap.Allocations)
	require.Len(t, snap.Quarantine, 2)

	ch, err := Watch(t.Context(), s, from-1)
	require.NoError(t, err)
	evs := receive(t, ch, 3)
	require.Equal(t, []store.EventType{store.EventDeleteAllocation, store.EventPutQuarantine, store.EventPutQuarantine},
		[]store.EventType{evs[0].Type, evs[1].Type, evs[2].Type})
	require.Equal(t, &store.Quarantine{Pool: "p", Address: netip.MustParseAddr("10.0.0.1"), Until: t1}, normQuarantine(evs[1].Quarantine))

	commit(t, s, txn(putAlloc(newAlloc("p", "10.0.0.1", "web-1"))))
	snap = snapshot(t, s)
	require.Len(t, snap.Allocations, 1)
	require.Equal(t, []store.Quarantine{{Pool: "p", Address: netip.MustParseAddr("10.0.0.2"), Until: t1}}, snap.Quarantine)
}

func normQuarantine(q *store.Quarantine) *store.Quarantine {
	if q == nil {
		return nil
	}
	out := *q
	out.Until = normTime(out.Until)
	return &out
}

// testDeleteMissingIsNoOp: deleting what is not there succeeds, takes a
// revision and emits nothing.
func testDeleteMissingIsNoOp(t *testing.T, s store.Store) {
	from := commit(t, s, txn(putPool(newPool("p", "10.0.0.0/24"))))
	ch, err := Watch(t.Context(), s, from)
	require.NoError(t, err)
	rev := commit(t, s, txn(delAlloc("p", "10.0.0.1"), delPool("nope"), delAlloc("other", "10.0.0.1")))
	require.Equal(t, from+1, rev)
	requireQuiet(t, ch)
	require.Len(t, snapshot(t, s).Pools, 1)
}

func testRequests(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, ok, err := s.GetRequest(ctx, "req-1")
	require.NoError(t, err)
	require.False(t, ok)

	from := commit(t, s, txn(putPool(newPool("p", "10.0.0.0/24"))))
	ch, err := Watch(ctx, s, from)
	require.NoError(t, err)
	record := func(id string, keys ...string) store.Txn {
		return store.Txn{
			Conds: []store.Cond{{Kind: store.CondRequestAbsent, RequestID: id}},
			Ops:   []store.Op{{Kind: store.OpPutRequest, Request: &store.Request{ID: id, Allocations: keys}}},
		}
	}
	rev := commit(t, s, record("req-1", "p/10.0.0.1", "p6/2001:db8::1"))
	got, ok, err := s.GetRequest(ctx, "req-1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, store.Request{ID: "req-1", Allocations: []string{"p/10.0.0.1", "p6/2001:db8::1"}, Revision: rev}, got)

	requireConflict(t, s, record("req-1", "p/10.0.0.2"))
	got, _, err = s.GetRequest(ctx, "req-1")
	require.NoError(t, err)
	require.Equal(t, []string{"p/10.0.0.1", "p6/2001:db8::1"}, got.Allocations)

	// A request record is not an event: the next event a watcher sees is
	// the next allocation.
	next := commit(t, s, txn(putAlloc(newAlloc("p", "10.0.0.1", "web-0"))))
	evs := receive(t, ch, 1)
	require.Equal(t, next, evs[0].Revision)
	require.Equal(t, store.EventPutAllocation, evs[0].Type)

	// A request with no allocations reads back the same.
	rev = commit(t, s, record("empty"))
	got, ok, err = s.GetRequest(ctx, "empty")
	require.NoError(t, err)
	require.True(t, ok)
	require.Empty(t, got.Allocations)
	require.Equal(t, rev, got.Revision)
}

func testInvalidTxn(t *testing.T, s store.Store) {
	addr := netip.MustParseAddr("10.0.0.1")
	zoned := netip.MustParseAddr("fe80::1%eth0")
	tests := []struct {
		name string
		txn  store.Txn
	}{
		{"no ops", store.Txn{Conds: []store.Cond{allocAbsent("p", "10.0.0.1")}}},
		{"nil pool", txn(store.Op{Kind: store.OpPutPool})},
		{"empty pool id", txn(putPool(&store.Pool{}))},
		{"NUL in pool id", txn(putPool(&store.Pool{ID: "p\x00q"}))},
		{"nil allocation", txn(store.Op{Kind: store.OpPutAllocation})},
		{"invalid address", txn(putAlloc(&store.Allocation{Pool: "p"}))},
		{"zoned address", txn(putAlloc(&store.Allocation{Pool: "p", Address: zoned}))},
		{"NUL in owner", txn(putAlloc(&store.Allocation{Pool: "p", Address: addr, Owner: decide.Owner{Name: "a\x00b"}}))},
		{"delete without pool", txn(store.Op{Kind: store.OpDeleteAllocation, Address: addr})},
		{"nil quarantine", txn(store.Op{Kind: store.OpPutQuarantine})},
		{"nil request", txn(store.Op{Kind: store.OpPutRequest})},
		{"empty request id", txn(store.Op{Kind: store.OpPutRequest, Request: &store.Request{}})},
		{"unknown op", txn(store.Op{Kind: 99})},
		{"unknown condition", store.Txn{Conds: []store.Cond{{Kind: 99, Pool: "p"}}, Ops: []store.Op{delPool("p")}}},
		{"condition without address", store.Txn{Conds: []store.Cond{{Kind: store.CondAllocationAbsent, Pool: "p"}}, Ops: []store.Op{delPool("p")}}},
		{"pools unchanged since a negative revision", store.Txn{Conds: []store.Cond{poolsUnchangedSince(-1)}, Ops: []store.Op{delPool("p")}}},
		{"range without an end", store.Txn{Conds: []store.Cond{{Kind: store.CondRangeFree, Pool: "p", Address: addr}}, Ops: []store.Op{delPool("p")}}},
		{"range out of order", store.Txn{Conds: []store.Cond{rangeFree("p", "10.0.0.2", "10.0.0.1")}, Ops: []store.Op{delPool("p")}}},
		{"range of two families", store.Txn{Conds: []store.Cond{rangeFree("p", "10.0.0.1", "fd00::1")}, Ops: []store.Op{delPool("p")}}},
		{"range without a pool", store.Txn{Conds: []store.Cond{rangeFree("", "10.0.0.1", "10.0.0.2")}, Ops: []store.Op{delPool("p")}}},
		// No two ops of a txn name the same record.
		{"allocation put twice", txn(putAlloc(newAlloc("p", "10.0.0.1", "a")), putAlloc(newAlloc("p", "10.0.0.1", "b")))},
		{"allocation put and deleted", txn(putAlloc(newAlloc("p", "10.0.0.1", "a")), delAlloc("p", "10.0.0.1"))},
		{"allocation deleted twice", txn(delAlloc("p", "10.0.0.1"), delAlloc("p", "10.0.0.1"))},
		{"quarantine put over a put allocation", txn(putAlloc(newAlloc("p", "10.0.0.1", "a")), putQuarantine("p", "10.0.0.1"))},
		{"quarantine put twice", txn(putQuarantine("p", "10.0.0.1"), putQuarantine("p", "10.0.0.1"))},
		{"pool put twice", txn(putPool(newPool("p", "10.0.0.0/24")), putPool(newPool("p", "10.0.0.0/16")))},
		{"pool put and deleted", txn(putPool(newPool("p", "10.0.0.0/24")), delPool("p"))},
		{"pool deleted after a put in it", txn(putAlloc(newAlloc("p", "10.0.0.1", "a")), delPool("p"))},
		{"pool deleted before a quarantine in it", txn(delPool("p"), putQuarantine("p", "10.0.0.1"))},
		{"request put twice", txn(store.Op{Kind: store.OpPutRequest, Request: &store.Request{ID: "r"}}, store.Op{Kind: store.OpPutRequest, Request: &store.Request{ID: "r"}})},
	}
	before := snapshot(t, s)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Commit(t.Context(), tc.txn)
			require.ErrorIs(t, err, store.ErrInvalid)
		})
	}
	require.Equal(t, before, snapshot(t, s))
}

func testCanceledContext(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Commit(ctx, txn(putPool(newPool("p", "10.0.0.0/24"))))
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, snapshot(t, s).Pools)
}

func testClose(t *testing.T, s store.Store) {
	ctx := t.Context()
	from := commit(t, s, txn(putPool(newPool("p", "10.0.0.0/24"))))
	ch, err := Watch(ctx, s, from-1)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	// The watcher gets what was committed, then ErrClosed, then the end.
	var got []store.Event
	timeout := time.After(eventWait)
	for done := false; !done; {
		select {
		case ev, ok := <-ch:
			if !ok {
				done = true
				break
			}
			got = append(got, ev)
		case <-timeout:
			require.FailNow(t, "watch did not end on Close")
		}
	}
	require.Len(t, got, 2)
	require.Equal(t, store.EventPutPool, got[0].Type)
	require.ErrorIs(t, got[1].Err, store.ErrClosed)

	_, err = s.Commit(ctx, txn(putPool(newPool("q", "10.0.0.0/24"))))
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = s.Snapshot(ctx)
	require.ErrorIs(t, err, store.ErrClosed)
	_, _, err = s.GetRequest(ctx, "x")
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = Watch(ctx, s, from)
	require.ErrorIs(t, err, store.ErrClosed)
	require.NoError(t, s.Close())
}
