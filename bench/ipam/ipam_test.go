package ipam

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/plexusnet/plexus/services/allocator/ipam"
	"k8s.io/kubernetes/pkg/registry/core/service/ipallocator"
)

// The pool both implementations index: an IPv4 /12, 1,048,574 usable
// addresses once the network and broadcast addresses are left out.
const (
	poolCIDR = "10.0.0.0/12"
	poolBase = 10 << 24
	poolSize = 1<<20 - 2
)

// allocator is what the benchmark drives. Addresses are plain numbers so
// that the benchmark's own bookkeeping costs the same for both.
type allocator interface {
	allocateNext() (uint32, error)
	allocate(x uint32) error
	release(x uint32) error
}

type plexus struct{ p *ipam.Pool }

func newPlexus() (allocator, error) {
	p, err := ipam.New(ipam.Config{CIDRs: []netip.Prefix{netip.MustParsePrefix(poolCIDR)}})
	return plexus{p}, err
}

func addr(x uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], x)
	return netip.AddrFrom4(b)
}

func (a plexus) allocateNext() (uint32, error) {
	ip, err := a.p.AllocateNext(time.Time{})
	b := ip.As4()
	return binary.BigEndian.Uint32(b[:]), err
}
func (a plexus) allocate(x uint32) error { return a.p.AllocateAddr(addr(x), time.Time{}) }
func (a plexus) release(x uint32) error  { return a.p.Release(addr(x), time.Time{}) }

type kubernetes struct{ r *ipallocator.Range }

func newKubernetes() (allocator, error) {
	_, cidr, err := net.ParseCIDR(poolCIDR)
	if err != nil {
		return nil, err
	}
	r, err := ipallocator.NewInMemory(cidr)
	return kubernetes{r}, err
}

func ip(x uint32) net.IP {
	b := make(net.IP, 4)
	binary.BigEndian.PutUint32(b, x)
	return b
}

func (a kubernetes) allocateNext() (uint32, error) {
	got, err := a.r.AllocateNext()
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(got.To4()), nil
}
func (a kubernetes) allocate(x uint32) error { return a.r.Allocate(ip(x)) }
func (a kubernetes) release(x uint32) error  { return a.r.Release(ip(x)) }

// none hands out made-up addresses and keeps no state: it measures the
// benchmark's bookkeeping and the interface calls alone.
type none struct{ n *uint32 }

func newNone() (allocator, error) { return none{new(uint32)}, nil }

func (a none) allocateNext() (uint32, error) {
	*a.n++
	return poolBase + 1 + *a.n%poolSize, nil
}
func (none) allocate(uint32) error { return nil }
func (none) release(uint32) error  { return nil }

var impls = []struct {
	name string
	new  func() (allocator, error)
}{
	{"plexus", newPlexus},
	{"kubernetes", newKubernetes},
	{"none", newNone},
}

var fills = []struct {
	name string
	fill float64
}{
	{"0%", 0}, {"50%", 0.50}, {"99%", 0.99}, {"99.99%", 0.9999},
}

// filled is a prefilled allocator and the addresses it holds.
type filled struct {
	a    allocator
	held []uint32
	next int // the oldest entry of held
}

// cache keeps prefilled allocators across the runs of one benchmark (the
// function is called again with a larger b.N; every run leaves the fill as it
// found it), since filling a million addresses takes longer than measuring.
var cache = map[string]*filled{}

func prefill(b *testing.B, impl string, newAlloc func() (allocator, error), fill float64) *filled {
	key := fmt.Sprint(impl, fill)
	if f, ok := cache[key]; ok {
		return f
	}
	a, err := newAlloc()
	if err != nil {
		b.Fatal(err)
	}
	// The same seed for both: the same addresses are allocated, and the
	// same ones released during the measurement.
	rnd := rand.New(rand.NewPCG(1, 2))
	n := int(fill * poolSize)
	f := &filled{a: a, held: make([]uint32, 0, n)}
	for _, off := range rnd.Perm(poolSize)[:n] {
		x := poolBase + 1 + uint32(off)
		if err := a.allocate(x); err != nil {
			b.Fatal(err)
		}
		f.held = append(f.held, x)
	}
	cache[key] = f
	return f
}

// BenchmarkAllocateNext measures one next-free allocation plus one release,
// at a constant fill. The address released is the oldest allocation: the
// prefill allocated random addresses, so the free addresses stay scattered
// at random, as in a pool with churn, while the benchmark's own bookkeeping
// walks its list in order (a random entry of a 4 MB list would cost a cache
// miss that has nothing to do with either allocator). ns/op is the cost of
// the pair; impl=none is that bookkeeping alone.
func BenchmarkAllocateNext(b *testing.B) {
	for _, fl := range fills {
		for _, impl := range impls {
			b.Run("fill="+fl.name+"/impl="+impl.name, func(b *testing.B) {
				f := prefill(b, impl.name, impl.new, fl.fill)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					x, err := f.a.allocateNext()
					if err != nil {
						b.Fatal(err)
					}
					if len(f.held) == 0 {
						err = f.a.release(x)
					} else {
						err = f.a.release(f.held[f.next])
						f.held[f.next] = x
						f.next = (f.next + 1) % len(f.held)
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
}
