package server_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// deletingSize is one more allocation than a forced deletion releases in
// one commit, so that it marks the pool deleting and releases in chunks.
const deletingSize = 4097

// releasesFail fails every commit that only releases allocations of a
// pool being deleted while on is set, as a store that breaks in the
// middle of a forced deletion does.
type releasesFail struct {
	store.Store
	on *atomic.Bool
}

func (f releasesFail) Commit(ctx context.Context, txn store.Txn) (int64, error) {
	if f.on.Load() && len(txn.Ops) > 0 && txn.Ops[0].Kind == store.OpDeleteAllocation && len(txn.Conds) == 1 && txn.Conds[0].Kind == store.CondPoolRevision {
		return 0, errors.New("injected store failure")
	}
	return f.Store.Commit(ctx, txn)
}

// withFailingReleases serves on a store whose releases of a pool being
// deleted fail while on is set.
func withFailingReleases(on *atomic.Bool) envOption {
	return withStore(func(st store.Store) store.Store { return releasesFail{Store: st, on: on} })
}

// deletingPool creates pool id with deletingSize allocations and leaves
// it being deleted, its deletion cut short by the store (the env's store
// fails releases).
func deletingPool(id string) func(*testing.T, *env) {
	return func(t *testing.T, e *env) {
		e.createPool(t, id, poolV4("10.0.0.0/16"))
		req := &allocatorv1.BatchAllocateRequest{}
		for i := range deletingSize {
			req.Requests = append(req.Requests, &allocatorv1.AllocateRequest{Pool: "pools/" + id, Owner: pod("ns", fmt.Sprint("pod-", i))})
		}
		_, err := e.client.BatchAllocate(ctx(t), req)
		require.NoError(t, err)
		_, err = e.client.DeletePool(ctx(t), &allocatorv1.DeletePoolRequest{Name: "pools/" + id, Force: true})
		requireStatus(t, err, codes.Internal, "INTERNAL", "")
	}
}

func TestPoolBeingDeleted(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	e := start(t, withFailingReleases(&failing))
	deletingPool("p")(t, e)
	e.createPool(t, "other", poolV4("10.1.0.0/24"))

	got, err := e.client.GetPool(ctx(t), &allocatorv1.GetPoolRequest{Name: "pools/p"})
	require.NoError(t, err)
	require.True(t, got.GetPool().GetDeleting())
	require.EqualValues(t, deletingSize, got.GetPool().GetStats().GetAllocated())
	list, err := e.client.ListPools(ctx(t), &allocatorv1.ListPoolsRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetPools(), 2)
	require.True(t, list.GetPools()[1].GetDeleting(), list.GetPools()[1].GetName())
	require.False(t, list.GetPools()[0].GetDeleting())
	m := httpGet(t, "http://"+e.httpAddr+"/metrics")
	require.Equal(t, 1.0, sample(t, m, `plexus_allocator_pools_deleting`))

	_, err = e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: pod("ns", "new")})
	requireStatus(t, err, codes.FailedPrecondition, "POOL_DELETING", "")
	_, err = e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: pod("ns", "pod-7")})
	requireStatus(t, err, codes.FailedPrecondition, "POOL_DELETING", "")
	_, err = e.client.BatchAllocate(ctx(t), &allocatorv1.BatchAllocateRequest{Requests: []*allocatorv1.AllocateRequest{
		{Pool: "pools/other", Owner: pod("ns", "x")}, {Pool: "pools/p", Owner: pod("ns", "x")},
	}})
	requireStatus(t, err, codes.FailedPrecondition, "POOL_DELETING", "")
	_, err = e.client.UpdatePool(ctx(t), &allocatorv1.UpdatePoolRequest{
		Pool:       &allocatorv1.Pool{Name: "pools/p", Labels: map[string]string{"team": "net"}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}},
	})
	requireStatus(t, err, codes.FailedPrecondition, "POOL_DELETING", "")
	_, err = e.client.DeletePool(ctx(t), &allocatorv1.DeletePoolRequest{Name: "pools/p"})
	requireStatus(t, err, codes.FailedPrecondition, "POOL_NOT_EMPTY", "")

	// Nothing was stored by the refused requests, and a release works.
	other, err := e.client.GetPool(ctx(t), &allocatorv1.GetPoolRequest{Name: "pools/other"})
	require.NoError(t, err)
	require.Zero(t, other.GetPool().GetStats().GetAllocated())
	_, err = e.client.Release(ctx(t), &allocatorv1.ReleaseRequest{Pool: "pools/p", Owner: pod("ns", "pod-7")})
	require.NoError(t, err)

	failing.Store(false)
	del, err := e.client.DeletePool(ctx(t), &allocatorv1.DeletePoolRequest{Name: "pools/p", Force: true})
	require.NoError(t, err)
	require.EqualValues(t, deletingSize-1, del.GetReleased())
	_, err = e.client.GetPool(ctx(t), &allocatorv1.GetPoolRequest{Name: "pools/p"})
	requireStatus(t, err, codes.NotFound, "POOL_NOT_FOUND", "")
	snap, err := e.store.Snapshot(context.Background())
	require.NoError(t, err)
	require.Len(t, snap.Pools, 1)
	require.Empty(t, snap.Allocations)
}
