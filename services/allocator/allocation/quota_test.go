package allocation_test

import (
	"context"
	"fmt"
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
