package allocation_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/kubetest"
	"github.com/plexusnet/plexus/services/allocator/allocation"
	"github.com/plexusnet/plexus/services/allocator/ipam"
	"github.com/plexusnet/plexus/services/allocator/store/etcd"
)

// replicas starts n allocation services on one etcd prefix, each with its
// own client, following the store as the allocator does with --store etcd.
func replicas(t *testing.T, n int) []*allocation.Service {
	t.Helper()
	e := kubetest.StartEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var out []*allocation.Service
	for range n {
		st, err := etcd.Open(etcd.Config{Endpoints: e.Endpoints(), Prefix: "/plexus-test/"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		svc, err := allocation.New(ctx, st, allocation.WithFollow())
		require.NoError(t, err)
		out = append(out, svc)
	}
	return out
}

// allocations lists every allocation a replica knows of, as address →
// owner name.
func allocations(t *testing.T, svc *allocation.Service, pool string) map[netip.Addr]string {
	t.Helper()
	list, _, err := svc.ListAllocations(pool, allocation.Filter{}, allocation.Cursor{}, 1<<20)
	require.NoError(t, err)
	out := map[netip.Addr]string{}
	for _, a := range list {
		out[a.Address] = a.Owner.Name
	}
	return out
}

func TestReplicasFollowEachOther(t *testing.T) {
	ctx := context.Background()
	rs := replicas(t, 2)
	a, b := rs[0], rs[1]

	// A pool created through one replica is served by the other.
	_, err := a.CreatePool(ctx, "p", allocation.PoolSpec{CIDRs: []string{"10.0.0.0/29"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := b.GetPool("p"); return err == nil }, 10*time.Second, 10*time.Millisecond)

	// b's index learns a's allocation: b hands out the next address, not
	// the same one, and the same owner gets a's address back from b.
	x, _, err := a.Allocate(ctx, allocation.Request{Pool: "p", Owner: owner("x")})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(allocations(t, b, "p")) == 1 }, 10*time.Second, 10*time.Millisecond)
	y, _, err := b.Allocate(ctx, allocation.Request{Pool: "p", Owner: owner("y")})
	require.NoError(t, err)
	require.NotEqual(t, x.Address, y.Address)
	again, created, err := b.Allocate(ctx, allocation.Request{Pool: "p", Owner: owner("x")})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, x.Address, again.Address)

	// A release through b frees the address in a too.
	_, _, err = b.Release(ctx, allocation.ReleaseRequest{Pool: "p", Address: x.Address, Etag: allocation.Etag(x.Revision)})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, ok := allocations(t, a, "p")[x.Address]; return !ok }, 10*time.Second, 10*time.Millisecond)
	z, _, err := a.Allocate(ctx, allocation.Request{Pool: "p", Owner: owner("z"), Address: x.Address})
	require.NoError(t, err, "the released address is free again on the other replica")
	require.Equal(t, x.Address, z.Address)

	// A pool update through a reaches b.
	_, _, err = a.UpdatePool(ctx, "p", allocation.PoolSpec{CIDRs: []string{"10.0.0.0/29", "10.0.1.0/29"}}, allocation.UpdateMask{CIDRs: true}, "", false)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		v, err := b.GetPool("p")
		return err == nil && len(v.CIDRs) == 2
	}, 10*time.Second, 10*time.Millisecond)
}

// TestReplicasNeverHandOutAnAddressTwice: two replicas, 16 clients each,
// allocate and release on a pool of 14 addresses for many rounds (so the
// pool is often full, and the replicas often race for its last address). A model
// of who holds what (an owner gives its address up before it releases
// it) is checked at every allocation; at the end both replicas agree.
func TestReplicasNeverHandOutAnAddressTwice(t *testing.T) {
	ctx := context.Background()
	rs := replicas(t, 2)
	_, err := rs[0].CreatePool(ctx, "p", allocation.PoolSpec{CIDRs: []string{"10.0.0.0/28"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := rs[1].GetPool("p"); return err == nil }, 10*time.Second, 10*time.Millisecond)

	var (
		mu        sync.Mutex
		holder    = map[netip.Addr]string{}
		allocs    int
		exhausted int
		lost      int
	)
	const clients, rounds = 16, 40
	var wg sync.WaitGroup
	for r, svc := range rs {
		for c := range clients {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(r), uint64(c)))
				for i := range rounds {
					name := fmt.Sprintf("r%d-c%d-%d", r, c, i)
					a, _, err := svc.Allocate(ctx, allocation.Request{Pool: "p", Owner: owner(name)})
					if errors.Is(err, ipam.ErrExhausted) || errors.Is(err, allocation.ErrConflict) {
						mu.Lock()
						if errors.Is(err, ipam.ErrExhausted) {
							exhausted++
						} else {
							lost++
						}
						mu.Unlock()
						continue
					}
					require.NoError(t, err)
					mu.Lock()
					other, taken := holder[a.Address]
					holder[a.Address] = name
					allocs++
					mu.Unlock()
					require.False(t, taken, "%s handed to %s while %s holds it", a.Address, name, other)
					time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
					mu.Lock()
					delete(holder, a.Address)
					mu.Unlock()
					_, _, err = svc.Release(ctx, allocation.ReleaseRequest{Pool: "p", Address: a.Address, Etag: allocation.Etag(a.Revision)})
					require.NoError(t, err)
				}
			})
		}
	}
	wg.Wait()
	t.Logf("%d allocations, %d refused as the pool was full, %d lost to the other replica after every retry", allocs, exhausted, lost)
	require.Positive(t, allocs)
	require.Less(t, lost, (allocs+exhausted+lost)/20, "retries after a lost transaction find a free address")
	require.Eventually(t, func() bool {
		return len(allocations(t, rs[0], "p")) == 0 && len(allocations(t, rs[1], "p")) == 0
	}, 10*time.Second, 10*time.Millisecond, "both replicas see every release")
	for _, svc := range rs {
		v, err := svc.GetPool("p")
		require.NoError(t, err)
		require.Zero(t, v.Stats.Allocated, "the index agrees")
	}
}
