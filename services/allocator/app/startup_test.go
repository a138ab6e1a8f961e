package app_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/services/allocator/app"
)

// setupTimeout bounds Setup: it must return at once, whatever the store
// does, for the servers to start.
const setupTimeout = 10 * time.Second

var prefixes atomic.Int64

// startAllocator runs the allocator in-process with args (flags of its
// command). Setup must return within setupTimeout.
func startAllocator(t *testing.T, args ...string) *servertest.Service {
	t.Helper()
	cfg := config.New(config.Allocator)
	spec := app.Spec()
	fs := pflag.NewFlagSet("allocator", pflag.ContinueOnError)
	cfg.AddFlags(fs)
	spec.AddFlags(fs)
	require.NoError(t, fs.Parse(args))
	require.NoError(t, spec.Validate())
	return servertest.Start(t, cfg, config.Allocator.Name, func(ctx context.Context, rt *server.Runtime) (func(), error) {
		type result struct {
			cleanup func()
			err     error
		}
		done := make(chan result, 1)
		go func() {
			c, err := spec.Setup(ctx, rt)
			done <- result{c, err}
		}()
		select {
		case r := <-done:
			return r.cleanup, r.err
		case <-time.After(setupTimeout):
			return nil, fmt.Errorf("setup did not return within %s: the servers never start", setupTimeout)
		}
	})
}

func etcdArgs(endpoint string) []string {
	return []string{"--store=etcd:" + endpoint, fmt.Sprintf("--etcd-prefix=/startup-%d/", prefixes.Add(1))}
}

func conn(t *testing.T, s *servertest.Service) *grpc.ClientConn {
	t.Helper()
	c, err := dial.New(s.Server.GRPCAddr(), dial.WithoutRetry())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func health(t *testing.T, c *grpc.ClientConn) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{Service: allocatorv1.AllocatorService_ServiceDesc.ServiceName})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN
	}
	return resp.GetStatus()
}

func readyz(t *testing.T, s *servertest.Service) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.Server.HTTPAddr() + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func allocate(ctx context.Context, c allocatorv1.AllocatorServiceClient, name string) error {
	_, err := c.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: &allocatorv1.Owner{Kind: "Pod", Namespace: "ns", Name: name, Uid: name}})
	return err
}

// TestStartsBeforeEtcd: an allocator started while etcd cannot be reached
// serves its probes at once, NOT_SERVING and not ready, refuses calls with
// UNAVAILABLE (STORE_UNAVAILABLE) instead of letting them hang, says in
// its log that it waits for etcd, and serves by itself once etcd is up.
func TestStartsBeforeEtcd(t *testing.T) {
	e := kubetest.StartEtcd(t)
	// Stopped, its client port refuses connections until it starts again
	// on the same port.
	require.NoError(t, e.Stop())

	a := startAllocator(t, etcdArgs(e.Endpoint())...)
	c := conn(t, a)
	api := allocatorv1.NewAllocatorServiceClient(c)

	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, health(t, c))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := allocate(ctx, api, "early")
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Equal(t, "STORE_UNAVAILABLE", apierr.Reason(err))
	_, err = api.ListPools(ctx, &allocatorv1.ListPoolsRequest{})
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	// A stream is refused too, rather than waiting.
	w, err := api.WatchAllocations(ctx, &allocatorv1.WatchAllocationsRequest{Pool: "pools/p"})
	require.NoError(t, err)
	_, err = w.Recv()
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Equal(t, "STORE_UNAVAILABLE", apierr.Reason(err))

	require.Eventually(t, func() bool {
		code, body := readyz(t, a)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "[-]store failed: waiting for")
	}, 10*time.Second, 50*time.Millisecond, "/readyz says the store is awaited")
	require.Eventually(t, func() bool { return strings.Contains(a.Logs.String(), "waiting for etcd") },
		10*time.Second, 50*time.Millisecond, "the log says the allocator waits for etcd")
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, health(t, c), "still NOT_SERVING after readiness checks ran")

	require.NoError(t, e.Start(t.Context()))
	require.Eventually(t, func() bool { return health(t, c) == healthpb.HealthCheckResponse_SERVING },
		30*time.Second, 50*time.Millisecond, "SERVING once etcd is up, without a restart")
	require.Eventually(t, func() bool {
		code, _ := readyz(t, a)
		return code == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond)

	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = api.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "p", Pool: &allocatorv1.Pool{Cidrs: []string{"10.0.0.0/24"}}})
	require.NoError(t, err)
	require.NoError(t, allocate(ctx, api, "late"))
}

// TestStopWhileWaitingForEtcd: an allocator that waits for etcd stops
// promptly when asked to (SIGTERM in the process).
func TestStopWhileWaitingForEtcd(t *testing.T) {
	e := kubetest.StartEtcd(t)
	require.NoError(t, e.Stop())
	a := startAllocator(t, etcdArgs(e.Endpoint())...)
	require.Eventually(t, func() bool { return strings.Contains(a.Logs.String(), "waiting for etcd") },
		10*time.Second, 50*time.Millisecond)
	start := time.Now()
	a.Stop()
	require.Less(t, time.Since(start), 5*time.Second, "stopped promptly")
}

// TestUnreadableStoreStopsTheAllocator: a store that answers but cannot
// be loaded from (a damaged pool record) ends the allocator with an
// error, as a failed start did, instead of leaving it waiting.
func TestUnreadableStoreStopsTheAllocator(t *testing.T) {
	e := kubetest.StartEtcd(t)
	args := etcdArgs(e.Endpoint())
	prefix := strings.TrimPrefix(args[1], "--etcd-prefix=")
	put(t, e, prefix+"state/pools/p", `{"id":"p","cidrs":`)

	cfg := config.New(config.Allocator)
	spec := app.Spec()
	fs := pflag.NewFlagSet("allocator", pflag.ContinueOnError)
	cfg.AddFlags(fs)
	spec.AddFlags(fs)
	require.NoError(t, fs.Parse(append(args, "--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0")))
	logs := &servertest.Buffer{}
	srv, err := server.New(*cfg, config.Allocator.Name, server.WithLogger(slogTo(logs)), server.WithoutSignalHandling(), server.WithDrainDelay(0))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cleanup, err := spec.Setup(ctx, &server.Runtime{Config: cfg, Server: srv, Logger: slogTo(logs)})
	if err == nil {
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			require.FailNow(t, "the allocator kept running on a store it cannot load", logs.String())
		}
		cancel()
		cleanup()
	}
	require.ErrorContains(t, err, "start allocator")
}

func put(t *testing.T, e *kubetest.Etcd, key, value string) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints()})
	require.NoError(t, err)
	defer cli.Close()
	_, err = cli.Put(t.Context(), key, value)
	require.NoError(t, err)
}

func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
