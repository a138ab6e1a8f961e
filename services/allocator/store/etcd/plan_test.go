package etcd

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// txnOf turns fuzz bytes into a txn over two pools of four addresses
// each, owned by three owners; held says what each allocation key holds
// before it (the planner's read), from the same bytes.
func txnOf(k keys, data []byte) (store.Txn, map[string]*store.Allocation) {
	pools := []string{"p", "pp"}
	owner := func(b byte) decide.Owner {
		return decide.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: fmt.Sprint("pod-", b%3)}
	}
	held := map[string]*store.Allocation{}
	var txn store.Txn
	for i := 0; i+2 < len(data); i += 3 {
		pool, addr := pools[data[i+1]%2], netip.AddrFrom4([4]byte{10, 0, 0, data[i+1] % 4})
		a := &store.Allocation{Pool: pool, Address: addr, Owner: owner(data[i+2])}
		if data[i+2]%4 == 0 {
			held[k.alloc(pool, addr)] = &store.Allocation{Pool: pool, Address: addr, Owner: owner(data[i+2] / 4)}
		}
		var op store.Op
		switch data[i] % 8 {
		case 0:
			op = store.Op{Kind: store.OpPutPool, Pool: &store.Pool{ID: pool}}
		case 1:
			op = store.Op{Kind: store.OpDeletePool, PoolID: pool}
		case 2, 3:
			op = store.Op{Kind: store.OpPutAllocation, Allocation: a}
		case 4:
			op = store.Op{Kind: store.OpDeleteAllocation, PoolID: pool, Address: addr}
		case 5:
			op = store.Op{Kind: store.OpPutQuarantine, Quarantine: &store.Quarantine{Pool: pool, Address: addr}}
		case 6:
			op = store.Op{Kind: store.OpPutRequest, Request: &store.Request{ID: fmt.Sprint("r", data[i+1]%3)}}
		case 7:
			txn.Conds = append(txn.Conds, store.Cond{Kind: store.CondAllocationAbsent, Pool: pool, Address: addr})
			continue
		}
		txn.Ops = append(txn.Ops, op)
	}
	return txn, held
}

// FuzzPlan: whatever valid txn it is given, the planner writes no key
// twice and deletes no range holding another of its writes (etcd refuses
// both), reads every allocation it deletes or replaces unless a condition
// says it is absent, and unindexes the owner it read.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{2, 0, 1, 2, 1, 4, 6, 0, 0})
	f.Add([]byte{1, 0, 0, 2, 1, 0, 4, 3, 8, 5, 2, 0, 0, 1, 0})
	f.Add([]byte{7, 2, 0, 2, 2, 4, 4, 3, 0, 2, 0, 5})
	k := keys{prefix: "/x/"}
	f.Fuzz(func(t *testing.T, data []byte) {
		txn, held := txnOf(k, data)
		if txn.Validate() != nil {
			return
		}
		pl := newPlanner(k, 0, func(key string) *store.Allocation { return held[key] })
		pl.compares(txn.Conds)
		pl.apply(txn.Ops)
		ops := pl.ops(0)
		require.Equal(t, pl.nops(), len(ops))
		written := map[string]bool{}
		var ranges [][2]string
		for _, op := range ops {
			var key, end string
			if p := op.GetRequestPut(); p != nil {
				key = string(p.Key)
			} else {
				d := op.GetRequestDeleteRange()
				key, end = string(d.Key), string(d.RangeEnd)
			}
			if end != "" {
				ranges = append(ranges, [2]string{key, end})
				continue
			}
			require.False(t, written[key], "key %q written twice", key)
			written[key] = true
		}
		for key := range written {
			for _, r := range ranges {
				require.False(t, key >= r[0] && key < r[1], "key %q written inside a deleted range", key)
			}
		}
		for _, op := range txn.Ops {
			if op.Kind != store.OpDeleteAllocation {
				continue
			}
			if old := held[k.alloc(op.PoolID, op.Address)]; old != nil && !pl.absent[k.alloc(op.PoolID, op.Address)] {
				require.True(t, written[k.owner(op.PoolID, old.Owner.Key(), op.Address)], "the owner index entry of a deleted allocation stays")
			}
		}
	})
}

// BenchmarkPlan: the writes of one txn of n allocations guarded by
// "address absent": each a put of the allocation, a put of its owner
// index entry and a delete of its quarantine record.
//
//	go test -run '^$' -bench 'Plan$' -benchmem -count 5 ./services/allocator/store/etcd/
func BenchmarkPlan(b *testing.B) {
	k := keys{prefix: "/p/"}
	for _, n := range []int{1, 10, 100, 1000} {
		txn := store.Txn{}
		for i := range n {
			a := &store.Allocation{Pool: "p", Address: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}),
				Owner: decide.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: fmt.Sprint("pod-", i)}}
			txn.Conds = append(txn.Conds, store.Cond{Kind: store.CondAllocationAbsent, Pool: "p", Address: a.Address})
			txn.Ops = append(txn.Ops, store.Op{Kind: store.OpPutAllocation, Allocation: a})
		}
		b.Run(fmt.Sprint("allocations=", n), func(b *testing.B) {
			for b.Loop() {
				pl := newPlanner(k, 0, nil)
				pl.compares(txn.Conds)
				pl.apply(txn.Ops)
				_ = pl.ops(0)
			}
		})
	}
}
