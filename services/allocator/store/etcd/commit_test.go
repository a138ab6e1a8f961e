package etcd

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// TestCommitErrors: what etcd answers a commit with becomes the store
// error its callers act on: too large (nothing written, and the same
// commit fails again), unconfirmed (it may have been applied), or
// neither.
func TestCommitErrors(t *testing.T) {
	s := &Store{closing: make(chan struct{})}
	for _, c := range []struct {
		err  error
		want error
	}{
		{rpctypes.ErrTooManyOps, store.ErrTooLarge},
		{rpctypes.ErrRequestTooLarge, store.ErrTooLarge},
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max (2895356 vs. 2097152)"), store.ErrTooLarge},
		{status.Error(codes.ResourceExhausted, "grpc: trying to send message larger than max (2895258 vs. 2097152)"), store.ErrTooLarge},
		{rpctypes.ErrTimeout, store.ErrUnconfirmed},
		{rpctypes.ErrTimeoutDueToLeaderFail, store.ErrUnconfirmed},
		{rpctypes.ErrTimeoutDueToConnectionLost, store.ErrUnconfirmed},
		{rpctypes.ErrLeaderChanged, store.ErrUnconfirmed},
		{rpctypes.ErrNoSpace, nil},
		{rpctypes.ErrTooManyRequests, nil},
		{errors.New("connection refused"), nil},
	} {
		got := s.commitError(context.Background(), c.err)
		require.ErrorIs(t, got, c.err)
		for _, e := range []error{store.ErrTooLarge, store.ErrUnconfirmed} {
			require.Equal(t, e == c.want, errors.Is(got, e), "%v: %v", c.err, got)
		}
	}
}
