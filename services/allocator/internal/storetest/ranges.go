package storetest

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/store"
)

func poolsUnchangedSince(rev int64) store.Cond {
	return store.Cond{Kind: store.CondPoolsUnchangedSince, Revision: rev}
}

func rangeFree(pool, first, last string) store.Cond {
	return store.Cond{Kind: store.CondRangeFree, Pool: pool, Address: netip.MustParseAddr(first), Last: netip.MustParseAddr(last)}
}

// testPoolsUnchangedSince: the condition looks at every commit that puts
// or deletes a pool, and at nothing else.
func testPoolsUnchangedSince(t *testing.T, s store.Store) {
	require.True(t, holds(t, s, poolsUnchangedSince(0)), "no pool at all")

	rA := commit(t, s, txn(putPool(newPool("a", "10.0.0.0/24"))))
	rB := commit(t, s, txn(putPool(newPool("b", "10.1.0.0/24"))))
	require.False(t, holds(t, s, poolsUnchangedSince(0)))
	require.False(t, holds(t, s, poolsUnchangedSince(rA)), "b was created after a")
	require.True(t, holds(t, s, poolsUnchangedSince(rB)))

	// Commits that write no pool change nothing.
	commit(t, s, txn(putAlloc(newAlloc("a", "10.0.0.20", "web-0"))))
	require.True(t, holds(t, s, poolsUnchangedSince(rB)))

	// A deletion counts like a creation, and so does an update.
	rDel := commit(t, s, txn(delPool("b")))
	require.False(t, holds(t, s, poolsUnchangedSince(rB)), "b was deleted after rB")
	require.True(t, holds(t, s, poolsUnchangedSince(rDel)))
	updated := newPool("a", "10.0.0.0/23")
	rUpdate := commit(t, s, txn(putPool(updated)))
	require.False(t, holds(t, s, poolsUnchangedSince(rA)))
	require.False(t, holds(t, s, poolsUnchangedSince(rDel)))
	require.False(t, holds(t, s, poolsUnchangedSince(rUpdate-1)))
	require.True(t, holds(t, s, poolsUnchangedSince(rUpdate)))
}

// testRangeFree: the condition sees every allocation of the pool in the
// range, ends included, and none outside it, in another family or in
// another pool.
func testRangeFree(t *testing.T, s store.Store) {
	commit(t, s, txn(
		putPool(newPool("p", "10.0.0.0/16")), putPool(newPool("pp", "10.2.0.0/16")), putPool(newPool("v6", "fd00::/64")),
		putAlloc(newAlloc("p", "10.0.1.0", "web-0")), putAlloc(newAlloc("p", "10.0.2.255", "web-1")),
		putAlloc(newAlloc("pp", "10.0.1.5", "web-2")), putAlloc(newAlloc("v6", "fd00::10", "web-3")),
	))
	tests := []struct {
		name string
		cond store.Cond
		want bool
	}{
		{"below the first", rangeFree("p", "10.0.0.0", "10.0.0.255"), true},
		{"ends on the first", rangeFree("p", "10.0.0.0", "10.0.1.0"), false},
		{"starts on the first", rangeFree("p", "10.0.1.0", "10.0.1.0"), false},
		{"between the two", rangeFree("p", "10.0.1.1", "10.0.2.254"), true},
		{"starts on the last", rangeFree("p", "10.0.2.255", "10.0.3.0"), false},
		{"above the last", rangeFree("p", "10.0.3.0", "255.255.255.255"), true},
		{"the whole family", rangeFree("p", "0.0.0.0", "255.255.255.255"), false},
		{"the other family", rangeFree("p", "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), true},
		{"a pool whose id starts with another's", rangeFree("pp", "10.0.1.1", "10.0.1.255"), false},
		{"around another pool's allocation", rangeFree("p", "10.0.1.1", "10.0.1.255"), true},
		{"IPv6, held", rangeFree("v6", "fd00::", "fd00::10"), false},
		{"IPv6, free", rangeFree("v6", "fd00::11", "fd00::ffff"), true},
		{"missing pool", rangeFree("q", "0.0.0.0", "255.255.255.255"), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, holds(t, s, tc.cond))
		})
	}

	// A released address frees its range.
	commit(t, s, txn(delAlloc("p", "10.0.1.0")))
	require.True(t, holds(t, s, rangeFree("p", "10.0.0.0", "10.0.1.0")))
}
