package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/auth"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/internal/telemetry"
	"github.com/plexusnet/plexus/internal/testing/servertest"
)

const testPolicy = `{
  "name": "test",
  "allow_rules": [
    {"name": "repair-everything", "source": {"principals": ["repair"]},
     "request": {"paths": ["/grpc.testing.TestService/*"]}},
    {"name": "membership-pings", "source": {"principals": ["membership"]},
     "request": {"paths": ["/grpc.testing.TestService/EmptyCall"]}}
  ]
}`

func TestAuthentication(t *testing.T) {
	cfg := testConfig()
	cfg.AuthTokens = writeFile(t, "tokens", "repair-token,repair\nmembership-token,membership\n")
	cfg.AuthzPolicy = writeFile(t, "policy.json", testPolicy)
	r := start(t, cfg)
	addr := r.srv.GRPCAddr()

	tests := []struct {
		name   string
		token  string
		call   func(ctx context.Context, c testpb.TestServiceClient) (string, error)
		code   codes.Code
		reason string
		user   string
	}{
		{name: "no credentials", code: codes.Unauthenticated, reason: auth.ReasonAuthenticationRequired},
		{name: "unknown token", token: "guess", code: codes.Unauthenticated, reason: auth.ReasonInvalidToken},
		{name: "known but not allowed", token: "membership-token", code: codes.PermissionDenied, reason: auth.ReasonAccessDenied},
		{name: "allowed", token: "repair-token", code: codes.OK, user: "repair"},
		{name: "allowed other method", token: "membership-token", code: codes.OK,
			call: func(ctx context.Context, c testpb.TestServiceClient) (string, error) {
				_, err := c.EmptyCall(ctx, &testpb.Empty{})
				return "", err
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var opts []dial.Option
			if tc.token != "" {
				opts = append(opts, dial.WithBearerToken(tc.token))
			}
			c := connect(t, addr, opts...)
			call := tc.call
			if call == nil {
				call = func(ctx context.Context, c testpb.TestServiceClient) (string, error) {
					resp, err := c.UnaryCall(ctx, body("hi"))
					return resp.GetUsername(), err
				}
			}
			user, err := call(callCtx(t), c)
			require.Equal(t, tc.code, status.Code(err), "%v", err)
			require.Equal(t, tc.reason, apierr.Reason(err))
			require.Equal(t, tc.user, user)
		})
	}

	t.Run("health and reflection need no credentials", func(t *testing.T) {
		conn, err := dial.New(addr, dial.WithoutRetry())
		require.NoError(t, err)
		defer conn.Close()
		resp, err := healthpb.NewHealthClient(conn).Check(callCtx(t), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())

		require.Contains(t, listServices(t, conn), "grpc.testing.TestService")
	})
}

func listServices(t *testing.T, conn grpc.ClientConnInterface) []string {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(callCtx(t))
	require.NoError(t, err)
	require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	require.NoError(t, stream.CloseSend())
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names
}

func TestWithoutPolicyEveryoneIsAllowed(t *testing.T) {
	cfg := testConfig()
	cfg.AuthTokens = writeFile(t, "tokens", "repair-token,repair\n")
	r := start(t, cfg)

	resp, err := connect(t, r.srv.GRPCAddr()).UnaryCall(callCtx(t), body("hi"))
	require.NoError(t, err)
	require.Empty(t, resp.GetUsername())

	// A token still identifies its holder, and a wrong one is still wrong.
	resp, err = connect(t, r.srv.GRPCAddr(), dial.WithBearerToken("repair-token")).UnaryCall(callCtx(t), body("hi"))
	require.NoError(t, err)
	require.Equal(t, "repair", resp.GetUsername())
	_, err = connect(t, r.srv.GRPCAddr(), dial.WithBearerToken("nope")).UnaryCall(callCtx(t), body("hi"))
	require.Equal(t, codes.Unauthenticated, status.Code(err))
}

func TestOversizeMessage(t *testing.T) {
	cfg := testConfig()
	cfg.MaxRecvMsgSize = 1024
	r := start(t, cfg)
	c := connect(t, r.srv.GRPCAddr())

	_, err := c.UnaryCall(callCtx(t), body(strings.Repeat("x", 4096)))
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)

	_, err = c.UnaryCall(callCtx(t), body(strings.Repeat("x", 512)))
	require.NoError(t, err)
}

