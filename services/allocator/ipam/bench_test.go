package ipam

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"
)

// benchFills are the fill levels the allocation benchmarks hold constant.
var benchFills = []struct {
	name string
	fill float64
}{
	{"0%", 0}, {"50%", 0.50}, {"99%", 0.99}, {"99.99%", 0.9999},
}

// filledPool is an IPv4 /12 pool with a given share of its addresses
// allocated at random, and the list of those addresses. The list holds plain
// numbers, not netip.Addr values (which hold a pointer), so that the
// garbage collector does not scan 1M entries in the middle of the
// measurement.
type filledPool struct {
	p    *Pool
	held []uint32
	next int // the oldest entry of held
}

// filled caches prefilled pools: the benchmark function runs several times
// with growing b.N, and each run leaves the fill level as it found it.
var filled = map[float64]*filledPool{}

func prefill(b *testing.B, fill float64) *filledPool {
	if fp, ok := filled[fill]; ok {
		return fp
	}
	p, err := New(Config{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/12")}})
	if err != nil {
		b.Fatal(err)
	}
	capacity := int(p.Stats().Capacity.Int64())
	rnd := rand.New(rand.NewPCG(1, 2))
	// Usable offsets are 1..capacity; shuffle them and allocate a prefix,
	// so the free addresses are scattered over the whole range.
	offs := rnd.Perm(capacity)
	n := int(fill * float64(capacity))
	fp := &filledPool{p: p, held: make([]uint32, 0, n)}
	for _, off := range offs[:n] {
		x := uint32(off) + 1 + 10<<24
		if err := p.AllocateAddr(v4(x), time.Time{}); err != nil {
			b.Fatal(err)
		}
		fp.held = append(fp.held, x)
	}
	filled[fill] = fp
	return fp
}

// BenchmarkAllocateNext measures one AllocateNext plus one Release, on an
// IPv4 /12 (1,048,574 usable addresses) held at a constant fill. The
// address released is the oldest allocation: the prefill allocated random
// addresses, so the free addresses stay scattered at random, as in a pool
// with churn, and the benchmark's own bookkeeping walks its list in order
// instead of paying a cache miss on a random entry of a 4 MB list. The cost
// must not depend on the fill.
func BenchmarkAllocateNext(b *testing.B) {
	for _, f := range benchFills {
		b.Run("fill="+f.name, func(b *testing.B) {
			fp := prefill(b, f.fill)
			var now time.Time
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a, err := fp.p.AllocateNext(now)
				if err != nil {
					b.Fatal(err)
				}
				if len(fp.held) == 0 {
					err = fp.p.Release(a, now)
				} else {
					err = fp.p.Release(v4(fp.held[fp.next]), now)
					b4 := a.As4()
					fp.held[fp.next] = uint32(b4[0])<<24 | uint32(b4[1])<<16 | uint32(b4[2])<<8 | uint32(b4[3])
					fp.next = (fp.next + 1) % len(fp.held)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "allocs/s")
		})
	}
}

// BenchmarkIPv6Memory reports the heap that an IPv6 /64 pool's index holds
// with 1,000,000 allocations: handed out by AllocateNext (in sequence), and
// asked for at random addresses spread over the whole /64 (the worst case
// for any block-based index: almost every allocation in a block of its own).
func BenchmarkIPv6Memory(b *testing.B) {
	const n = 1_000_000
	patterns := []struct {
		name string
		fill func(p *Pool) error
	}{
		{"next", func(p *Pool) error {
			for i := 0; i < n; i++ {
				if _, err := p.AllocateNext(time.Time{}); err != nil {
					return err
				}
			}
			return nil
		}},
		{"random", func(p *Pool) error {
			rnd := rand.New(rand.NewPCG(3, 4))
			base := addrBits(netip.MustParseAddr("2001:db8::"))
			for i := 0; i < n; {
				a := bitsAddr(base.add64(rnd.Uint64()), false)
				if err := p.AllocateAddr(a, time.Time{}); err == nil {
					i++
				} else if !isInUse(err) {
					return err
				}
			}
			return nil
		}},
	}
	for _, pat := range patterns {
		b.Run(pat.name, func(b *testing.B) {
			var heap uint64
			for i := 0; i < b.N; i++ {
				before := heapAlloc()
				p, err := New(Config{CIDRs: []netip.Prefix{netip.MustParsePrefix("2001:db8::/64")}})
				if err != nil {
					b.Fatal(err)
				}
				if err := pat.fill(p); err != nil {
					b.Fatal(err)
				}
				if got := p.Stats().Allocated.Int64(); got != n {
					b.Fatalf("allocated %d, want %d", got, n)
				}
				heap = heapAlloc() - before
				runtime.KeepAlive(p)
			}
			b.ReportMetric(float64(heap)/n, "heapB/alloc")
			b.ReportMetric(float64(heap)/(1<<20), "heapMiB")
		})
	}
}

func v4(x uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)})
}

func isInUse(err error) bool {
	return errClass(err) == ErrInUse
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkAllocateNextIPv6 is the fill benchmark's IPv6 counterpart on a
// /112 (65,536 addresses): its tree is as tall as a /12's, with 128-bit
// arithmetic.
func BenchmarkAllocateNextIPv6(b *testing.B) {
	for _, fill := range []float64{0, 0.9999} {
		b.Run(fmt.Sprintf("fill=%g%%", fill*100), func(b *testing.B) {
			p, err := New(Config{CIDRs: []netip.Prefix{netip.MustParsePrefix("2001:db8::/112")}})
			if err != nil {
				b.Fatal(err)
			}
			rnd := rand.New(rand.NewPCG(5, 6))
			var held []uint64
			base := addrBits(netip.MustParseAddr("2001:db8::"))
			for _, off := range rnd.Perm(1 << 16)[:int(fill*(1<<16))] {
				if err := p.AllocateAddr(bitsAddr(base.add64(uint64(off)), false), time.Time{}); err != nil {
					b.Fatal(err)
				}
				held = append(held, uint64(off))
			}
			var now time.Time
			next := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a, err := p.AllocateNext(now)
				if err != nil {
					b.Fatal(err)
				}
				if len(held) == 0 {
					err = p.Release(a, now)
				} else {
					err = p.Release(bitsAddr(base.add64(held[next]), false), now)
					held[next] = addrBits(a).sub(base).lo
					next = (next + 1) % len(held)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
