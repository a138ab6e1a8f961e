package dial

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/testing/testcerts"
	"github.com/plexusnet/plexus/internal/tlsconf"
)

// flaky fails its first `failures` calls with UNAVAILABLE and remembers the
// authorization metadata it saw.
type flaky struct {
	testpb.UnimplementedTestServiceServer
	failures int32
	calls    atomic.Int32
	auth     atomic.Value
}

func (f *flaky) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.auth.Store(md.Get("authorization"))
	if f.calls.Add(1) <= f.failures {
		return nil, status.Error(codes.Unavailable, "warming up")
	}
	return &testpb.Empty{}, nil
}

func serve(t *testing.T, svc testpb.TestServiceServer) string {
	t.Helper()
	s := grpc.NewServer()
	testpb.RegisterTestServiceServer(s, svc)
	return serveWith(t, s)
}

// serveWith serves s on a loopback port until the test ends.
func serveWith(t *testing.T, s *grpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func call(t *testing.T, addr string, opts ...Option) error {
	t.Helper()
	conn, err := New(addr, opts...)
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = testpb.NewTestServiceClient(conn).EmptyCall(ctx, &testpb.Empty{})
	return err
}

func TestRetriesUnavailable(t *testing.T) {
	svc := &flaky{failures: 2}
	addr := serve(t, svc)
	require.NoError(t, call(t, addr, WithRetry(RetryPolicy{MaxAttempts: 4, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Multiplier: 2})))
	require.EqualValues(t, 3, svc.calls.Load())
}

func TestRetryGivesUp(t *testing.T) {
	svc := &flaky{failures: 100}
	addr := serve(t, svc)
	err := call(t, addr, WithRetry(RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond, Multiplier: 1}))
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.EqualValues(t, 3, svc.calls.Load())
}

func TestWithoutRetry(t *testing.T) {
	svc := &flaky{failures: 1}
	addr := serve(t, svc)
	require.Equal(t, codes.Unavailable, status.Code(call(t, addr, WithoutRetry())))
	require.EqualValues(t, 1, svc.calls.Load())
}

func TestBearerToken(t *testing.T) {
	svc := &flaky{}
	addr := serve(t, svc)
	require.NoError(t, call(t, addr, WithBearerToken("s3cret")))
	require.Equal(t, []string{"Bearer s3cret"}, svc.auth.Load())

	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte("from-file\n"), 0o600))
	require.NoError(t, call(t, addr, WithTokenFile(file)))
	require.Equal(t, []string{"Bearer from-file"}, svc.auth.Load())

	empty := filepath.Join(t.TempDir(), "empty")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	_, err := New(addr, WithTokenFile(empty))
	require.ErrorContains(t, err, "empty")
}

func TestNewDoesNotWaitForTheServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close()) // nothing listens there now

	began := time.Now()
	conn, err := New(addr, WithRetry(RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond, Multiplier: 1}))
	require.NoError(t, err)
	defer conn.Close()
	require.Less(t, time.Since(began), time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = testpb.NewTestServiceClient(conn).EmptyCall(ctx, &testpb.Empty{})
	require.Equal(t, codes.Unavailable, status.Code(err))
}

func TestBadRetryPolicy(t *testing.T) {
	_, err := New("127.0.0.1:1", WithRetry(RetryPolicy{MaxAttempts: 1}))
	require.ErrorContains(t, err, "retry policy")
}

func TestIsLocal(t *testing.T) {
	for target, local := range map[string]bool{
		"127.0.0.1:7401":               true,
		"localhost:7401":               true,
		"[::1]:7401":                   true,
		"dns:///localhost:7401":        true,
		"dns://8.8.8.8/127.0.0.1:1":    true,
		"passthrough:///127.0.0.5:1":   true,
		"unix:///run/plexus.sock":      true,
		"allocator:7401":               false,
		"dns:///allocator.plexus:7401": false,
		"10.0.0.1:7401":                false,
		"localhost.evil.com:1":         false,
	} {
		require.Equal(t, local, isLocal(target), target)
	}
}

func TestFromConfig(t *testing.T) {
	svc := &flaky{}
	addr := serve(t, svc)
	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte("peer"), 0o600))

	cfg := config.New(config.Repair)
	cfg.PeerTokenFile = file
	require.NoError(t, call(t, addr, FromConfig(cfg)...))
	require.Equal(t, []string{"Bearer peer"}, svc.auth.Load())

	cfg.PeerCA = filepath.Join(t.TempDir(), "missing.pem")
	_, err := New(addr, FromConfig(cfg)...)
	require.ErrorContains(t, err, "CA bundle")
}