func TestRateLimit(t *testing.T) {
	cfg := testConfig()
	cfg.RateLimit = 1 // burst of one; the next token comes after a second
	r := start(t, cfg)
	c := connect(t, r.srv.GRPCAddr())

	_, err := c.EmptyCall(callCtx(t), &testpb.Empty{})
	require.NoError(t, err)
	_, err = c.EmptyCall(callCtx(t), &testpb.Empty{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.Equal(t, server.ReasonRateLimitExceeded, apierr.Reason(err))
	require.Equal(t, "1", apierr.Metadata(err)["limit"])

	// Probes are never rate limited.
	conn, err := dial.New(r.srv.GRPCAddr(), dial.WithoutRetry())
	require.NoError(t, err)
	defer conn.Close()
	for range 3 {
		_, err := healthpb.NewHealthClient(conn).Check(callCtx(t), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
	}

	_, metrics := httpGet(t, r.srv.HTTPAddr(), "/metrics")
	v, err := metricValue(metrics, `plexus_grpc_rejected_total{reason="RATE_LIMIT_EXCEEDED"}`)
	require.NoError(t, err)
	require.Equal(t, "1", v)
}

func TestInflightLimit(t *testing.T) {
	cfg := testConfig()
	cfg.MaxInflight = 1
	r := start(t, cfg)
	c := connect(t, r.srv.GRPCAddr())

	blocked := make(chan error, 1)
	go func() {
		_, err := c.UnaryCall(callCtx(t), body("block"))
		blocked <- err
	}()
	<-r.svc.started

	_, err := c.EmptyCall(callCtx(t), &testpb.Empty{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.Equal(t, server.ReasonInflightLimitExceeded, apierr.Reason(err))

	close(r.svc.release)
	require.NoError(t, <-blocked)
	_, err = c.EmptyCall(callCtx(t), &testpb.Empty{})
	require.NoError(t, err, "the slot must be released when the call ends")
}

func TestPanicBecomesInternal(t *testing.T) {
	r := start(t, testConfig())
	c := connect(t, r.srv.GRPCAddr())

	_, err := c.UnaryCall(callCtx(t), body("panic"))
	require.Equal(t, codes.Internal, status.Code(err))
	require.Equal(t, apierr.ReasonInternal, apierr.Reason(err))
	require.NotContains(t, err.Error(), "exploded", "panic values stay in the server log")

	resp, err := c.UnaryCall(callCtx(t), body("after"))
	require.NoError(t, err, "the server keeps serving after a panic")
	require.NotNil(t, resp)

	_, metrics := httpGet(t, r.srv.HTTPAddr(), "/metrics")
	v, err := metricValue(metrics, "plexus_grpc_panics_total")
	require.NoError(t, err)
	require.Equal(t, "1", v)
	v, err = metricValue(metrics, `grpc_server_handled_total{grpc_code="Internal",grpc_method="UnaryCall",grpc_service="grpc.testing.TestService",grpc_type="unary"}`)
	require.NoError(t, err)
	require.Equal(t, "1", v)
}

// validatedEmpty is a request type with its own Validate method, served by
// a hand-registered service.
type validatedEmpty struct{ *emptypb.Empty }

func (validatedEmpty) Validate() error {
	return apierr.Violations{{Field: "everything", Description: "is wrong"}}
}

var validatedDesc = grpc.ServiceDesc{
	ServiceName: "plexus.test.Validated",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Check",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := &validatedEmpty{Empty: &emptypb.Empty{}}
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(context.Context, any) (any, error) { return &emptypb.Empty{}, nil }
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/plexus.test.Validated/Check"}, h)
		},
	}},
}

func TestValidation(t *testing.T) {
	r := start(t, testConfig(), server.ValidateWith(func(req *testpb.SimpleRequest) error {
		switch {
		case req.GetResponseSize() < 0:
			return apierr.Violations{{Field: "response_size", Description: "must not be negative"}}
		case req.GetResponseSize() > 1000:
			return errors.New("response too large")
		}
		return nil
	}), server.ValidateWith(func(req *testpb.StreamingOutputCallRequest) error {
		if len(req.GetResponseParameters()) > 1 {
			return apierr.Violations{{Field: "response_parameters", Description: "at most one"}}
		}
		return nil
	}))
	c := connect(t, r.srv.GRPCAddr())

	// Streams validate every message they receive.
	stream, err := c.StreamingOutputCall(callCtx(t), &testpb.StreamingOutputCallRequest{
		ResponseParameters: []*testpb.ResponseParameters{{}, {}},
	})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Equal(t, []apierr.FieldViolation{{Field: "response_parameters", Description: "at most one"}}, apierr.FieldViolations(err))

	_, err = c.UnaryCall(callCtx(t), &testpb.SimpleRequest{ResponseSize: -1})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Equal(t, apierr.ReasonInvalidRequest, apierr.Reason(err))
	require.Equal(t, []apierr.FieldViolation{{Field: "response_size", Description: "must not be negative"}}, apierr.FieldViolations(err))

	_, err = c.UnaryCall(callCtx(t), &testpb.SimpleRequest{ResponseSize: 5000})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "response too large")

	_, err = c.UnaryCall(callCtx(t), &testpb.SimpleRequest{ResponseSize: 10})
	require.NoError(t, err)
}

func TestValidateMethodOfRequest(t *testing.T) {
	cfg := testConfig()
	s, err := server.New(cfg, "test", server.WithLogger(quietLogger()), server.WithoutSignalHandling(), server.WithDrainDelay(0))
	require.NoError(t, err)
	s.GRPC().RegisterService(&validatedDesc, struct{}{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	conn, err := dial.New(s.GRPCAddr(), dial.WithoutRetry())
	require.NoError(t, err)
	defer conn.Close()
	err = conn.Invoke(callCtx(t), "/plexus.test.Validated/Check", &emptypb.Empty{}, &emptypb.Empty{})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Equal(t, []apierr.FieldViolation{{Field: "everything", Description: "is wrong"}}, apierr.FieldViolations(err))
}

func TestHealthReadinessAndMetrics(t *testing.T) {
	cfg := testConfig()
	var allocatorUp atomic.Bool
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "plexus_test_things_total", Help: "things"})
	logs := &servertest.Buffer{}
	r := startWith(t, cfg, func(s *server.Server) {
		s.SetServing("grpc.testing.TestService", false) // warming up
		s.AddReadinessCheck("allocator", func(context.Context) error {
			if !allocatorUp.Load() {
				return errors.New("not reachable yet")
			}
			return nil
		})
		s.Registry().MustRegister(counter)
	}, server.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	counter.Add(3)

	conn, err := dial.New(r.srv.GRPCAddr(), dial.WithoutRetry())
	require.NoError(t, err)
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	statusOf := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		resp, err := health.Check(callCtx(t), &healthpb.HealthCheckRequest{Service: svc})
		require.NoError(t, err)
		return resp.GetStatus()
	}
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, statusOf(""))
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, statusOf("grpc.testing.TestService"))
	r.srv.SetServing("grpc.testing.TestService", true) // informers synced
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, statusOf("grpc.testing.TestService"))

	code, live := httpGet(t, r.srv.HTTPAddr(), "/livez")
	require.Equal(t, 200, code)
	require.Equal(t, "ok\n", live)

	require.Eventually(t, func() bool {
		code, body := httpGet(t, r.srv.HTTPAddr(), "/readyz")
		return code == 503 && strings.Contains(body, "[-]allocator failed: not reachable yet")
	}, 3*time.Second, 20*time.Millisecond)
	allocatorUp.Store(true)
	require.Eventually(t, func() bool {
		code, body := httpGet(t, r.srv.HTTPAddr(), "/readyz")
		return code == 200 && strings.Contains(body, "[+]allocator ok")
	}, 3*time.Second, 20*time.Millisecond)
	// Not ready while starting is no fault: logged at INFO. A check that
	// passed and then fails is: WARN.
	require.Contains(t, logs.String(), `level=INFO msg="readiness check not passing yet" service=test check=allocator error="not reachable yet"`)
	require.NotContains(t, logs.String(), "level=WARN msg=\"readiness check")
	allocatorUp.Store(false)
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), `level=WARN msg="readiness check failing" service=test check=allocator error="not reachable yet"`)
	}, 3*time.Second, 20*time.Millisecond)
	allocatorUp.Store(true)
	require.Eventually(t, func() bool {
		code, _ := httpGet(t, r.srv.HTTPAddr(), "/readyz")
		return code == 200
	}, 3*time.Second, 20*time.Millisecond)

	_, err = testpb.NewTestServiceClient(conn).EmptyCall(callCtx(t), &testpb.Empty{})
	require.NoError(t, err)
	_, metrics := httpGet(t, r.srv.HTTPAddr(), "/metrics")
	for _, series := range []string{
		`grpc_server_handled_total{grpc_code="OK",grpc_method="EmptyCall",grpc_service="grpc.testing.TestService",grpc_type="unary"}`,
		`grpc_server_handling_seconds_count{grpc_method="EmptyCall",grpc_service="grpc.testing.TestService",grpc_type="unary"}`,
		`plexus_readiness_check_ok{check="allocator"}`,
		"plexus_test_things_total",
		"go_goroutines",
		"process_cpu_seconds_total",
	} {
		v, err := metricValue(metrics, series)
		require.NoError(t, err, series)
		switch series {
		case "plexus_test_things_total":
			require.Equal(t, "3", v)
		case `plexus_readiness_check_ok{check="allocator"}`:
			require.Equal(t, "1", v)
		}
	}
	// Methods never called are reported from the start, at zero.
	_, err = metricValue(metrics, `grpc_server_started_total{grpc_method="FullDuplexCall",grpc_service="grpc.testing.TestService",grpc_type="bidi_stream"}`)
	require.NoError(t, err)
}

