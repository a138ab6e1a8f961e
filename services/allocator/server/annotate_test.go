package server

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestAnnotateOnlyRecordingSpans: a call's span attributes are built only
// when its span records them; a call whose trace is not sampled builds
// none.
func TestAnnotateOnlyRecordingSpans(t *testing.T) {
	built := 0
	attrs := func() []attribute.KeyValue {
		built++
		return []attribute.KeyValue{attribute.String("plexus.pool", "p")}
	}
	annotate(context.Background(), attrs)
	require.Zero(t, built, "no span")

	unsampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	ctx, span := unsampled.Tracer("test").Start(context.Background(), "call")
	annotate(ctx, attrs)
	span.End()
	require.Zero(t, built, "a span that does not record")

	rec := tracetest.NewSpanRecorder()
	sampled := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, span = sampled.Tracer("test").Start(context.Background(), "call")
	annotate(ctx, attrs)
	span.End()
	require.Equal(t, 1, built)
	require.Len(t, rec.Ended(), 1)
	require.Contains(t, rec.Ended()[0].Attributes(), attribute.String("plexus.pool", "p"))
}
