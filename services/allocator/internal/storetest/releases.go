package storetest

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// testManyReleases: one commit releases hundreds of allocations, as a
// chunk of a forced pool deletion does, once side by side among a few
// that stay and once spread thinly among many that stay. Exactly those
// go, with their owner index entries.
func testManyReleases(t *testing.T, s store.Store) {
	addr := func(i int) string { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}).String() }
	name := func(i int) string { return fmt.Sprint("pod-", i) }
	commit(t, s, txn(putPool(newPool("p", "10.0.0.0/16"))))
	const n = 1200
	for i := 0; i < n; i += 300 {
		var ops []store.Op
		for j := i; j < i+300; j++ {
			ops = append(ops, putAlloc(newAlloc("p", addr(j), name(j))))
		}
		commit(t, s, txn(ops...))
	}
	released := map[int]bool{}
	for _, release := range []func(i int) bool{
		// 0..299 but every 50th: side by side.
		func(i int) bool { return i < 300 && i%50 != 0 },
		// every 8th from 300 on: spread among those that stay.
		func(i int) bool { return i >= 300 && i%8 == 0 },
	} {
		var ops []store.Op
		for i := range n {
			if release(i) {
				ops = append(ops, delAlloc("p", addr(i)))
				released[i] = true
			}
		}
		commit(t, s, txn(ops...))
	}
	snap := snapshot(t, s)
	kept := map[string]bool{}
	for _, a := range snap.Allocations {
		kept[a.Address.String()] = true
	}
	for i := range n {
		require.Equal(t, !released[i], kept[addr(i)], "allocation %s", addr(i))
		if i%7 == 0 || i%50 == 0 || i%8 == 0 {
			require.Equal(t, released[i], holds(t, s, ownerAbsent("p", owner(name(i), ""))), "owner index of %s", name(i))
		}
	}
}
