package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// TestReplicasOnEtcd runs two allocator processes on one etcd: a pool
// created through one is served by the other at once, and 32 clients
// spread over both never get one address twice; every acknowledged
// allocation is in both replicas' lists as soon as it is acknowledged.
func TestReplicasOnEtcd(t *testing.T) {
	e := kubetest.StartEtcd(t)
	store := "--store=etcd:" + e.Endpoints()[0]
	var (
		clients []allocatorv1.AllocatorServiceClient
		metrics []string
	)
	for range 2 {
		a := startAllocator(t, store, "--etcd-prefix=/e2e/")
		metrics = append(metrics, a.httpAddr)
		conn, err := dial.New(a.grpcAddr, dial.WithoutRetry())
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		clients = append(clients, allocatorv1.NewAllocatorServiceClient(conn))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := clients[0].CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "p", Pool: &allocatorv1.Pool{Cidrs: []string{"10.9.0.0/22"}}})
	require.NoError(t, err)
	_, err = clients[1].GetPool(ctx, &allocatorv1.GetPoolRequest{Name: "pools/p"})
	require.NoError(t, err, "the pool is served by the other replica")

	const workers, each = 32, 25
	var mu sync.Mutex
	got := map[string]string{}
	// The workers report to the test goroutine, which alone may end the
	// test.
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			errs <- func() error {
				c := clients[w%2]
				for i := range each {
					name := fmt.Sprintf("w%d-%d", w, i)
					resp, err := c.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/p",
						Owner: &allocatorv1.Owner{Cluster: "a", Kind: "Pod", Namespace: "ns", Name: name, Uid: "u-" + name}})
					if err != nil {
						return fmt.Errorf("allocate %s: %w", name, err)
					}
					addr := resp.GetAllocation().GetAddress()
					mu.Lock()
					other, dup := got[addr]
					got[addr] = name
					mu.Unlock()
					if dup {
						return fmt.Errorf("%s handed to %s and %s", addr, other, name)
					}
				}
				return nil
			}()
		}()
	}
	for range workers {
		require.NoError(t, <-errs)
	}
	require.Len(t, got, workers*each)
	// Reads are as fresh as the store: each replica lists every
	// acknowledged allocation at once, whichever replica made it.
	for r, c := range clients {
		list, err := listAll(ctx, c, "p")
		require.NoError(t, err)
		listed := map[string]string{}
		for _, a := range list {
			listed[a.GetAddress()] = a.GetOwner().GetName()
		}
		require.Equal(t, got, listed, "replica %d lists every acknowledged allocation", r)
	}
	// Both have applied the same commits, and say so.
	revs := []float64{scrape(t, metrics[0])["plexus_allocator_store_revision"], scrape(t, metrics[1])["plexus_allocator_store_revision"]}
	require.Positive(t, revs[0])
	require.Equal(t, revs[0], revs[1])
}