// TestDrainInProcess checks the parts of the drain a signal test cannot see
// easily: open streams are ended with UNAVAILABLE, and a call that outlives
// --drain-timeout is cut off so Run returns in time.
func TestDrainInProcess(t *testing.T) {
	cfg := testConfig()
	cfg.DrainTimeout = 400 * time.Millisecond
	r := start(t, cfg)
	c := connect(t, r.srv.GRPCAddr())

	stream, err := c.StreamingOutputCall(callCtx(t), &testpb.StreamingOutputCallRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)

	slow := make(chan error, 1)
	go func() {
		_, err := c.UnaryCall(callCtx(t), body("sleep:10s"))
		slow <- err
	}()
	<-r.svc.started

	began := time.Now()
	require.NoError(t, r.stop())
	took := time.Since(began)
	require.Less(t, took, cfg.DrainTimeout+time.Second)
	require.GreaterOrEqual(t, took, cfg.DrainTimeout, "the slow call holds the drain until the deadline")

	for {
		_, err = stream.Recv()
		if err != nil {
			break
		}
	}
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Equal(t, server.ReasonServerDraining, apierr.Reason(err))
	require.Equal(t, codes.Unavailable, status.Code(<-slow))
}

// TestDrainEndsStreamsThatReturnNil: a stream handler that returns nil
// when its context ends (as membership's watch does) still ends with
// UNAVAILABLE on a drain, not with a clean end of stream.
func TestDrainEndsStreamsThatReturnNil(t *testing.T) {
	cfg := testConfig()
	cfg.DrainTimeout = time.Second
	returnsNil := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		_ = handler(srv, ss) // sends until its context ends
		return nil
	}
	r := start(t, cfg, server.WithStreamInterceptors(returnsNil))
	c := connect(t, r.srv.GRPCAddr())
	stream, err := c.StreamingOutputCall(callCtx(t), &testpb.StreamingOutputCallRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	require.NoError(t, r.stop())
	for err == nil {
		_, err = stream.Recv()
	}
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Equal(t, server.ReasonServerDraining, apierr.Reason(err))
}

