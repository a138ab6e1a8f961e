package vips

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/services/importer/exports"
)

// oneAddress answers every owner with 10.0.0.11 and counts the calls.
type oneAddress struct {
	allocatorv1.AllocatorServiceClient
	mu    sync.Mutex
	calls int
}

func (f *oneAddress) BatchAllocate(_ context.Context, req *allocatorv1.BatchAllocateRequest, _ ...grpc.CallOption) (*allocatorv1.BatchAllocateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	out := &allocatorv1.BatchAllocateResponse{}
	for _, r := range req.GetRequests() {
		out.Allocations = append(out.Allocations, &allocatorv1.Allocation{Address: "10.0.0.11", Owner: r.GetOwner()})
	}
	return out, nil
}

// TestGuard: a replica whose guard refuses (a deposed leader) asks the
// allocator for nothing.
func TestGuard(t *testing.T) {
	alloc := &oneAddress{}
	refused := errors.New("not leading")
	var guard error
	v := New(alloc, []string{"v4"}, func() error { return guard })
	key := exports.Key{Namespace: "ns", Name: "x"}

	guard = refused
	_, err := v.Get(context.Background(), key)
	require.ErrorIs(t, err, refused)
	require.Zero(t, alloc.calls, "allocated although the guard refused")

	guard = nil
	ips, err := v.Get(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.11"}, ips)

	// A cached answer needs no call, so no guard either.
	guard = refused
	ips, err = v.Get(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.11"}, ips)
	require.Equal(t, 1, alloc.calls)

	v.Reset()
	guard = nil
	_, err = v.Get(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, 2, alloc.calls, "a new term asks again")
}
