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

// TestEncodedIsSentAsIs: a message encoded once goes out byte for byte
// as the codec would have encoded it, from any number of streams.
func TestEncodedIsSentAsIs(t *testing.T) {
	c := newDecodeCodec()
	m := &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}
	want, err := c.Marshal(m)
	require.NoError(t, err)
	e, err := Encode(m)
	require.NoError(t, err)
	require.Equal(t, want.Len(), e.Len())
	for range 2 {
		got, err := c.Marshal(e)
		require.NoError(t, err)
		require.Equal(t, want.Materialize(), got.Materialize())
		got.Free() // a sent message's buffers are freed; the encoding stays
	}
	var back healthpb.HealthCheckResponse
	got, _ := c.Marshal(e)
	require.NoError(t, c.Unmarshal(got, &back))
	require.Equal(t, m.GetStatus(), back.GetStatus())
}
