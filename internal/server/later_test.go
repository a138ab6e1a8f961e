package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/server"
)

// runServer runs s until the test ends. The channel it returns is closed
// when Run returned, and *runErr is then what it returned.
func runServer(t *testing.T, s *server.Server, runErr *error) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		*runErr = s.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return")
		}
	})
	return done
}

func newServer(t *testing.T) *server.Server {
	t.Helper()
	s, err := server.New(testConfig(), "test", server.WithLogger(quietLogger()), server.WithoutSignalHandling(),
		server.WithDrainDelay(0), server.WithReadinessInterval(20*time.Millisecond))
	require.NoError(t, err)
	return s
}

// TestRegisterLater: a service registered before its implementation
// exists is NOT_SERVING and refuses its calls, unary and streaming, with
// the refusal it was given, after the interceptors (metrics count them);
// once the implementation is registered, it serves.
func TestRegisterLater(t *testing.T) {
	s := newServer(t)
	refusal := apierr.New(codes.Unavailable, "NOT_LOADED", "not loaded yet", nil)
	later := s.RegisterLater(&testpb.TestService_ServiceDesc, refusal)
	var runErr error
	runServer(t, s, &runErr)

	conn, err := dial.New(s.GRPCAddr(), dial.WithoutRetry())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	health := healthpb.NewHealthClient(conn)
	statusOf := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := health.Check(callCtx(t), &healthpb.HealthCheckRequest{Service: "grpc.testing.TestService"})
		require.NoError(t, err)
		return resp.GetStatus()
	}
	client := testpb.NewTestServiceClient(conn)

	require.False(t, later.Registered())
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, statusOf())
	_, err = client.UnaryCall(callCtx(t), body("hello"))
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Equal(t, "NOT_LOADED", apierr.Reason(err))
	stream, err := client.StreamingOutputCall(callCtx(t), &testpb.StreamingOutputCallRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Equal(t, "NOT_LOADED", apierr.Reason(err))
	_, metrics := httpGet(t, s.HTTPAddr(), "/metrics")
	v, err := metricValue(metrics, `grpc_server_handled_total{grpc_code="Unavailable",grpc_method="UnaryCall",grpc_service="grpc.testing.TestService",grpc_type="unary"}`)
	require.NoError(t, err, "the refusal went through the interceptors")
	require.Equal(t, "1", v)

	testpb.RegisterTestServiceServer(later, newTestService())
	require.True(t, later.Registered())
	s.SetServing("grpc.testing.TestService", true)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, statusOf())
	_, err = client.UnaryCall(callCtx(t), body("hello"))
	require.NoError(t, err)
	stream, err = client.StreamingOutputCall(callCtx(t), &testpb.StreamingOutputCallRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)

	require.Panics(t, func() { testpb.RegisterTestServiceServer(later, newTestService()) }, "registered twice")
	require.Panics(t, func() { testpb.RegisterReconnectServiceServer(later, testpb.UnimplementedReconnectServiceServer{}) }, "another service")
}

// TestFailStopsRun: Fail drains the server and makes Run return its
// error.
func TestFailStopsRun(t *testing.T) {
	s := newServer(t)
	var runErr error
	done := runServer(t, s, &runErr)
	boom := errors.New("store holds data of an earlier version")
	s.Fail(boom)
	s.Fail(errors.New("second")) // only the first counts
	select {
	case <-done:
		require.ErrorIs(t, runErr, boom)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Run did not return after Fail")
	}
}
