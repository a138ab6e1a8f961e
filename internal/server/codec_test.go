package server

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"

	"github.com/plexusnet/plexus/internal/apierr"
)

// TestDecodeCodec: a message that does not decode reaches the handler
// chain empty and remembered; the first interceptor answers it with
// UNDECODABLE_REQUEST and forgets it, so nothing stays behind whatever
// the interceptors after it decide; a message that decodes passes.
func TestDecodeCodec(t *testing.T) {
	c := newDecodeCodec()
	bad := &healthpb.HealthCheckRequest{}
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x0a, 0x10, 'x'})}, bad))
	require.EqualValues(t, 1, c.pending.Load())

	called := false
	handler := func(context.Context, any) (any, error) { called = true; return nil, nil }
	_, err := c.unary(context.Background(), bad, &grpc.UnaryServerInfo{}, handler)
	require.Equal(t, ReasonUndecodable, apierr.Reason(err))
	require.False(t, called)
	require.Zero(t, c.pending.Load(), "answered and forgotten")

	good := &healthpb.HealthCheckRequest{}
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x0a, 0x01, 'x'})}, good))
	require.Equal(t, "x", good.GetService())
	_, err = c.unary(context.Background(), good, &grpc.UnaryServerInfo{}, handler)
	require.NoError(t, err)
	require.True(t, called)
}
