package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plexusnet/plexus/internal/apierr"
)

// Reasons of the errors the runtime itself returns.
const (
	ReasonRateLimitExceeded     = "RATE_LIMIT_EXCEEDED"
	ReasonInflightLimitExceeded = "INFLIGHT_LIMIT_EXCEEDED"
	ReasonServerDraining        = "SERVER_DRAINING"
)

// openMethodPrefixes are the methods that need no credentials and bypass the
// limits: probes and schema discovery must work on a loaded, locked-down
// server.
var openMethodPrefixes = []string{
	"/grpc.health.v1.Health/",
	"/grpc.reflection.v1.ServerReflection/",
	"/grpc.reflection.v1alpha.ServerReflection/",
}

// IsOpenMethod reports whether fullMethod needs no credentials (health
// checks and reflection).
func IsOpenMethod(fullMethod string) bool {
	for _, p := range openMethodPrefixes {
		if strings.HasPrefix(fullMethod, p) {
			return true
		}
	}
	return false
}

func isHealthMethod(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/")
}

// slogAdapter feeds go-grpc-middleware's logging interceptor into slog, with
// the call's context so the trace handler adds its trace id.
func slogAdapter(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}

// limits holds the rate limiter and the in-flight counter shared by all
// calls.
type limits struct {
	rate        *rate.Limiter // nil: unlimited
	rateLimit   float64
	maxInflight int64 // 0: unlimited
	inflight    atomic.Int64
	rejected    *prometheus.CounterVec
}

func newLimits(perSecond float64, maxInflight int, rejected *prometheus.CounterVec) *limits {
	l := &limits{maxInflight: int64(maxInflight), rateLimit: perSecond, rejected: rejected}
	if perSecond > 0 {
		// A burst of one second's worth absorbs the clumping of clients that
		// start together, without letting the average exceed the limit.
		l.rate = rate.NewLimiter(rate.Limit(perSecond), int(math.Max(1, math.Ceil(perSecond))))
	}
	return l
}

func (l *limits) allowRate(method string) error {
	if l.rate == nil || l.rate.Allow() {
		return nil
	}
	l.rejected.WithLabelValues(ReasonRateLimitExceeded).Inc()
	return apierr.New(codes.ResourceExhausted, ReasonRateLimitExceeded,
		fmt.Sprintf("server accepts %g calls per second; retry later", l.rateLimit),
		map[string]string{"method": method, "limit": strconv.FormatFloat(l.rateLimit, 'g', -1, 64)})
}

// acquire takes an in-flight slot; release must be called when it returns nil.
func (l *limits) acquire(method string) error {
	if l.maxInflight == 0 {
		return nil
	}
	if l.inflight.Add(1) > l.maxInflight {
		l.inflight.Add(-1)
		l.rejected.WithLabelValues(ReasonInflightLimitExceeded).Inc()
		return apierr.New(codes.ResourceExhausted, ReasonInflightLimitExceeded,
			fmt.Sprintf("server is handling %d calls already; retry later", l.maxInflight),
			map[string]string{"method": method, "limit": strconv.FormatInt(l.maxInflight, 10)})
	}
	return nil
}

func (l *limits) release() {
	if l.maxInflight != 0 {
		l.inflight.Add(-1)
	}
}

func (l *limits) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if isHealthMethod(info.FullMethod) {
		return handler(ctx, req)
	}
	if err := l.allowRate(info.FullMethod); err != nil {
		return nil, err
	}
	if err := l.acquire(info.FullMethod); err != nil {
		return nil, err
	}
	defer l.release()
	return handler(ctx, req)
}

// stream applies only the rate limit: streams are long-lived watches that
// would pin in-flight slots; --max-concurrent-streams bounds them per
// connection instead.
func (l *limits) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if IsOpenMethod(info.FullMethod) {
		return handler(srv, ss)
	}
	if err := l.allowRate(info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// validator runs the registered validator of a request's type and then the
// request's own Validate method.
type validator struct {
	byType map[reflect.Type]func(any) error
	// decode holds the requests the codec could not decode.
	decode *decodeCodec
}

func (v validator) check(msg any) error {
	if err := v.decode.take(msg); err != nil {
		return err
	}
	if fn, ok := v.byType[reflect.TypeOf(msg)]; ok {
		if err := fn(msg); err != nil {
			return invalid(err)
		}
	}
	if m, ok := msg.(interface{ Validate() error }); ok {
		if err := m.Validate(); err != nil {
			return invalid(err)
		}
	}
	return nil
}

// invalid turns a validation error into INVALID_ARGUMENT, keeping a status
// the validator built itself.
func invalid(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	var vs apierr.Violations
	if errors.As(err, &vs) {
		return apierr.InvalidArgument(vs...)
	}
	return apierr.New(codes.InvalidArgument, apierr.ReasonInvalidRequest, err.Error(), nil)
}

func (v validator) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := v.check(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (v validator) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &validatingStream{ServerStream: ss, v: v})
}

type validatingStream struct {
	grpc.ServerStream
	v validator
}

func (s *validatingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.v.check(m)
}

// recoverPanic turns a handler panic into INTERNAL. The stack goes to the
// log, never to the client.
func recoverPanic(logger *slog.Logger, panics prometheus.Counter) func(ctx context.Context, p any) error {
	return func(ctx context.Context, p any) error {
		panics.Inc()
		method, _ := grpc.Method(ctx)
		logger.ErrorContext(ctx, "panic in handler", "grpc.method", method, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		return apierr.New(codes.Internal, apierr.ReasonInternal, "internal error", nil)
	}
}

func logPrincipalUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	principalLogField(ctx)
	return handler(ctx, req)
}

func logPrincipalStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	principalLogField(ss.Context())
	return handler(srv, ss)
}

// drainStreams ends open streams when the server starts draining:
// GracefulStop would otherwise wait for watches that never end on their own
// until the hard stop. The client gets UNAVAILABLE and reconnects, to
// another replica.
func drainStreams(draining context.Context) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, cancel := context.WithCancel(ss.Context())
		defer cancel()
		var drained atomic.Bool
		stop := context.AfterFunc(draining, func() {
			drained.Store(true)
			cancel()
		})
		defer stop()
		err := handler(srv, &ctxStream{ServerStream: ss, ctx: ctx})
		// Whatever the handler made of its context ending (a watch
		// returns nil), the client must learn that the stream did not
		// end by itself.
		if drained.Load() {
			return apierr.New(codes.Unavailable, ReasonServerDraining, "server is shutting down; reconnect", nil)
		}
		return err
	}
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }
