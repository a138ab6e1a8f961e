package allocation_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/services/allocator/allocation"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store/bolt"
)

func ownerOf(cluster, name string) decide.Owner {
	return decide.Owner{Cluster: cluster, Kind: "Pod", Namespace: "default", Name: name, UID: "uid-" + cluster + "-" + name}
}

// TestClusterQuota: a pool's cluster quota bounds what each cluster's
// owners hold, counting what they commit and release, not clusterset VIPs;
// it holds for concurrent requests and batches, follows an update, and
// comes back with the pool when the store is opened again.
func TestClusterQuota(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "allocator.db")
	st, err := bolt.Open(path)
	require.NoError(t, err)
	svc, _ := newService(t, st)
	_, err = svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}, ClusterQuota: 5})
	require.NoError(t, err)

	// 40 owners of cluster a at once: 5 get an address.
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		got     int
		refused int
	)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: ownerOf("a", fmt.Sprint("pod-", i))})
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				got++
			} else {
				require.ErrorIs(t, err, decide.ErrClusterQuotaExceeded)
				refused++
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 5, got)
	require.Equal(t, 35, refused)

	// Another cluster and the VIPs are not held back; an owner that holds
	// an address keeps it.
	for i := range 5 {
		_, _, err = svc.Allocate(ctx, decide.Request{Pool: "p", Owner: ownerOf("b", fmt.Sprint("pod-", i))})
		require.NoError(t, err)
	}
	for i := range 8 {
		_, _, err = svc.Allocate(ctx, decide.Request{Pool: "p", Owner: decide.Owner{Kind: mcsnames.OwnerKindClusterSetService, Namespace: "default", Name: fmt.Sprint("svc-", i)}})
		require.NoError(t, err)
	}
	list, _, err := svc.ListAllocations("p", allocation.Filter{Cluster: "a"}, allocation.Cursor{}, 100)
	require.NoError(t, err)
	require.Len(t, list, 5)
	_, created, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: list[0].Owner})
	require.NoError(t, err)
	require.False(t, created)

	// A batch that would pass it is refused whole.
	_, err = svc.BatchAllocate(ctx, []decide.Request{
		{Pool: "p", Owner: ownerOf("c", "x")}, {Pool: "p", Owner: ownerOf("b", "pod-9")}}, "")
	require.ErrorIs(t, err, decide.ErrClusterQuotaExceeded)
	_, err = svc.BatchAllocate(ctx, []decide.Request{
		{Pool: "p", Owner: ownerOf("c", "x")}, {Pool: "p", Owner: ownerOf("c", "y")}}, "")
	require.NoError(t, err)

	// A release makes room.
	_, _, err = svc.Release(ctx, decide.ReleaseRequest{Pool: "p", Address: list[0].Address})
	require.NoError(t, err)
	_, _, err = svc.Allocate(ctx, decide.Request{Pool: "p", Owner: ownerOf("a", "late")})
	require.NoError(t, err)
	_, _, err = svc.Allocate(ctx, decide.Request{Pool: "p", Owner: ownerOf("a", "later")})
	require.ErrorIs(t, err, decide.ErrClusterQuotaExceeded)

	// The quota is kept by the store and counted again from it.
	require.NoError(t, st.Close())
	st, err = bolt.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	svc, _ = newService(t, st)
	v, err := svc.GetPool("p")
	require.NoError(t, err)
	require.Equal(t, uint32(5), v.ClusterQuota)
	_, _, err = svc.Allocate(ctx, decide.Request{Pool: "p", Owner: ownerOf("a", "later")})
	require.ErrorIs(t, err, decide.ErrClusterQuotaExceeded)

	// Raised, it lets a allocate again; cleared, it bounds nothing.
	_, _, err = svc.UpdatePool(ctx, "p", decide.PoolSpec{ClusterQuota: 6}, decide.UpdateMask{ClusterQuota: true}, "", false)
	require.NoError(t, err)
	_, _, err = svc.Allocate(ctx, decide.Request{Pool: "p", Owner: ownerOf("a", "later")})
	require.NoError(t, err)
	_, _, err = svc.Allocate(ctx, decide.Request{Pool: "p", Owner: ownerOf("a", "latest")})
	require.ErrorIs(t, err, decide.ErrClusterQuotaExceeded)
	_, _, err = svc.UpdatePool(ctx, "p", decide.PoolSpec{}, decide.UpdateMask{ClusterQuota: true}, "", false)
	require.NoError(t, err)
	_, _, err = svc.Allocate(ctx, decide.Request{Pool: "p", Owner: ownerOf("a", "latest")})
	require.NoError(t, err)
}

