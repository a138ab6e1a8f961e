package e2e_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/apierr"
)

// TestForcedDeletionCutShortByAKill: the allocator is killed (SIGKILL)
// while a forced DeletePool releases a large pool in chunks. Started again
// on the same bolt file, it shows the pool deleting with the allocations
// the finished chunks left, listed and counted alike; it refuses to
// allocate there; plexusctl pool delete --force resumes the deletion and,
// its deadline passed, says it goes on; a DeletePool meanwhile waits for
// it and releases exactly the rest; and the addresses are free for a pool
// created again.
func TestForcedDeletionCutShortByAKill(t *testing.T) {
	const total = 200_000 // about a second of chunks on bolt
	db := filepath.Join(t.TempDir(), "allocator.db")
	a := startAllocator(t, "--store=bolt:"+db)
	c := a.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := c.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "big", Pool: &allocatorv1.Pool{Cidrs: []string{"10.96.0.0/14"}}})
	require.NoError(t, err)
	for b := range total / 10_000 {
		req := &allocatorv1.BatchAllocateRequest{}
		for i := range 10_000 {
			name := fmt.Sprintf("w-%d-%d", b, i)
			req.Requests = append(req.Requests, &allocatorv1.AllocateRequest{Pool: "pools/big",
				Owner: &allocatorv1.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: name, Uid: "u-" + name}})
		}
		_, err := c.BatchAllocate(ctx, req)
		require.NoError(t, err)
	}

	deleted := make(chan error, 1)
	go func() {
		_, err := c.DeletePool(ctx, &allocatorv1.DeletePoolRequest{Name: "pools/big", Force: true})
		deleted <- err
	}()
	// Kill once the first chunk is committed.
	var left uint64
	waitUntil(t, func() bool {
		p, err := c.GetPool(ctx, &allocatorv1.GetPoolRequest{Name: "pools/big"})
		if err != nil {
			return false
		}
		left = p.GetPool().GetStats().GetAllocated()
		return p.GetPool().GetDeleting() && left < total
	}, time.Minute)
	a.kill()
	err = <-deleted
	require.Equal(t, codes.Unavailable, status.Code(err), "the call ended with the process: %v", err)
	require.Positive(t, left, "the deletion finished before the kill")

	a = startAllocator(t, "--store=bolt:"+db)
	c = a.client(t)
	p, err := c.GetPool(ctx, &allocatorv1.GetPoolRequest{Name: "pools/big"})
	require.NoError(t, err)
	require.True(t, p.GetPool().GetDeleting(), "the pool is no longer marked deleting")
	remaining := p.GetPool().GetStats().GetAllocated()
	require.Positive(t, remaining)
	require.Less(t, remaining, uint64(total), "no chunk was durable")
	require.LessOrEqual(t, remaining, left, "a committed chunk came back")
	require.Equal(t, 1.0, scrape(t, a.httpAddr)[`plexus_allocator_pools_deleting`])
	t.Logf("killed with %d of %d allocations seen left; %d after the restart", left, total, remaining)
	list, err := listAll(ctx, c, "big")
	require.NoError(t, err)
	require.Len(t, list, int(remaining), "listed and counted differ")

	_, err = c.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/big",
		Owner: &allocatorv1.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: "late", Uid: "u-late"}})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.Equal(t, "POOL_DELETING", apierr.Reason(err))

	// plexusctl's deadline passes first: it says the deletion goes on.
	_, errOut, err := tryCmd(t, bins.plexusctl, "--allocator-addr", a.grpcAddr, "--timeout", "150ms", "pool", "delete", "big", "--force")
	require.Error(t, err, "the rest of the deletion took less than plexusctl's 150 ms")
	t.Logf("plexusctl: %s", errOut)
	require.Contains(t, errOut, "pool big is still being deleted")
	require.Contains(t, errOut, "the allocator goes on with it")
	// A DeletePool meanwhile waits for that deletion, and answers for it.
	resp, err := c.DeletePool(ctx, &allocatorv1.DeletePoolRequest{Name: "pools/big", Etag: p.GetPool().GetEtag(), Force: true})
	require.NoError(t, err)
	require.Equal(t, remaining, resp.GetReleased())
	_, err = c.GetPool(ctx, &allocatorv1.GetPoolRequest{Name: "pools/big"})
	require.Equal(t, "POOL_NOT_FOUND", apierr.Reason(err))

	_, err = c.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "big", Pool: &allocatorv1.Pool{Cidrs: []string{"10.96.0.0/14"}}})
	require.NoError(t, err)
	got, err := c.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/big", Address: list[0].GetAddress(),
		Owner: &allocatorv1.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: "again", Uid: "u-again"}})
	require.NoError(t, err, "an address the finished deletion released")
	require.Equal(t, list[0].GetAddress(), got.GetAllocation().GetAddress())
	require.NoError(t, a.stop(20*time.Second))
	checkFile(t, db, &ledger{})
}