func TestNewRejectsBadConfig(t *testing.T) {
	cfg := testConfig()
	cfg.LogFormat = "yaml"
	_, err := server.New(cfg, "test")
	require.ErrorContains(t, err, "--log-format")

	cfg = testConfig()
	cfg.AuthzPolicy = writeFile(t, "policy.json", `{"name": "p"}`)
	_, err = server.New(cfg, "test", server.WithLogger(quietLogger()))
	require.ErrorContains(t, err, "allow_rules")

	cfg = testConfig()
	blocker := start(t, testConfig())
	cfg.GRPCAddr = blocker.srv.GRPCAddr()
	_, err = server.New(cfg, "test", server.WithLogger(quietLogger()))
	require.ErrorContains(t, err, "--grpc-addr")
}

func TestIsOpenMethod(t *testing.T) {
	for method, open := range map[string]bool{
		"/grpc.health.v1.Health/Check":                                   true,
		"/grpc.health.v1.Health/Watch":                                   true,
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      true,
		"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": true,
		"/plexus.allocator.v1.AllocatorService/Allocate":                 false,
		"/grpc.health.v1.HealthX/Check":                                  false,
	} {
		require.Equal(t, open, server.IsOpenMethod(method), method)
	}
}

// jsonLines returns the JSON log lines of out.
func jsonLines(out *servertest.Buffer) []map[string]any {
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			lines = append(lines, m)
		}
	}
	return lines
}

