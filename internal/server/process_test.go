package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/internal/telemetry"
)

// childEnv switches the test binary into one of the child programs below.
// It deliberately lacks the PLEXUS_ prefix so no flag ever reads it.
const childEnv = "SERVER_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "serve":
		os.Exit(childServe())
	default:
		fmt.Fprintln(os.Stderr, "unknown child", os.Getenv(childEnv))
		os.Exit(2)
	}
}

// childServe is a service process: it serves the test service with the
// real signal handling until SIGTERM, then prints the spans it recorded.
// It talks to its parent through stdout lines:
//
//	ADDR <grpc address>     once serving
//	STARTED <body>          when a slow call starts
//	SPANS <json>            after the drain
func childServe() int {
	out := &lineWriter{w: os.Stdout}
	rec := tracetest.NewSpanRecorder()
	shutdown, err := telemetry.Setup(context.Background(), "plexus-test-child",
		telemetry.WithSpanProcessor(rec), telemetry.WithLogger(childLogger))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg := testConfig()
	cfg.DrainTimeout = 3 * time.Second
	s, err := server.New(cfg, "child", server.WithLogger(childLogger), server.WithDrainDelay(200*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	svc := newTestService()
	testpb.RegisterTestServiceServer(s.GRPC(), svc)
	go func() {
		for b := range svc.started {
			out.println("STARTED " + b)
		}
	}()
	out.println("ADDR " + s.GRPCAddr())
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := shutdown(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	b, err := json.Marshal(exportSpans(rec))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out.println("SPANS " + string(b))
	return 0
}

// childLogger shows a child's warnings and errors in the parent's output.
var childLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// span is the part of a recorded span the parent checks.
type span struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	TraceID  string `json:"trace_id"`
	SpanID   string `json:"span_id"`
	ParentID string `json:"parent_id"`
	Remote   bool   `json:"parent_remote"`
	Service  string `json:"service"`
}

func exportSpans(rec *tracetest.SpanRecorder) []span {
	var out []span
	for _, s := range rec.Ended() {
		svc, _ := s.Resource().Set().Value(semconv.ServiceNameKey)
		out = append(out, span{
			Name:     s.Name(),
			Kind:     s.SpanKind().String(),
			TraceID:  s.SpanContext().TraceID().String(),
			SpanID:   s.SpanContext().SpanID().String(),
			ParentID: s.Parent().SpanID().String(),
			Remote:   s.Parent().IsRemote(),
			Service:  svc.AsString(),
		})
	}
	return out
}

// lineWriter serializes lines from several goroutines.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) println(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintln(l.w, s)
}

// child is a running child process as its parent sees it.
type child struct {
	cmd   *exec.Cmd
	lines chan string
	addr  string
	exit  chan error
}

func startChild(t *testing.T) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// A clean environment: no OTEL_* of the developer's shell leaks in.
	cmd.Env = []string{childEnv + "=serve", "PATH=" + os.Getenv("PATH")}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	c := &child{cmd: cmd, lines: make(chan string, 64), exit: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.exit <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	c.addr = strings.TrimPrefix(c.expect(t, "ADDR "), "ADDR ")
	return c
}

// expect waits for the next line starting with prefix.
func (c *child) expect(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-c.lines:
			require.True(t, ok, "child exited before printing %q", prefix)
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout:
			t.Fatalf("child did not print %q in time", prefix)
		}
	}
}

// TestSIGTERMDrains: a process that gets SIGTERM turns NOT_SERVING, refuses
// new calls, lets the call in flight finish, and exits 0 within the drain
// timeout.
func TestSIGTERMDrains(t *testing.T) {
	c := startChild(t)
	conn, err := dial.New(c.addr, dial.WithoutRetry())
	require.NoError(t, err)
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)

	watch, err := healthpb.NewHealthClient(conn).Watch(callCtx(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	first, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, first.GetStatus())

	inflight := make(chan error, 1)
	var inflightDone time.Time
	go func() {
		_, err := client.UnaryCall(callCtx(t), body("sleep:1500ms"))
		inflightDone = time.Now()
		inflight <- err
	}()
	c.expect(t, "STARTED sleep:1500ms")

	signalled := time.Now()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))

	next, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, next.GetStatus())

	// New calls are refused once the drain delay has passed.
	var refused time.Time
	for i := 0; i < 200 && refused.IsZero(); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := client.EmptyCall(ctx, &testpb.Empty{})
		cancel()
		switch status.Code(err) {
		case codes.Unavailable:
			refused = time.Now()
		case codes.OK, codes.DeadlineExceeded:
			time.Sleep(20 * time.Millisecond)
		default:
			t.Fatalf("unexpected error while draining: %v", err)
		}
	}
	require.False(t, refused.IsZero(), "new calls were never refused")

	require.NoError(t, <-inflight, "the call in flight completes")
	require.True(t, refused.Before(inflightDone), "new calls were refused while the old one still ran")

	select {
	case err := <-c.exit:
		require.NoError(t, err, "exit status 0")
	case <-time.After(5 * time.Second):
		t.Fatal("child did not exit")
	}
	require.Less(t, time.Since(signalled), 3*time.Second, "exit within --drain-timeout")
}

// TestTracePropagatesAcrossProcesses: a call from this process to a child
// process is one trace: the child's server span is the child of this
// process's client span, which is the child of the test's root span.
func TestTracePropagatesAcrossProcesses(t *testing.T) {
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_SAMPLER"} {
		t.Setenv(k, "")
	}
	rec := tracetest.NewSpanRecorder()
	shutdown, err := telemetry.Setup(context.Background(), "plexus-test-parent",
		telemetry.WithSpanProcessor(rec), telemetry.WithLogger(quietLogger()))
	require.NoError(t, err)
	defer shutdown(context.Background())

	c := startChild(t)
	conn, err := dial.New(c.addr, dial.WithoutRetry())
	require.NoError(t, err)
	defer conn.Close()

	ctx, root := otel.Tracer("test").Start(callCtx(t), "root")
	_, err = testpb.NewTestServiceClient(conn).UnaryCall(ctx, body("traced"))
	root.End()
	require.NoError(t, err)

	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	var childSpans []span
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(c.expect(t, "SPANS "), "SPANS ")), &childSpans))
	require.NoError(t, <-c.exit)

	var clientSpan trace.SpanContext
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindClient && s.Name() == "grpc.testing.TestService/UnaryCall" {
			require.Equal(t, root.SpanContext().SpanID(), s.Parent().SpanID(), "client span under the root span")
			clientSpan = s.SpanContext()
		}
	}
	require.True(t, clientSpan.IsValid(), "the parent recorded a client span")

	var serverSpans []span
	for _, s := range childSpans {
		if s.Kind == "server" && s.Name == "grpc.testing.TestService/UnaryCall" {
			serverSpans = append(serverSpans, s)
		}
	}
	require.Len(t, serverSpans, 1, "child spans: %+v", childSpans)
	got := serverSpans[0]
	require.Equal(t, root.SpanContext().TraceID().String(), got.TraceID, "one trace across the hop")
	require.Equal(t, clientSpan.SpanID().String(), got.ParentID, "server span is the child of the client span")
	require.True(t, got.Remote)
	require.Equal(t, "plexus-test-child", got.Service)
}
