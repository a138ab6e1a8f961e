package e2e_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// TestEtcdRestartUnderLoad: clients allocate, each call with its own
// request_id, through an allocator on etcd while etcd crashes (SIGKILL,
// no clean shutdown) and is started again on the same data folder and
// ports. While etcd is away the allocator says NOT_SERVING and
// allocations fail; once etcd is back it serves again by itself. Then,
// read through the allocator and through a second one started afterwards
// (which loads everything from etcd):
//   - every acknowledged allocation (owner → address) is stored, once;
//   - no owner holds two addresses, no address is held twice;
//   - an owner that was never acknowledged holds an address only if its
//     call failed (an unacknowledged call may or may not have committed).
//
// Every call that failed is then retried with the same request_id: the
// retry returns the address the store holds for that owner, if any, and
// afterwards the owner holds exactly that one address.
func TestEtcdRestartUnderLoad(t *testing.T) {
	e := kubetest.StartEtcd(t)
	a := startAllocator(t, "--store=etcd:"+e.Endpoints()[0])
	conn, err := dial.New(a.grpcAddr, dial.WithoutRetry())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	client := allocatorv1.NewAllocatorServiceClient(conn)
	health := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err = client.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "p", Pool: &allocatorv1.Pool{Cidrs: []string{"10.8.0.0/14"}}})
	require.NoError(t, err)

	var (
		mu     sync.Mutex
		acked  = map[string]string{} // owner → address
		failed = map[string]error{}  // owner → how its only call ended
		nfail  atomic.Int64
		n      atomic.Int64
	)
	reqFor := func(name string) *allocatorv1.AllocateRequest {
		return &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: owner4(name), RequestId: "req-" + name}
	}
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
				resp, err := client.Allocate(cctx, reqFor(name))
				ccancel()
				mu.Lock()
				if err != nil {
					failed[name] = err
				} else {
					acked[name] = resp.GetAllocation().GetAddress()
				}
				mu.Unlock()
				if err != nil {
					nfail.Add(1)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				n.Add(1)
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
	require.Eventually(t, func() bool { return n.Load() > 100 }, 30*time.Second, 10*time.Millisecond, "allocations flow before the crash")

	// The crash: commits are in flight (the workers never pause).
	require.NoError(t, e.Kill())
	require.Eventually(t, func() bool { return serving() == healthpb.HealthCheckResponse_NOT_SERVING }, 30*time.Second, 50*time.Millisecond,
		"NOT_SERVING while etcd is away")
	before := nfail.Load()
	require.Eventually(t, func() bool { return nfail.Load() > before }, 10*time.Second, 10*time.Millisecond, "allocations fail while etcd is away")

	require.NoError(t, e.Start(ctx), "etcd starts again on its data folder and ports")
	require.Eventually(t, func() bool { return serving() == healthpb.HealthCheckResponse_SERVING }, 30*time.Second, 50*time.Millisecond,
		"SERVING again once etcd is back")
	after := n.Load()
	require.Eventually(t, func() bool { return n.Load() > after+100 }, 30*time.Second, 10*time.Millisecond, "allocations flow again")
	close(stop)
	wg.Wait()

	// A second replica, started now, knows only what etcd holds.
	fresh := startAllocator(t, "--store=etcd:"+e.Endpoints()[0]).client(t)
	readers := map[string]allocatorv1.AllocatorServiceClient{"the allocator": client, "a replica started after the crash": fresh}

	// What the store holds must agree with what the clients were told.
	var stored map[string]string // owner → address, as read through fresh
	for _, who := range slices.Sorted(maps.Keys(readers)) {
		held, bad := checkStored(ctx, readers[who], acked, failed, nil)
		require.Empty(t, bad, "read through %s", who)
		if readers[who] == fresh {
			stored = held
		}
	}
	committedUnacked := 0
	for owner := range failed {
		if _, ok := stored[owner]; ok {
			committedUnacked++
		}
	}

	// Retry every failed call with its request_id.
	retried := map[string]string{} // owner → address the retry returned
	var retryErrs []string
	var rmu sync.Mutex
	todo := make(chan string)
	var rwg sync.WaitGroup
	for range 8 {
		rwg.Go(func() {
			for owner := range todo {
				var resp *allocatorv1.AllocateResponse
				var err error
				for attempt := 0; attempt < 5; attempt++ {
					cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
					resp, err = client.Allocate(cctx, reqFor(owner))
					ccancel()
					if err == nil {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
				rmu.Lock()
				switch got := resp.GetAllocation().GetAddress(); {
				case err != nil:
					retryErrs = append(retryErrs, fmt.Sprintf("retry of %s failed: %v", owner, err))
				case stored[owner] != "" && got != stored[owner]:
					retryErrs = append(retryErrs, fmt.Sprintf("retry of %s returned %s, but the store holds %s for it", owner, got, stored[owner]))
				default:
					retried[owner] = got
				}
				rmu.Unlock()
			}
		})
	}
	for _, owner := range slices.Sorted(maps.Keys(failed)) {
		todo <- owner
	}
	close(todo)
	rwg.Wait()
	require.Empty(t, retryErrs, "every retry with its request_id returns what the store holds")
	for _, who := range slices.Sorted(maps.Keys(readers)) {
		_, bad := checkStored(ctx, readers[who], acked, failed, retried)
		require.Empty(t, bad, "after the retries, read through %s", who)
	}
	t.Logf("%d acknowledged, %d failed (%d of them committed all the same), %d retried",
		len(acked), len(failed), committedUnacked, len(retried))
}

// checkStored lists pool "p" through c and returns what it holds (owner →
// address) and how it disagrees with what the clients were told: acked
// (owner → address acknowledged), failed (owners whose call ended in an
// error; they may or may not hold an address) and retried (owner →
// address a later retry returned; the owner must hold exactly that).
// The replica may lag behind the store for a moment, so a listing that
// disagrees is read again for up to 20 s; what it reports then stands.
func checkStored(ctx context.Context, c allocatorv1.AllocatorServiceClient, acked map[string]string, failed map[string]error, retried map[string]string) (map[string]string, []string) {
	var held map[string]string
	var bad []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		held, bad = map[string]string{}, nil
		list, err := listAll(ctx, c, "p")
		if err != nil {
			bad = append(bad, fmt.Sprintf("list: %v", err))
		}
		byOwner, byAddr := map[string][]string{}, map[string][]string{}
		for _, al := range list {
			owner, addr := al.GetOwner().GetName(), al.GetAddress()
			byOwner[owner] = append(byOwner[owner], addr)
			byAddr[addr] = append(byAddr[addr], owner)
			held[owner] = addr
		}
		for _, addr := range slices.Sorted(maps.Keys(byAddr)) {
			if owners := byAddr[addr]; len(owners) > 1 {
				bad = append(bad, fmt.Sprintf("%s is held by %v", addr, owners))
			}
		}
		for _, owner := range slices.Sorted(maps.Keys(byOwner)) {
			addrs := byOwner[owner]
			if len(addrs) > 1 {
				bad = append(bad, fmt.Sprintf("owner %s holds %v", owner, addrs))
			}
			_, wasAcked := acked[owner]
			_, didFail := failed[owner]
			if !wasAcked && !didFail {
				bad = append(bad, fmt.Sprintf("owner %s holds %v, but no call of it failed and none was acknowledged", owner, addrs))
			}
		}
		for _, owner := range slices.Sorted(maps.Keys(acked)) {
			if want := []string{acked[owner]}; !slices.Equal(byOwner[owner], want) {
				bad = append(bad, fmt.Sprintf("acknowledged %s → %s, the store holds %v", owner, acked[owner], byOwner[owner]))
			}
		}
		for _, owner := range slices.Sorted(maps.Keys(retried)) {
			if want := []string{retried[owner]}; !slices.Equal(byOwner[owner], want) {
				bad = append(bad, fmt.Sprintf("retry of %s returned %s, the store holds %v", owner, retried[owner], byOwner[owner]))
			}
		}
		if len(bad) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			if len(bad) > 20 {
				bad = append(bad[:20], fmt.Sprintf("and %d more", len(bad)-20))
			}
			return held, bad
		}
	}
}
