package server

import (
	"context"
	"errors"
	"log/slog"
	"path"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/plexusnet/plexus/internal/auth"
)

// The access log of unary calls. It writes the same line as
// go-grpc-middleware's logging interceptor (which streams still use), but
// costs nothing beyond one context value when the line's level is off: at
// thousands of calls a second the generic interceptor's field building was
// a twentieth of the allocator's CPU although every line was dropped.

// callLog is what inner interceptors add to the call's access log line.
type callLog struct{ principal string }

type callLogKey struct{}

// accessLogLevel is the level of a call's line: successful calls at debug,
// UNAVAILABLE and the answers about the state a call found at info, the
// rest as go-grpc-middleware's server default has them (a warning for
// limits, deadlines and denied callers, an error for internal faults).
func accessLogLevel(c codes.Code) slog.Level {
	switch c {
	case codes.OK, codes.Canceled:
		// A client that went away (Ctrl-C on a watch) is no problem of
		// the server's.
		return slog.LevelDebug
	case codes.Unavailable:
		// "Retry shortly": the server is starting (NOT_SYNCED), draining,
		// or waiting for its store. Each of those is reported once by
		// what knows about it (a readiness check, the store's own
		// errors); a warning per call would only repeat it.
		return slog.LevelInfo
	case codes.FailedPrecondition, codes.OutOfRange, codes.Aborted:
		// The answer to what the call found, like NOT_FOUND: an etag
		// that changed meanwhile (repair's guarded releases race
		// workloads by design), a pool not empty, a watch resuming from
		// a compacted revision, two writers at once. Nothing is wrong
		// with the server; a warning per call would be noise.
		return slog.LevelInfo
	}
	return slog.Level(logging.DefaultServerCodeToLevel(c))
}

func accessLogUnary(l *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if isHealthMethod(info.FullMethod) {
			return handler(ctx, req)
		}
		start := time.Now()
		cl := &callLog{}
		resp, err := handler(context.WithValue(ctx, callLogKey{}, cl), req)
		code := status.Code(err)
		lvl := accessLogLevel(code)
		if !l.Enabled(ctx, lvl) {
			return resp, err
		}
		service, method := path.Split(info.FullMethod)
		attrs := []any{
			"protocol", "grpc", "grpc.component", "server",
			"grpc.service", strings.Trim(service, "/"), "grpc.method", method, "grpc.method_type", "unary",
			"grpc.start_time", start.Format(time.RFC3339),
			"grpc.code", code.String(),
			"grpc.time_ms", float64(time.Since(start).Microseconds()) / 1000,
		}
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			attrs = append(attrs, "peer.address", p.Addr.String())
		}
		if cl.principal != "" {
			attrs = append(attrs, "principal", cl.principal)
		}
		if err != nil {
			attrs = append(attrs, "grpc.error", err.Error())
		}
		l.Log(ctx, lvl, "finished call", attrs...)
		return resp, err
	}
}

// principalLogField adds the authenticated principal to the access log line
// of the call.
func principalLogField(ctx context.Context) {
	p, ok := auth.PrincipalFrom(ctx)
	if !ok {
		return
	}
	if cl, ok := ctx.Value(callLogKey{}).(*callLog); ok {
		cl.principal = p
		return
	}
	logging.AddFields(ctx, logging.Fields{"principal", p})
}

// clientCanceled answers Canceled for a call that ended because its client
// went away: a handler that returns the context's error would otherwise be
// reported (and logged) as Unknown.
func clientCanceled(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || !errors.Is(err, context.Canceled) {
		return err
	}
	if _, ok := status.FromError(err); ok && status.Code(err) != codes.Unknown {
		return err
	}
	return status.Error(codes.Canceled, "the client canceled the call")
}

func canceledUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	return resp, clientCanceled(ctx, err)
}

func canceledStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return clientCanceled(ss.Context(), handler(srv, ss))
}
