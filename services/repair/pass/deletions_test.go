package pass_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	repairv1 "github.com/plexusnet/plexus/api/repair/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
	"github.com/plexusnet/plexus/services/repair/decide"
	"github.com/plexusnet/plexus/services/repair/internal/repairtest"
	"github.com/plexusnet/plexus/services/repair/pass"
)

// startWithStalledDeletion starts an allocator on a store that holds pool
// "d" (10.5.0.0/24) left deleting with n allocations whose owners are gone.
func startWithStalledDeletion(t *testing.T, n int) *repairtest.Allocator {
	t.Helper()
	st := memory.New()
	repairtest.StalledDeletion(t, st, "d", "10.5.0.0/24", "c", "ns", n)
	return repairtest.StartAllocatorOn(t, st)
}

func stalledFinding(res *pass.Result) *repairv1.Finding {
	for _, f := range res.Findings {
		if f.GetKind() == repairv1.FindingKind_FINDING_KIND_STALLED_DELETION {
			return f
		}
	}
	return nil
}

// TestStalledDeletionIsFinished: a pool left deleting is not judged
// allocation by allocation; the pass that sees it stalled (the second)
// finishes its deletion through the allocator, and a dry run does not.
func TestStalledDeletionIsFinished(t *testing.T) {
	alloc := startWithStalledDeletion(t, 5)
	reg := prometheus.NewRegistry()
	r := newRunner(t, quickConfig(), alloc, repairtest.NewView(), pass.WithRegisterer(reg))

	res := run(t, r, false)
	require.Equal(t, repairv1.PassState_PASS_STATE_COMPLETE, res.Report.GetState())
	require.EqualValues(t, 5, res.Report.GetAllocations())
	require.Empty(t, res.Findings, "the first pass cannot tell a stall, and a deleting pool's allocations are no leaks")

	res = run(t, r, true)
	f := stalledFinding(res)
	require.NotNil(t, f)
	require.Equal(t, repairv1.Action_ACTION_DRY_RUN, f.GetAction(), f.GetMessage())
	require.Equal(t, "pools/d", f.GetPool())
	pool, err := alloc.Client.GetPool(context.Background(), &allocatorv1.GetPoolRequest{Name: "pools/d"})
	require.NoError(t, err)
	require.True(t, pool.GetPool().GetDeleting())
	require.Equal(t, pool.GetPool().GetEtag(), f.GetEtag())

	res = run(t, r, false)
	f = stalledFinding(res)
	require.NotNil(t, f)
	require.Equal(t, repairv1.Action_ACTION_DELETED, f.GetAction(), f.GetMessage())
	require.EqualValues(t, 1, f.GetStrikes())
	require.Contains(t, f.GetMessage(), "still holds 5 allocations")
	require.EqualValues(t, 1, res.Report.GetPoolsDeleted())
	require.Zero(t, res.Report.GetSlicesDeleted())
	require.Zero(t, res.Report.GetReleased())
	require.EqualValues(t, 1, res.Report.GetFindingsByKind()["STALLED_DELETION"])
	_, err = alloc.Client.GetPool(context.Background(), &allocatorv1.GetPoolRequest{Name: "pools/d"})
	require.Equal(t, "POOL_NOT_FOUND", apierr.Reason(err))
	require.Nil(t, get(t, alloc, "pools/d/allocations/10.5.0.1"))
	require.Equal(t, 1.0, metricValue(t, reg, "plexus_repair_actions_total", "DELETED"))
	require.Equal(t, 1.0, metricValue(t, reg, "plexus_repair_findings", "STALLED_DELETION"))

	res = run(t, r, false)
	require.Empty(t, res.Findings)
	require.Zero(t, res.Report.GetAllocations())
}

// TestStalledDeletionGuardedByEtag: a pool deleted and created again under
// the same id between the pass's read and its deletion is left alone.
func TestStalledDeletionGuardedByEtag(t *testing.T) {
	alloc := startWithStalledDeletion(t, 3)
	next := pod("next", "uid-next")
	view := repairtest.NewView()
	view.AddOwner(next)
	var recreated *allocatorv1.Allocation
	r := newRunner(t, quickConfig(), alloc, view, pass.WithBeforeAct(func(ctx context.Context, out *decide.Output) {
		require.Len(t, out.PoolDeletes, 1)
		_, err := alloc.Client.DeletePool(ctx, &allocatorv1.DeletePoolRequest{Name: "pools/d", Force: true})
		require.NoError(t, err)
		createPool(t, alloc, "d", "10.5.0.0/24")
		recreated = allocate(t, alloc, "d", next, "10.5.0.1")
	}))
	require.Empty(t, run(t, r, false).Findings)

	res := run(t, r, false)
	f := stalledFinding(res)
	require.NotNil(t, f)
	require.Equal(t, repairv1.Action_ACTION_DELETE_FAILED, f.GetAction())
	require.Contains(t, f.GetMessage(), "ETAG_MISMATCH")
	require.Zero(t, res.Report.GetPoolsDeleted())
	got := get(t, alloc, recreated.GetName())
	require.NotNil(t, got, "the pool created again was deleted")
	require.Equal(t, "uid-next", got.GetOwner().GetUid())

	res = run(t, r, false)
	require.Nil(t, stalledFinding(res), "the pool is not being deleted any more")
}

// slowDeletes is an allocator whose DeletePool does not answer within the
// call, as one does while it releases a large pool in chunks.
type slowDeletes struct{ pass.Allocator }

func (s slowDeletes) DeletePool(ctx context.Context, _ *allocatorv1.DeletePoolRequest, _ ...grpc.CallOption) (*allocatorv1.DeletePoolResponse, error) {
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// TestStalledDeletionResumedPastTheCall: a deletion that the allocator
// does not finish within the call is RESUMED (it goes on there), not
// failed, and not counted as a deleted pool.
func TestStalledDeletionResumedPastTheCall(t *testing.T) {
	alloc := startWithStalledDeletion(t, 5)
	reg := prometheus.NewRegistry()
	r, err := pass.New(quickConfig(), slowDeletes{alloc.Client}, repairtest.NewView(),
		pass.WithRegisterer(reg), pass.WithCallTimeout(100*time.Millisecond))
	require.NoError(t, err)
	require.Empty(t, run(t, r, false).Findings)
	res := run(t, r, false)
	f := stalledFinding(res)
	require.NotNil(t, f)
	require.Equal(t, repairv1.Action_ACTION_RESUMED, f.GetAction(), f.GetMessage())
	require.Contains(t, f.GetMessage(), "the allocator goes on with it")
	require.Zero(t, res.Report.GetPoolsDeleted())
	require.Equal(t, 1.0, metricValue(t, reg, "plexus_repair_actions_total", "RESUMED"))
}
