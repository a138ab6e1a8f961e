package allocation_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/plexusnet/plexus/services/allocator/allocation"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
)

// BenchmarkCreatePoolAmong creates a pool (a /24) beside n existing ones:
// the cost of the overlap check and the commit as the pools grow.
//
//	go test -run '^$' -bench CreatePoolAmong -benchtime 2000x -count 5 ./services/allocator/allocation/
func BenchmarkCreatePoolAmong(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("pools=%d", n), func(b *testing.B) {
			ctx := context.Background()
			svc, err := allocation.New(ctx, memory.New(), allocation.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				b.Fatal(err)
			}
			cidr := func(i int) string { return fmt.Sprintf("10.%d.%d.0/24", i/256, i%256) }
			for i := range n {
				if _, err := svc.CreatePool(ctx, fmt.Sprintf("p%d", i), decide.PoolSpec{CIDRs: []string{cidr(i)}}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				id := fmt.Sprintf("q%d", i)
				if _, err := svc.CreatePool(ctx, id, decide.PoolSpec{CIDRs: []string{cidr(n + i)}}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if _, err := svc.DeletePool(ctx, id, "", false, false); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
