package store_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// BenchmarkValidate: the check every commit makes before anything else,
// on what an Allocate commits (an allocation and its request record) and
// on a BatchAllocate of 1,000.
//
//	go test -run '^$' -bench Validate -benchmem -count 5 ./services/allocator/store/
func BenchmarkValidate(b *testing.B) {
	for _, n := range []int{1, 1000} {
		var txn store.Txn
		keys := make([]string, n)
		for i := range n {
			a := &store.Allocation{Pool: "p", Address: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}),
				Owner: decide.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: fmt.Sprint("pod-", i), UID: fmt.Sprint("uid-", i)}}
			txn.Conds = append(txn.Conds, store.Cond{Kind: store.CondAllocationAbsent, Pool: "p", Address: a.Address},
				store.Cond{Kind: store.CondOwnerAbsent, Pool: "p", OwnerKey: a.Owner.Key()})
			txn.Ops = append(txn.Ops, store.Op{Kind: store.OpPutAllocation, Allocation: a})
			keys[i] = "p/" + a.Address.String()
		}
		txn.Conds = append(txn.Conds, store.Cond{Kind: store.CondRequestAbsent, RequestID: "req"})
		txn.Ops = append(txn.Ops, store.Op{Kind: store.OpPutRequest, Request: &store.Request{ID: "req", Allocations: keys}})
		b.Run(fmt.Sprint("allocations=", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := txn.Validate(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
