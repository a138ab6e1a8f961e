package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	allocatorv1 "github.com/plexusnet/plexus/clients/go/plexus/allocator/v1"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/kubetest"
)

// TestEtcdRestartUnderLoad: clients allocate through an allocator on etcd
// while etcd is stopped and started again. While etcd is away the
// allocator says NOT_SERVING and allocations fail (none is acknowledged
// that is not durable); once etcd is back it serves again by itself, and
// every acknowledged allocation is there, none twice.
func TestEtcdRestartUnderLoad(t *testing.T) {
	e := kubetest.StartEtcd(t)
	a := startAllocator(t, "--store=etcd:"+e.Endpoints()[0])
	conn, err := dial.New(a.grpcAddr, dial.WithoutRetry())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	client := allocatorv1.NewAllocatorServiceClient(conn)
	health := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = client.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "p", Pool: &allocatorv1.Pool{Cidrs: []string{"10.8.0.0/14"}}})
	require.NoError(t, err)

	var (
		mu     sync.Mutex
		acked  = map[string]string{} // owner → address
		failed atomic.Int64
		n      atomic.Int64
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%d-%d", w, i)
				cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
				resp, err := client.Allocate(cctx, &allocatorv1.AllocateRequest{Pool: "pools/p",
					Owner: &allocatorv1.Owner{Kind: "Pod", Namespace: "ns", Name: name}})
				ccancel()
				if err != nil {
					failed.Add(1)
					time.Sleep(20 * time.Millisecond)
					continue
				}
				n.Add(1)
				mu.Lock()
				acked[name] = resp.GetAllocation().GetAddress()
				mu.Unlock()
			}
		})
	}
	serving := func() healthpb.HealthCheckResponse_ServingStatus {
		hctx, hcancel := context.WithTimeout(ctx, time.Second)
		defer hcancel()
		resp, err := health.Check(hctx, &healthpb.HealthCheckRequest{Service: allocatorv1.AllocatorService_ServiceDesc.ServiceName})
		if err != nil {
			return healthpb.HealthCheckResponse_UNKNOWN
		}
		return resp.GetStatus()
	}
	require.Eventually(t, func() bool { return n.Load() > 100 }, 30*time.Second, 10*time.Millisecond, "allocations flow before the restart")

	require.NoError(t, e.Stop())
	require.Eventually(t, func() bool { return serving() == healthpb.HealthCheckResponse_NOT_SERVING }, 30*time.Second, 50*time.Millisecond,
		"NOT_SERVING while etcd is away")
	before := failed.Load()
	require.Eventually(t, func() bool { return failed.Load() > before }, 10*time.Second, 10*time.Millisecond, "allocations fail while etcd is away")

	require.NoError(t, e.Start(ctx))
	require.Eventually(t, func() bool { return serving() == healthpb.HealthCheckResponse_SERVING }, 30*time.Second, 50*time.Millisecond,
		"SERVING again once etcd is back")
	after := n.Load()
	require.Eventually(t, func() bool { return n.Load() > after+100 }, 30*time.Second, 10*time.Millisecond, "allocations flow again")
	close(stop)
	wg.Wait()

	// Every acknowledged allocation is stored, each address once.
	list, err := listAll(ctx, client, "p")
	require.NoError(t, err)
	byAddr := map[string]string{}
	for _, al := range list {
		other, dup := byAddr[al.GetAddress()]
		require.False(t, dup, "%s held by %s and %s", al.GetAddress(), other, al.GetOwner().GetName())
		byAddr[al.GetAddress()] = al.GetOwner().GetName()
	}
	for owner, addr := range acked {
		require.Equal(t, owner, byAddr[addr], "acknowledged %s → %s is stored", owner, addr)
	}
	t.Logf("%d acknowledged, %d failed while etcd was away, %d stored", len(acked), failed.Load(), len(byAddr))
}