func TestAccessLogCarriesTraceID(t *testing.T) {
	// Successful calls are logged at debug.
	out, withLog := jsonLog(t, "debug")
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	r := start(t, testConfig(), withLog, server.WithTracerProvider(tp))

	_, err := connect(t, r.srv.GRPCAddr(), dial.WithBearerToken("ignored-without-tokens-file")).EmptyCall(callCtx(t), &testpb.Empty{})
	require.NoError(t, err)

	var traceID string
	require.Eventually(t, func() bool {
		for _, s := range rec.Ended() {
			if s.SpanKind() == oteltrace.SpanKindServer && s.Name() == "grpc.testing.TestService/EmptyCall" {
				traceID = s.SpanContext().TraceID().String()
				return true
			}
		}
		return false
	}, 3*time.Second, 10*time.Millisecond)

	var access map[string]any
	for _, l := range jsonLines(out) {
		if l["msg"] == "finished call" && l["grpc.method"] == "EmptyCall" {
			access = l
		}
	}
	require.NotNil(t, access, "an access log line")
	require.Equal(t, traceID, access[telemetry.TraceIDKey])
	require.Equal(t, "OK", access["grpc.code"])
	require.Equal(t, "test", access["service"])
}

func TestPprofOnlyWhenAsked(t *testing.T) {
	off := start(t, testConfig())
	code, _ := httpGet(t, off.srv.HTTPAddr(), "/debug/pprof/")
	require.Equal(t, 404, code, "profiles are not served by default")

	cfg := testConfig()
	cfg.Pprof = true
	on := start(t, cfg)
	code, body := httpGet(t, on.srv.HTTPAddr(), "/debug/pprof/")
	require.Equal(t, 200, code)
	require.Contains(t, body, "goroutine")
	code, body = httpGet(t, on.srv.HTTPAddr(), "/debug/pprof/goroutine?debug=1")
	require.Equal(t, 200, code)
	require.Contains(t, body, "goroutine profile")
}

func TestAccessLogLevelsAndPrincipal(t *testing.T) {
	out, withLog := jsonLog(t, "info")
	cfg := testConfig()
	cfg.AuthTokens = writeFile(t, "tokens", "repair-token,repair\n")
	r := start(t, cfg, withLog)

	client := connect(t, r.srv.GRPCAddr(), dial.WithBearerToken("repair-token"))
	_, err := client.EmptyCall(callCtx(t), &testpb.Empty{})
	require.NoError(t, err)
	// A body the handler cannot parse fails the call (code Unknown).
	_, err = client.UnaryCall(callCtx(t), &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("sleep:boom")}})
	require.Error(t, err)

	var lines []map[string]any
	for _, l := range jsonLines(out) {
		if l["msg"] == "finished call" {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 1, "at info, only the failed call is logged")
	l := lines[0]
	require.Equal(t, "UnaryCall", l["grpc.method"])
	require.Equal(t, "grpc.testing.TestService", l["grpc.service"])
	require.Equal(t, "Unknown", l["grpc.code"])
	require.Equal(t, "ERROR", l["level"])
	require.Equal(t, "repair", l["principal"])
	require.Contains(t, l["grpc.error"], `invalid duration "boom"`)
	require.Contains(t, l, "grpc.time_ms")
	require.Contains(t, l, "peer.address")
}

