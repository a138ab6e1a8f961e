package held

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// BenchmarkTableChurn is the table's part of an allocation and a release:
// a Put of a new owner and a Delete of an old one, in a table of 100,000,
// one owner in ten a clusterset VIP.
func BenchmarkTableChurn(b *testing.B) {
	const n = 100_000
	tab := New("p", true, n)
	now := time.Now().UTC()
	alloc := func(i int) store.Allocation {
		o := decide.Owner{Cluster: "east", Kind: "Pod", Namespace: fmt.Sprintf("team-%d", i%7),
			Name: fmt.Sprintf("frontend-%08d", i), UID: fmt.Sprintf("%08x-3b9e-4c5d-8f7a-1b2c3d4e5f60", i)}
		if i%10 == 0 {
			o = decide.Owner{Kind: "ClusterSetService", Namespace: o.Namespace, Name: o.Name}
		}
		var b16 [16]byte
		b16[10], b16[11] = 0xff, 0xff
		b16[12], b16[13], b16[14], b16[15] = 10, byte(i>>16), byte(i>>8), byte(i)
		return store.Allocation{Pool: "p", Address: netip.AddrFrom16(b16).Unmap(), Owner: o, CreateTime: now, Revision: int64(i + 1)}
	}
	as := make([]store.Allocation, 2*n)
	for i := range as {
		as[i] = alloc(i)
	}
	for i := range n {
		if err := tab.Put(&as[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		in, out := (n+i)%(2*n), i%(2*n)
		if err := tab.Put(&as[in]); err != nil {
			b.Fatal(err)
		}
		tab.Delete(as[out].Address)
	}
}
