package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/dial"
	rt "github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/services/allocator/allocation"
	allocserver "github.com/plexusnet/plexus/services/allocator/server"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/bolt"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
)

// env is an allocator served by the shared runtime on loopback, with a
// memory store, and a client dialled through package dial: the same path a
// request takes in production, minus the disk.
type env struct {
	conn     *grpc.ClientConn
	client   allocatorv1.AllocatorServiceClient
	store    *bolt.Store
	httpAddr string
}

type envOptions struct {
	// fixedWindow turns off gRPC's dynamic flow-control window on the
	// client: a client that does not read then holds 64 KiB, not up to
	// 16 MiB.
	fixedWindow bool
	history     int
	revision    func(context.Context) (int64, error)
	wrap        func(store.Store) store.Store
	server      []allocserver.Option
	tokens      map[string]string
}

// withTokens authenticates bearer tokens (token → principal); asToken
// makes a call with one.
func withTokens(tokens map[string]string) envOption {
	return func(o *envOptions) { o.tokens = tokens }
}

// asToken is ctx with token as the call's bearer token.
func asToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// withStore wraps the store the service uses (to count its calls, say).
func withStore(wrap func(store.Store) store.Store) envOption {
	return func(o *envOptions) { o.wrap = wrap }
}

// withServer passes options to the gRPC server.
func withServer(opts ...allocserver.Option) envOption {
	return func(o *envOptions) { o.server = append(o.server, opts...) }
}

type envOption func(*envOptions)

// withHistory keeps only n events for watches, so a test can make a
// revision too old.
func withHistory(n int) envOption { return func(o *envOptions) { o.history = n } }

// withFixedWindow dials the client with a fixed 64 KiB flow-control window.
func withFixedWindow() envOption { return func(o *envOptions) { o.fixedWindow = true } }

// withSharedStore serves as a replica that shares its store with others:
// the service follows the store, and revision stands for the store's
// answer to "what is the latest commit of any replica".
func withSharedStore(revision func(context.Context) (int64, error)) envOption {
	return func(o *envOptions) { o.revision = revision }
}

// sharedStore is a memory store that tells a revision, as the etcd store
// does.
type sharedStore struct {
	*bolt.Store
	revision func(context.Context) (int64, error)
}

func (s sharedStore) Revision(ctx context.Context) (int64, error) { return s.revision(ctx) }

func quietLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// start serves an allocator until the test ends.
func start(t *testing.T, opts ...envOption) *env {
	t.Helper()
	var o envOptions
	for _, opt := range opts {
		opt(&o)
	}
	cfg := config.New(config.Allocator)
	cfg.GRPCAddr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.DrainTimeout = 2 * time.Second
	if o.tokens != nil {
		var lines []string
		for token, principal := range o.tokens {
			lines = append(lines, token+","+principal)
		}
		cfg.AuthTokens = filepath.Join(t.TempDir(), "tokens")
		require.NoError(t, os.WriteFile(cfg.AuthTokens, []byte(strings.Join(lines, "\n")), 0o600))
	}

	logger := quietLogger()
	srv, err := rt.New(*cfg, "allocator", rt.WithLogger(logger), rt.WithoutSignalHandling(), rt.WithDrainDelay(0))
	require.NoError(t, err)

	st := memory.New(bolt.WithHistory(o.history))
	var backing store.Store = st
	svcOpts := []allocation.Option{allocation.WithLogger(logger)}
	if o.revision != nil {
		backing = sharedStore{Store: st, revision: o.revision}
		svcOpts = append(svcOpts, allocation.WithFollow())
	}
	if o.wrap != nil {
		backing = o.wrap(backing)
	}
	followCtx, stopFollowing := context.WithCancel(context.Background())
	t.Cleanup(stopFollowing)
	svc, err := allocation.New(followCtx, allocation.Traced(backing), svcOpts...)
	require.NoError(t, err)
	allocserver.New(svc, allocserver.NewMetrics(srv.Registry(), svc), o.server...).Register(srv.GRPC())

	t.Cleanup(func() { require.NoError(t, st.Close()) }) // after the server has stopped
	servertest.Serve(t, srv)

	dialOpts := []dial.Option{dial.WithoutRetry()}
	if o.fixedWindow {
		dialOpts = append(dialOpts, dial.WithDialOptions(grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16)))
	}
	conn, err := dial.New(srv.GRPCAddr(), dialOpts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &env{conn: conn, client: allocatorv1.NewAllocatorServiceClient(conn), store: st, httpAddr: srv.HTTPAddr()}
}

// ctx is a call context bounded so that a hung call fails the test
// instead of hanging it.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func (e *env) createPool(t *testing.T, id string, p *allocatorv1.Pool) *allocatorv1.Pool {
	t.Helper()
	resp, err := e.client.CreatePool(ctx(t), &allocatorv1.CreatePoolRequest{PoolId: id, Pool: p})
	require.NoError(t, err)
	return resp.GetPool()
}

func (e *env) allocate(t *testing.T, pool string, o *allocatorv1.Owner) *allocatorv1.Allocation {
	t.Helper()
	resp, err := e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/" + pool, Owner: o})
	require.NoError(t, err)
	return resp.GetAllocation()
}

func pod(ns, name string) *allocatorv1.Owner {
	return &allocatorv1.Owner{Cluster: "east", Kind: "Pod", Namespace: ns, Name: name, Uid: "uid-" + ns + "-" + name}
}

// requireStatus checks the code, the ErrorInfo reason and, when field is
// not empty, that a BadRequest violation names that field.
func requireStatus(t *testing.T, err error, code codes.Code, reason, field string) {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "not a status: %v", err)
	require.Equal(t, code, st.Code(), "code of %v", err)
	require.Equal(t, reason, apierr.Reason(err), "reason of %v", err)
	require.Equal(t, apierr.Domain, apierr.Info(err).GetDomain())
	if field != "" {
		var fields []string
		for _, v := range apierr.FieldViolations(err) {
			fields = append(fields, v.Field)
			require.NotEmpty(t, v.Description, "violation of %s without a description", v.Field)
		}
		require.Contains(t, fields, field, "field violations of %v", err)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return string(b)
}

// recvUntil reads events from a watch stream until n have arrived or the
// deadline of the stream's context passes.
func recvUntil(t *testing.T, stream interface {
	Recv() (*allocatorv1.WatchAllocationsResponse, error)
}, n int) []*allocatorv1.WatchAllocationsResponse {
	t.Helper()
	var out []*allocatorv1.WatchAllocationsResponse
	for len(out) < n {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "after %d of %d events", len(out), n)
		out = append(out, ev)
	}
	require.Len(t, out, n)
	return out
}