func vipOf(name string) decide.Owner {
	return decide.Owner{Kind: mcsnames.OwnerKindClusterSetService, Namespace: "default", Name: name}
}

// TestClusterQuotaChargesVIPsToCreators: a clusterset VIP counts against
// the quota of the cluster whose caller created it, on the replica that
// created it and on one that follows the store; asking again for a VIP
// another cluster created charges nothing; a release frees the charge;
// fleet callers' VIPs count against no cluster.
func TestClusterQuotaChargesVIPsToCreators(t *testing.T) {
	ctx := context.Background()
	rs := replicas(t, 2)
	one, two := rs[0], rs[1]
	_, err := one.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}, ClusterQuota: 2})
	require.NoError(t, err)
	require.NoError(t, two.Sync(ctx))

	vip := func(svc *allocation.Allocator, name, creator string) (bool, error) {
		_, created, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: vipOf(name), Creator: creator})
		return created, err
	}
	for _, name := range []string{"made-up-1", "made-up-2"} {
		created, err := vip(one, name, "c")
		require.NoError(t, err)
		require.True(t, created)
	}
	a, err := one.GetAllocation("p", mustOwned(t, one, "made-up-1"))
	require.NoError(t, err)
	require.Equal(t, "c", a.CreatorCluster)
	_, err = vip(one, "made-up-3", "c")
	require.ErrorIs(t, err, decide.ErrClusterQuotaExceeded)
	_, err = one.BatchAllocate(ctx, []decide.Request{{Pool: "p", Owner: vipOf("made-up-3"), Creator: "c"}}, "")
	require.ErrorIs(t, err, decide.ErrClusterQuotaExceeded)
	require.NoError(t, two.Sync(ctx))
	_, err = vip(two, "made-up-3", "c")
	require.ErrorIs(t, err, decide.ErrClusterQuotaExceeded, "a following replica counts them too")

	// Cluster a is not held back by c's VIPs; asking for one of them
	// again returns it and charges a nothing.
	created, err := vip(two, "made-up-1", "a")
	require.NoError(t, err)
	require.False(t, created)
	for _, o := range []decide.Owner{ownerOf("a", "pod-0"), vipOf("a-svc")} {
		_, _, err = two.Allocate(ctx, decide.Request{Pool: "p", Owner: o, Creator: "a"})
		require.NoError(t, err)
	}
	_, _, err = two.Allocate(ctx, decide.Request{Pool: "p", Owner: ownerOf("a", "pod-1"), Creator: "a"})
	require.ErrorIs(t, err, decide.ErrClusterQuotaExceeded)

	// Fleet callers' VIPs are charged to nobody.
	for i := range 4 {
		_, err = vip(one, fmt.Sprint("fleet-", i), "")
		require.NoError(t, err)
	}

	// A release frees c's charge, on both replicas.
	_, _, err = one.Release(ctx, decide.ReleaseRequest{Pool: "p", Address: mustOwned(t, one, "made-up-1")})
	require.NoError(t, err)
	require.NoError(t, two.Sync(ctx))
	_, err = vip(two, "made-up-3", "c")
	require.NoError(t, err)
	require.NoError(t, one.Sync(ctx)) // each replica counts what it has followed
	_, err = vip(one, "made-up-4", "c")
	require.ErrorIs(t, err, decide.ErrClusterQuotaExceeded)
}

// mustOwned is the address VIP name holds in pool p.
func mustOwned(t *testing.T, svc *allocation.Allocator, name string) netip.Addr {
	t.Helper()
	list, _, err := svc.ListAllocations("p", allocation.Filter{}, allocation.Cursor{}, 1000)
	require.NoError(t, err)
	for _, a := range list {
		if a.Owner.Name == name && a.Owner.Cluster == "" {
			return a.Address
		}
	}
	t.Fatalf("no allocation of VIP %s", name)
	return netip.Addr{}
}