func TestHealthCheck(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	go s.Serve(lis)

	conn, err := New(lis.Addr().String(), WithoutRetry())
	require.NoError(t, err)
	defer conn.Close()
	check := HealthCheck(conn, "plexus.allocator.v1.AllocatorService")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	require.ErrorContains(t, check(ctx), "health check failed: NotFound", "unknown service")
	hs.SetServingStatus("plexus.allocator.v1.AllocatorService", healthpb.HealthCheckResponse_NOT_SERVING)
	require.EqualError(t, check(ctx), "NOT_SERVING")
	hs.SetServingStatus("plexus.allocator.v1.AllocatorService", healthpb.HealthCheckResponse_SERVING)
	require.NoError(t, check(ctx))

	s.Stop()
	require.Eventually(t, func() bool {
		err := check(ctx)
		return err != nil && strings.HasPrefix(err.Error(), "not reachable: ")
	}, 5*time.Second, 10*time.Millisecond)
}

// TestAddressList: a comma-separated list of replicas spreads calls over
// all of them, and when one goes away the calls go on to the others.
func TestAddressList(t *testing.T) {
	a, b := &flaky{}, &flaky{}
	addrA := serve(t, a)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sb := grpc.NewServer()
	testpb.RegisterTestServiceServer(sb, b)
	go sb.Serve(lis)
	t.Cleanup(sb.Stop)

	conn, err := New(addrA+", "+lis.Addr().String(), WithoutRetry())
	require.NoError(t, err)
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		_, err := client.EmptyCall(ctx, &testpb.Empty{})
		return err == nil && a.calls.Load() > 0 && b.calls.Load() > 0
	}, 5*time.Second, time.Millisecond, "calls reach both replicas")

	sb.Stop()
	require.Eventually(t, func() bool {
		before := a.calls.Load()
		for range 10 {
			if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
				return false
			}
		}
		return a.calls.Load() == before+10
	}, 5*time.Second, 10*time.Millisecond, "with one replica gone every call goes to the other")
}

// TestAddressListOverTLS: each replica of a list is verified against its
// own address, not against the list as one name.
func TestAddressListOverTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "plexus")
	certFile, keyFile := ca.Issue("server", testcerts.Loopback("allocator"))
	srvTLS, err := tlsconf.Server(certFile, keyFile, "")
	require.NoError(t, err)
	var addrs []string
	for range 2 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		s := grpc.NewServer(grpc.Creds(credentials.NewTLS(srvTLS)))
		testpb.RegisterTestServiceServer(s, &flaky{})
		go s.Serve(lis)
		t.Cleanup(s.Stop)
		addrs = append(addrs, lis.Addr().String())
	}
	require.NoError(t, call(t, strings.Join(addrs, ","), WithTLSFiles(ca.File, "", ""), WithoutRetry()))
}

// TestServerName: a member whose certificate names it, not its address
// (an inventory's TLS identity), is verified against that name; without
// it, or with another name, the handshake fails.
func TestServerName(t *testing.T) {
	ca := testcerts.NewCA(t, "plexus")
	certFile, keyFile := ca.Issue("server", testcerts.Leaf{CommonName: "membership", DNSNames: []string{"membership.east.example"}, Server: true})
	srvTLS, err := tlsconf.Server(certFile, keyFile, "")
	require.NoError(t, err)
	s := grpc.NewServer(grpc.Creds(credentials.NewTLS(srvTLS)))
	testpb.RegisterTestServiceServer(s, &flaky{})
	addr := serveWith(t, s)

	require.NoError(t, call(t, addr, WithTLSFiles(ca.File, "", ""), WithServerName("membership.east.example"), WithoutRetry()))
	err = call(t, addr, WithTLSFiles(ca.File, "", ""), WithoutRetry())
	require.ErrorContains(t, err, "cannot validate certificate for 127.0.0.1")
	err = call(t, addr, WithTLSFiles(ca.File, "", ""), WithServerName("membership.west.example"), WithoutRetry())
	require.ErrorContains(t, err, "certificate is valid for membership.east.example, not membership.west.example")
	// On a plaintext connection the name changes nothing.
	require.NoError(t, call(t, serve(t, &flaky{}), WithInsecure(), WithServerName("membership.east.example"), WithoutRetry()))
}
