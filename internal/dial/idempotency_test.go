package dial

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
)

// TestNotRetried pins which Plexus methods are not retried: a new method
// must say whether repeating it is safe.
func TestNotRetried(t *testing.T) {
	got, err := notRetried()
	require.NoError(t, err)
	var names []string
	for _, m := range got {
		names = append(names, m["service"]+"/"+m["method"])
	}
	require.Equal(t, []string{
		"plexus.allocator.v1.AllocatorService/CreatePool",
		"plexus.allocator.v1.AllocatorService/DeletePool",
		"plexus.allocator.v1.AllocatorService/Release",
		"plexus.allocator.v1.AllocatorService/UpdatePool",
		"plexus.importer.v1.ImporterService/WithdrawImport",
		"plexus.membership.v1.MembershipService/DeregisterWorkload",
		"plexus.repair.v1.RepairService/RunRepair",
	}, names)
}

// lostAnswers answers the first call of each method with UNAVAILABLE, as a
// replica that committed and died before answering would look.
type lostAnswers struct {
	allocatorv1.UnimplementedAllocatorServiceServer
	releases, gets, allocates atomic.Int32
}

func unavailableFirst(n *atomic.Int32) error {
	if n.Add(1) == 1 {
		return status.Error(codes.Unavailable, "connection lost")
	}
	return nil
}

func (s *lostAnswers) Release(context.Context, *allocatorv1.ReleaseRequest) (*allocatorv1.ReleaseResponse, error) {
	if err := unavailableFirst(&s.releases); err != nil {
		return nil, err
	}
	return &allocatorv1.ReleaseResponse{}, nil
}

func (s *lostAnswers) GetPool(context.Context, *allocatorv1.GetPoolRequest) (*allocatorv1.GetPoolResponse, error) {
	if err := unavailableFirst(&s.gets); err != nil {
		return nil, err
	}
	return &allocatorv1.GetPoolResponse{}, nil
}

func (s *lostAnswers) Allocate(context.Context, *allocatorv1.AllocateRequest) (*allocatorv1.AllocateResponse, error) {
	if err := unavailableFirst(&s.allocates); err != nil {
		return nil, err
	}
	return &allocatorv1.AllocateResponse{}, nil
}

// TestUnsafeMethodsAreNotRetried: a read and an idempotent Allocate are
// retried; a Release, which may have freed the address already, is not.
func TestUnsafeMethodsAreNotRetried(t *testing.T) {
	svc := &lostAnswers{}
	s := grpc.NewServer()
	allocatorv1.RegisterAllocatorServiceServer(s, svc)
	addr := serveWith(t, s)
	conn, err := New(addr, WithRetry(RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Multiplier: 2}))
	require.NoError(t, err)
	defer conn.Close()
	cl := allocatorv1.NewAllocatorServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	_, err = cl.GetPool(ctx, &allocatorv1.GetPoolRequest{Name: "pools/p"})
	require.NoError(t, err)
	require.EqualValues(t, 2, svc.gets.Load())
	_, err = cl.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/p"})
	require.NoError(t, err)
	require.EqualValues(t, 2, svc.allocates.Load())

	_, err = cl.Release(ctx, &allocatorv1.ReleaseRequest{Name: "pools/p/allocations/10.0.0.1"})
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.EqualValues(t, 1, svc.releases.Load(), "the caller decides whether to release again")
}
