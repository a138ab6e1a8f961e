package storetest

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// testPersistence: everything committed is there after a restart, and the
// revision goes on from where it was.
func testPersistence(t *testing.T, s store.Store, reopen func(*testing.T, store.Store) store.Store) {
	ctx := t.Context()
	p6 := newPool("p6", "2001:db8::/64")
	p6.Labels = nil
	p6.Deleting = true
	p6.ClusterQuota = 3
	commit(t, s, txn(putPool(newPool("p4", "10.0.0.0/16")), putPool(p6)))
	var bulk []store.Op
	for i := range 500 {
		a := newAlloc("p4", netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}).String(), fmt.Sprint("pod-", i))
		bulk = append(bulk, putAlloc(a))
	}
	commit(t, s, txn(bulk...))
	vm1 := newAlloc("p6", "2001:db8::1", "vm-1")
	vm1.CreatorCluster = "west" // kept, a field most allocations lack
	commit(t, s, txn(
		putAlloc(vm1),
		putAlloc(newAlloc("p6", "2001:db8::ffff:1", "vm-2")),
		putQuarantine("p6", "2001:db8::2"),
		store.Op{Kind: store.OpPutRequest, Request: &store.Request{ID: "req-1", Allocations: []string{"p6/2001:db8::1"}}},
	))
	commit(t, s, txn(delAlloc("p4", "10.0.0.7"), putAlloc(newAlloc("p4", "10.0.0.8", "pod-replaced"))))
	before := snapshot(t, s)
	require.True(t, before.Pools[1].Deleting, "a pool's Deleting mark is kept")
	require.False(t, before.Pools[0].Deleting)
	require.Equal(t, uint32(3), before.Pools[1].ClusterQuota, "a pool's cluster quota is kept")
	req, ok, err := s.GetRequest(ctx, "req-1")
	require.NoError(t, err)
	require.True(t, ok)

	s = reopen(t, s)
	require.Equal(t, before, snapshot(t, s))
	got, ok, err := s.GetRequest(ctx, "req-1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, req, got)

	// Watching from the revision of the reopened snapshot works, and the
	// next commit takes the next revision.
	ch, err := Watch(ctx, s, before.Revision)
	require.NoError(t, err)
	rev := commit(t, s, txn(putAlloc(newAlloc("p4", "10.0.0.7", "pod-new"))))
	require.Equal(t, before.Revision+1, rev)
	ev := receive(t, ch, 1)[0]
	require.Equal(t, rev, ev.Revision)

	// The indexes behind the conditions survived too.
	require.False(t, holds(t, s, ownerAbsent("p4", owner("pod-3", ""))))
	require.True(t, holds(t, s, ownerAbsent("p4", owner("pod-7", ""))))
	require.False(t, holds(t, s, ownerAbsent("p4", owner("pod-replaced", ""))))
	require.True(t, holds(t, s, ownerAbsent("p4", owner("pod-8", ""))))
	require.False(t, holds(t, s, allocAbsent("p6", "2001:db8::ffff:1")))
	require.False(t, holds(t, s, store.Cond{Kind: store.CondRequestAbsent, RequestID: "req-1"}))
	require.False(t, holds(t, s, store.Cond{Kind: store.CondPoolAbsent, Pool: "p6"}))
	require.True(t, holds(t, s, store.Cond{Kind: store.CondPoolRevision, Pool: "p6", Revision: before.Pools[1].Revision}))

	last := snapshot(t, s)
	s = reopen(t, s)
	require.Equal(t, last, snapshot(t, s))
}

// testPersistenceOfDeletes: what a pool deletion removed stays removed
// after a restart, indexes included, and the deletion still counts as
// the latest pool change.
func testPersistenceOfDeletes(t *testing.T, s store.Store, reopen func(*testing.T, store.Store) store.Store) {
	commit(t, s, txn(
		putPool(newPool("p", "10.0.0.0/24")),
		putPool(newPool("p2", "10.0.0.0/24")),
		putAlloc(newAlloc("p", "10.0.0.1", "web-0")),
		putAlloc(newAlloc("p2", "10.0.0.1", "web-0")),
		putQuarantine("p", "10.0.0.2"),
	))
	deleted := commit(t, s, txn(delPool("p")))
	before := snapshot(t, s)

	s = reopen(t, s)
	require.Equal(t, before, snapshot(t, s))
	require.False(t, holds(t, s, poolsUnchangedSince(deleted-1)), "the deletion still counts as a pool change")
	require.True(t, holds(t, s, poolsUnchangedSince(deleted)))
	require.True(t, holds(t, s, store.Cond{Kind: store.CondPoolAbsent, Pool: "p"}))
	require.True(t, holds(t, s, ownerAbsent("p", owner("web-0", ""))))
	require.False(t, holds(t, s, ownerAbsent("p2", owner("web-0", ""))))
	require.True(t, holds(t, s, allocAbsent("p", "10.0.0.1")))
}
