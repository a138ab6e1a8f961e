package decide_test

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/plexusnet/plexus/services/repair/decide"
)

// fleet builds a pass over n allocations in pools of 100,000, each held by
// its own owner; one in a hundred owners is gone (half deleted, half
// recreated with a new uid), one in ten is a Pod whose IP is a claim, and
// there are a few duplicates, out-of-range allocations and orphaned slices.
func fleet(n int) decide.Input {
	const perPool = 100_000
	in := decide.Input{
		Now:         t0,
		Allocations: make([]decide.Allocation, 0, n),
		Synced:      true,
		Config:      config(),
	}
	v := decide.NewSnapshot(n)
	for p := range (n + perPool - 1) / perPool {
		// 10.{2p}.0.0/15 holds 131,072 addresses.
		in.Pools = append(in.Pools, decide.Pool{ID: fmt.Sprintf("pool-%d", p),
			CIDRs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(2 * p), 0, 0}), 15)}})
	}
	created := t0.Add(-24 * time.Hour)
	for i := range n {
		p := i / perPool
		j := i % perPool
		addr := netip.AddrFrom4([4]byte{10, byte(2*p + j>>16), byte(j >> 8), byte(j)})
		kind := "Pod"
		if i%5 == 4 {
			kind = "ExternalWorkload"
		}
		o := decide.Owner{Cluster: "a", Kind: kind, Namespace: fmt.Sprintf("ns-%03d", i%1000), Name: fmt.Sprintf("w-%07d", i), UID: fmt.Sprintf("%08x-uid", i)}
		switch {
		case i%200 == 7: // deleted
		case i%200 == 107: // recreated under the same name
			recreated := o
			recreated.UID += "-2"
			v.AddOwner(recreated)
		default:
			v.AddOwner(o)
		}
		if i%10 == 0 && kind == "Pod" {
			v.AddClaim(decide.Claim{Address: addr, Owner: o, Source: "Pod.status.podIPs"})
		}
		if i%10_000 == 3 { // a Service clusterIP on an allocated address
			v.AddClaim(decide.Claim{Address: addr, Owner: decide.Owner{Cluster: "a", Kind: "Service", Namespace: "ns-000", Name: fmt.Sprintf("svc-%d", i), UID: "s"}, Source: "Service.spec.clusterIPs"})
		}
		if i%10_000 == 5 { // left outside the pool by a forced shrink
			addr = netip.AddrFrom4([4]byte{172, 16, byte(i >> 8), byte(i)})
		}
		in.Allocations = append(in.Allocations, decide.Allocation{Pool: in.Pools[p].ID, Address: addr, Owner: o, Etag: fmt.Sprint(i + 1), CreateTime: created})
	}
	in.Owners = v
	for i := range n / 100 {
		s := decide.Slice{Namespace: fmt.Sprintf("ns-%03d", i%1000), Name: fmt.Sprintf("svc-%d-abcde", i), UID: fmt.Sprint(i),
			ManagedBy: decide.ImporterManagedBy, ServiceName: fmt.Sprintf("svc-%d", i), CreateTime: created, ImportExists: i%100 != 0, ServiceExists: i%100 != 0}
		in.Slices = append(in.Slices, s)
	}
	return in
}

// BenchmarkPass measures the third pass over the fleet: every leak has two
// strikes, so the pass counts, limits and plans the releases. Time is per
// pass; pass-MiB is what the pass allocates, input-MiB the live heap of the
// input (allocations and owner view) before it, and peak-MiB bounds the
// heap during the pass (input plus everything the pass allocates);
// cpu-s/pass is the CPU time of the pass over all cores.
func BenchmarkPass(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("allocations=%d", n), func(b *testing.B) {
			in := fleet(n)
			out, err := passes(2, in)
			if err != nil {
				b.Fatal(err)
			}
			in.Strikes = out.Strikes
			out = decide.Output{}

			var before, after runtime.MemStats
			var passBytes, inputBytes uint64
			var cpu time.Duration
			releases := 0
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&before)
				cpu0 := cpuTime()
				b.StartTimer()

				got, err := decide.Decide(in)

				b.StopTimer()
				cpu += cpuTime() - cpu0
				runtime.ReadMemStats(&after)
				if err != nil {
					b.Fatal(err)
				}
				releases = len(got.Releases)
				passBytes = max(passBytes, after.TotalAlloc-before.TotalAlloc)
				inputBytes = max(inputBytes, before.HeapAlloc)
				b.StartTimer()
			}
			b.StopTimer()
			if want := n / 100; releases != want {
				b.Fatalf("planned %d releases, want %d", releases, want)
			}
			const mib = 1 << 20
			b.ReportMetric(float64(passBytes)/mib, "pass-MiB")
			b.ReportMetric(float64(inputBytes)/mib, "input-MiB")
			b.ReportMetric(float64(inputBytes+passBytes)/mib, "peak-MiB")
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/pass")
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/pass")
		})
	}
}
