package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	allocatorv1 "github.com/plexusnet/plexus/clients/go/plexus/allocator/v1"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/kubetest"
)

// TestReplicasOnEtcd runs two allocator processes on one etcd: a pool
// created through one is served by the other, and 32 clients spread over
// both never get one address twice; every acknowledged allocation is in
// both replicas' lists.
func TestReplicasOnEtcd(t *testing.T) {
	e := kubetest.StartEtcd(t)
	store := "--store=etcd:" + e.Endpoints()[0]
	var clients []allocatorv1.AllocatorServiceClient
	for range 2 {
		a := startAllocator(t, store, "--etcd-prefix=/e2e/")
		conn, err := dial.New(a.grpcAddr, dial.WithoutRetry())
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		clients = append(clients, allocatorv1.NewAllocatorServiceClient(conn))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := clients[0].CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "p", Pool: &allocatorv1.Pool{Cidrs: []string{"10.9.0.0/22"}}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := clients[1].GetPool(ctx, &allocatorv1.GetPoolRequest{Name: "pools/p"})
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "the pool reaches the other replica")

	const workers, each = 32, 25
	var mu sync.Mutex
	got := map[string]string{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			c := clients[w%2]
			for i := range each {
				name := fmt.Sprintf("w%d-%d", w, i)
				resp, err := c.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/p",
					Owner: &allocatorv1.Owner{Cluster: "a", Kind: "Pod", Namespace: "ns", Name: name, Uid: "u-" + name}})
				require.NoError(t, err)
				mu.Lock()
				other, dup := got[resp.GetAllocation().GetAddress()]
				got[resp.GetAllocation().GetAddress()] = name
				mu.Unlock()
				require.False(t, dup, "%s handed to %s and %s", resp.GetAllocation().GetAddress(), other, name)
			}
		})
	}
	wg.Wait()
	require.Len(t, got, workers*each)
	for r, c := range clients {
		require.Eventually(t, func() bool {
			n := 0
			req := &allocatorv1.ListAllocationsRequest{Pool: "pools/p", PageSize: 1000}
			for {
				resp, err := c.ListAllocations(ctx, req)
				if err != nil {
					return false
				}
				for _, a := range resp.GetAllocations() {
					if got[a.GetAddress()] != a.GetOwner().GetName() {
						return false
					}
					n++
				}
				if resp.GetNextPageToken() == "" {
					break
				}
				req.PageToken = resp.GetNextPageToken()
			}
			return n == len(got)
		}, 10*time.Second, 50*time.Millisecond, "replica %d lists every acknowledged allocation", r)
	}
}