// TestAnswersAboutStateAreNoWarning: a call refused for the state it found
// (FAILED_PRECONDITION, OUT_OF_RANGE, ABORTED: an etag that changed, a
// compacted revision, a concurrent change) is logged at info; limits,
// deadlines and denied callers stay warnings, internal faults errors.
func TestAnswersAboutStateAreNoWarning(t *testing.T) {
	out, withLog := jsonLog(t, "info")
	r := start(t, testConfig(), withLog)
	client := connect(t, r.srv.GRPCAddr())
	want := map[string]string{
		"FAILED_PRECONDITION": "INFO",
		"OUT_OF_RANGE":        "INFO",
		"ABORTED":             "INFO",
		"NOT_FOUND":           "INFO",
		"RESOURCE_EXHAUSTED":  "WARN",
		"PERMISSION_DENIED":   "WARN",
		"DEADLINE_EXCEEDED":   "WARN",
		"INTERNAL":            "ERROR",
	}
	for name := range want {
		_, err := client.UnaryCall(callCtx(t), &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("code:" + name)}})
		require.Error(t, err)
	}
	got := map[string]string{}
	for _, l := range jsonLines(out) {
		if l["msg"] == "finished call" && l["grpc.method"] == "UnaryCall" {
			got[strings.ToUpper(camelToSnake(l["grpc.code"].(string)))] = l["level"].(string)
		}
	}
	require.Equal(t, want, got)
}

// camelToSnake turns a code's String ("FailedPrecondition") into its
// JSON name's spelling ("failed_precondition").
func camelToSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToLower(b.String())
}

// TestClientCancellationIsNoError: a watch the client cancels (Ctrl-C on
// `alloc watch`) ends with code Canceled, logged at debug; before, the
// handler's context error was logged as ERROR with code Unknown.
func TestClientCancellationIsNoError(t *testing.T) {
	out, withLog := jsonLog(t, "debug")
	r := start(t, testConfig(), withLog)
	client := connect(t, r.srv.GRPCAddr())

	ctx, cancel := context.WithCancel(callCtx(t))
	stream, err := client.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	cancel()

	require.Eventually(t, func() bool {
		for _, l := range jsonLines(out) {
			if l["msg"] == "finished streaming call" || (l["msg"] == "finished call" && l["grpc.method"] == "StreamingOutputCall") {
				return l["grpc.code"] == "Canceled" && l["level"] == "DEBUG"
			}
		}
		return false
	}, 5*time.Second, 20*time.Millisecond, "no debug line with code Canceled: %s", out.String())
}

// TestUnavailableIsNoWarning: a call the server ends with UNAVAILABLE
// ("retry shortly": draining here, or not synced yet) is logged at info,
// not as a warning per call.
func TestUnavailableIsNoWarning(t *testing.T) {
	out, withLog := jsonLog(t, "info")
	r := start(t, testConfig(), withLog)
	client := connect(t, r.srv.GRPCAddr())
	stream, err := client.StreamingOutputCall(callCtx(t), &testpb.StreamingOutputCallRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	require.NoError(t, r.stop())
	_, err = stream.Recv()
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)

	var found bool
	for _, l := range jsonLines(out) {
		if l["msg"] == "finished streaming call" || (l["msg"] == "finished call" && l["grpc.method"] == "StreamingOutputCall") {
			found = true
			require.Equal(t, "Unavailable", l["grpc.code"])
			require.Equal(t, "INFO", l["level"])
		}
	}
	require.True(t, found, "the stream's access log line: %s", out.String())
}

// A check that fails at start-up is run again soon, not after the
// interval: a process whose caches sync a moment after its first check
// says it is ready within a second, with an interval of a minute.
func TestReadinessAtStartUpDoesNotWaitAnInterval(t *testing.T) {
	var synced, runs atomic.Int64
	r := startWith(t, testConfig(), func(s *server.Server) {
		s.AddReadinessCheck("informers", func(context.Context) error {
			runs.Add(1)
			if synced.Load() == 0 {
				return errors.New("not synced yet")
			}
			return nil
		})
	}, server.WithReadinessInterval(time.Minute))
	require.Eventually(t, func() bool { return runs.Load() >= 1 }, 3*time.Second, 5*time.Millisecond)
	synced.Store(1)
	start := time.Now()
	require.Eventually(t, func() bool {
		code, _ := httpGet(t, r.srv.HTTPAddr(), "/readyz")
		return code == 200
	}, 3*time.Second, 5*time.Millisecond, "ready within the start-up retry, not after the interval")
	require.Less(t, time.Since(start), 2*time.Second)
}
