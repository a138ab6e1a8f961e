package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/plexusnet/plexus/internal/auth"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/internal/telemetry"
	"github.com/plexusnet/plexus/internal/testing/servertest"
)

// testService is the payload service of these tests. UnaryCall obeys its
// payload body:
//
//	"panic"        panics
//	"sleep:<dur>"  sleeps (ends early when the call is canceled)
//	"block"        waits for the release channel
//	"code:<NAME>"  fails with that gRPC code (FAILED_PRECONDITION, ...)
//
// and fills the caller's principal in when asked to.
type testService struct {
	testpb.UnimplementedTestServiceServer
	started chan string   // receives the body of every slow call as it starts
	release chan struct{} // ends "block" calls
}

func newTestService() *testService {
	return &testService{started: make(chan string, 16), release: make(chan struct{})}
}

func (s *testService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func (s *testService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	body := string(req.GetPayload().GetBody())
	switch {
	case body == "panic":
		panic("handler exploded")
	case strings.HasPrefix(body, "sleep:"):
		d, err := time.ParseDuration(strings.TrimPrefix(body, "sleep:"))
		if err != nil {
			return nil, err
		}
		s.started <- body
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	case strings.HasPrefix(body, "code:"):
		var c codes.Code
		if err := c.UnmarshalJSON([]byte(strconv.Quote(strings.TrimPrefix(body, "code:")))); err != nil {
			return nil, err
		}
		return nil, status.Error(c, "asked to fail")
	case body == "block":
		s.started <- body
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	resp := &testpb.SimpleResponse{}
	if req.GetFillUsername() {
		resp.Username, _ = auth.PrincipalFrom(ctx)
	}
	return resp, nil
}

// StreamingOutputCall sends one message every interval until the call ends:
// a stand-in for a watch.
func (s *testService) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	interval := 10 * time.Millisecond
	if ps := req.GetResponseParameters(); len(ps) > 0 && ps[0].GetIntervalUs() > 0 {
		interval = time.Duration(ps[0].GetIntervalUs()) * time.Microsecond
	}
	for {
		if err := stream.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-time.After(interval):
		}
	}
}

func body(s string) *testpb.SimpleRequest {
	return &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(s)}, FillUsername: true}
}

// testConfig is a configuration on free loopback ports.
func testConfig() config.Common {
	c := config.New(config.Allocator)
	c.GRPCAddr = "127.0.0.1:0"
	c.HTTPAddr = "127.0.0.1:0"
	c.DrainTimeout = 2 * time.Second
	return *c
}

func quietLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type running struct {
	srv  *server.Server
	svc  *testService
	stop func() error // cancels Run and returns its error
}

// start runs a server with the test service until the test ends.
func start(t *testing.T, cfg config.Common, opts ...server.Option) *running {
	t.Helper()
	return startWith(t, cfg, nil, opts...)
}

// startWith is start with a hook that runs between New and Run.
func startWith(t *testing.T, cfg config.Common, before func(*server.Server), opts ...server.Option) *running {
	t.Helper()
	opts = append([]server.Option{
		server.WithLogger(quietLogger()),
		server.WithoutSignalHandling(),
		server.WithDrainDelay(0),
		server.WithReadinessInterval(20 * time.Millisecond),
	}, opts...)
	s, err := server.New(cfg, "test", opts...)
	require.NoError(t, err)
	svc := newTestService()
	testpb.RegisterTestServiceServer(s.GRPC(), svc)
	if before != nil {
		before(s)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var stopped bool
	var runErr error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(cfg.DrainTimeout + 5*time.Second):
				runErr = errors.New("Run did not return")
			}
		}
		return runErr
	}
	t.Cleanup(func() { require.NoError(t, stop()) })
	return &running{srv: s, svc: svc, stop: stop}
}

func connect(t *testing.T, addr string, opts ...dial.Option) testpb.TestServiceClient {
	t.Helper()
	conn, err := dial.New(addr, append([]dial.Option{dial.WithoutRetry()}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return testpb.NewTestServiceClient(conn)
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func httpGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// metricValue finds the value of one sample line in a Prometheus text
// exposition, e.g. `plexus_grpc_panics_total`.
func metricValue(exposition, series string) (string, error) {
	for _, line := range strings.Split(exposition, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return strings.Fields(rest)[0], nil
		}
	}
	return "", fmt.Errorf("series %s not found", series)
}

// jsonLog returns a buffer and the option that makes a server log into it,
// as JSON lines, at level.
func jsonLog(t *testing.T, level string) (*servertest.Buffer, server.Option) {
	t.Helper()
	out := &servertest.Buffer{}
	logger, err := telemetry.NewLogger(out, level, "json")
	require.NoError(t, err)
	return out, server.WithLogger(logger)
}
