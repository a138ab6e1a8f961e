package etcd

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// plainPlan is a plan that applies its rules the plain way, each write a
// scan of those before it, as it does once it deletes a range (and as
// every plan did before the index): what the indexed plan must match.
func plainPlan() *plan { return &plan{ranges: true} }

// sameWrites requires the writes of got to be those of want, in order.
func sameWrites(t *testing.T, want, got []write, msg ...any) {
	t.Helper()
	if len(want) == 0 {
		require.Empty(t, got, msg...)
		return
	}
	require.Equal(t, want, got, msg...)
}

// planSteps turns fuzz bytes into plan calls on 40 keys, one range
// delete in about 16 calls, and applies them to both plans; the plan is
// read (and its dead writes dropped) between some of them.
func planSteps(data []byte, p, ref *plan) {
	key := func(b byte) string { return fmt.Sprintf("k%02d", b%40) }
	for i := 0; i+2 < len(data); i += 3 {
		k, v := key(data[i+1]), fmt.Sprint(i)
		if data[i+2]%5 == 0 {
			p.live() // reading the plan must not change what comes next
		}
		switch op := data[i] % 16; {
		case op == 15:
			end := key(data[i+1] + 1 + data[i+2]%8)
			if end <= k {
				end = k + "\xff"
			}
			p.del(k, end)
			ref.del(k, end)
		case op >= 10:
			p.del(k, "")
			ref.del(k, "")
		case op >= 5:
			p.putLease(k, v, clientv3.LeaseID(data[i+2]))
			ref.putLease(k, v, clientv3.LeaseID(data[i+2]))
		default:
			p.put(k, v)
			ref.put(k, v)
		}
	}
}

// FuzzPlan: the plan's writes, in order, are those of the plain rules,
// whatever the calls, indexed or not, with ranges or without.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{0, 1, 0, 10, 1, 0, 5, 2, 3})
	f.Add([]byte{15, 3, 4, 0, 4, 0, 0, 5, 0, 10, 3, 0})
	for _, rangeAt := range []int{-1, 30, 150} {
		f.Add(planSeed(200, rangeAt))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p plan
		ref := plainPlan()
		planSteps(data, &p, ref)
		got := p.live()
		for i := range got {
			require.False(t, got[i].dead)
		}
		sameWrites(t, ref.live(), got)
		require.Len(t, p.ops(0), len(ref.live()))
	})
}

// planSeed is calls on 23 keys, each written again and again, with one
// range delete at call rangeAt (none when -1).
func planSeed(calls, rangeAt int) []byte {
	data := make([]byte, 0, 3*calls)
	for i := range calls {
		op := byte(i % 15)
		if i == rangeAt {
			op = 15
		}
		data = append(data, op, byte(i%23), byte(i))
	}
	return data
}

// TestPlanMatchesPlainRules: FuzzPlan's check over random calls, most
// with no range delete, many past indexFrom writes.
func TestPlanMatchesPlainRules(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		data := make([]byte, 3*rng.IntN(120))
		for i := range data {
			data[i] = byte(rng.IntN(256))
			if i%3 == 0 && data[i]%16 == 15 && rng.IntN(8) > 0 {
				data[i] = 0 // most sequences stay without ranges
			}
		}
		var p plan
		ref := plainPlan()
		planSteps(data, &p, ref)
		sameWrites(t, ref.live(), p.live(), "%v", data)
	}
}

// BenchmarkPlan: the writes of one txn of n allocations, each a put of
// the allocation, a put of its owner index entry and a delete of its
// quarantine record.
//
//	go test -run '^$' -bench 'Plan$' -benchmem -count 5 ./services/allocator/store/etcd/
func BenchmarkPlan(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000} {
		keys := make([][3]string, n)
		for i := range keys {
			keys[i] = [3]string{fmt.Sprintf("/p/state/allocs/p\x0040a%07x", i), fmt.Sprintf("/p/owners/p\x00c/Pod/ns/pod-%d\x0040a%07x", i, i), fmt.Sprintf("/p/state/quarantine/p\x0040a%07x", i)}
		}
		b.Run(fmt.Sprint("allocations=", n), func(b *testing.B) {
			for b.Loop() {
				var p plan
				for _, k := range keys {
					p.put(k[0], "{}")
					p.put(k[1], "")
					p.del(k[2], "")
				}
				_ = p.ops(2)
			}
		})
	}
}
