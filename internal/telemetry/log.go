package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/plexusnet/plexus/internal/config"
)

// Log attribute keys that carry the span of the record's context.
const (
	TraceIDKey = "trace_id"
	SpanIDKey  = "span_id"
)

// NewLogger returns a logger writing to w at level (debug, info, warn,
// error) in format (text or json). Records logged with a context that holds
// a span carry its trace_id and span_id.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	lvl, err := config.ParseLogLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("unknown log format %q (want text or json)", format)
	}
	return slog.New(NewTraceHandler(h)), nil
}

// NewTraceHandler wraps h so that every record whose context holds a valid
// span gets trace_id and span_id attributes, which lets a log line be found
// from a trace and the other way round.
func NewTraceHandler(h slog.Handler) slog.Handler {
	return traceHandler{next: h}
}

type traceHandler struct{ next slog.Handler }

func (h traceHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		// Clone: the caller's record must not see our attributes through a
		// shared backing array.
		r = r.Clone()
		r.AddAttrs(slog.String(TraceIDKey, sc.TraceID().String()), slog.String(SpanIDKey, sc.SpanID().String()))
	}
	return h.next.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{next: h.next.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{next: h.next.WithGroup(name)}
}
