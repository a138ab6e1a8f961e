package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/plexusnet/plexus/internal/telemetry"
)

func TestLoggerAddsTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	logger, err := telemetry.NewLogger(&buf, "debug", "json")
	require.NoError(t, err)

	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(context.Background(), "op")
	defer span.End()

	logger.With("component", "x").WithGroup("g").InfoContext(ctx, "with span", "k", "v")
	logger.InfoContext(context.Background(), "without span")

	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	require.Len(t, lines, 2)

	var with map[string]any
	require.NoError(t, json.Unmarshal(lines[0], &with))
	// WithGroup qualifies every attribute added after it, ours included.
	group := with["g"].(map[string]any)
	require.Equal(t, span.SpanContext().TraceID().String(), group[telemetry.TraceIDKey])
	require.Equal(t, span.SpanContext().SpanID().String(), group[telemetry.SpanIDKey])
	require.Equal(t, "x", with["component"])

	var without map[string]any
	require.NoError(t, json.Unmarshal(lines[1], &without))
	require.NotContains(t, without, telemetry.TraceIDKey)
}

func TestLoggerLevelAndFormat(t *testing.T) {
	var buf bytes.Buffer
	logger, err := telemetry.NewLogger(&buf, "warn", "text")
	require.NoError(t, err)
	logger.Info("hidden")
	logger.Warn("shown")
	require.NotContains(t, buf.String(), "hidden")
	require.Contains(t, buf.String(), "msg=shown")

	_, err = telemetry.NewLogger(&buf, "info", "xml")
	require.ErrorContains(t, err, "xml")
	_, err = telemetry.NewLogger(&buf, "loud", "json")
	require.ErrorContains(t, err, "loud")
}

// clearOTEL unsets the variables a developer's shell may carry.
func clearOTEL(t *testing.T) {
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_SERVICE_NAME",
		"OTEL_SDK_DISABLED", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER"} {
		t.Setenv(k, "")
	}
}

func setup(t *testing.T, opts ...telemetry.Option) (map[string]any, error) {
	t.Helper()
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	shutdown, err := telemetry.Setup(context.Background(), "plexus-test", append(opts, telemetry.WithLogger(logger))...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { require.NoError(t, shutdown(context.Background())) })
	var line map[string]any
	require.NoError(t, json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &line))
	return line, nil
}

func TestSetupWithoutEnvExportsNothingButTraces(t *testing.T) {
	clearOTEL(t)
	rec := tracetest.NewSpanRecorder()
	line, err := setup(t, telemetry.WithSpanProcessor(rec))
	require.NoError(t, err)
	require.Equal(t, "none", line["traces"])
	require.Equal(t, "none", line["metrics"])

	_, span := otel.Tracer("t").Start(context.Background(), "op")
	span.End()
	spans := rec.Ended()
	require.Len(t, spans, 1)
	require.True(t, spans[0].SpanContext().IsValid())
	name, ok := spans[0].Resource().Set().Value(semconv.ServiceNameKey)
	require.True(t, ok)
	require.Equal(t, "plexus-test", name.AsString())

	require.ElementsMatch(t, []string{"traceparent", "tracestate", "baggage"}, otel.GetTextMapPropagator().Fields())
}

func TestSetupHonoursEnv(t *testing.T) {
	t.Run("explicit none", func(t *testing.T) {
		clearOTEL(t)
		t.Setenv("OTEL_TRACES_EXPORTER", "none")
		line, err := setup(t)
		require.NoError(t, err)
		require.Equal(t, "none", line["traces"])
	})
	t.Run("an OTLP endpoint turns the OTLP exporter on", func(t *testing.T) {
		clearOTEL(t)
		// Nothing listens there; the batcher only sends at shutdown and the
		// exporter's error is logged, not returned by Setup.
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:1/v1/traces")
		line, err := setup(t)
		require.NoError(t, err)
		require.Equal(t, "otlp", line["traces"])
	})
	t.Run("console", func(t *testing.T) {
		clearOTEL(t)
		t.Setenv("OTEL_TRACES_EXPORTER", "console")
		line, err := setup(t)
		require.NoError(t, err)
		require.Equal(t, "console", line["traces"])
	})
	t.Run("unknown exporter fails", func(t *testing.T) {
		clearOTEL(t)
		t.Setenv("OTEL_TRACES_EXPORTER", "carrier-pigeon")
		_, err := setup(t)
		require.ErrorContains(t, err, "trace exporter")
	})
	t.Run("service name from env", func(t *testing.T) {
		clearOTEL(t)
		t.Setenv("OTEL_SERVICE_NAME", "renamed")
		rec := tracetest.NewSpanRecorder()
		_, err := setup(t, telemetry.WithSpanProcessor(rec))
		require.NoError(t, err)
		_, span := otel.Tracer("t").Start(context.Background(), "op")
		span.End()
		name, _ := rec.Ended()[0].Resource().Set().Value(semconv.ServiceNameKey)
		require.Equal(t, "renamed", name.AsString())
	})
	t.Run("disabled", func(t *testing.T) {
		clearOTEL(t)
		t.Setenv("OTEL_SDK_DISABLED", "true")
		var buf bytes.Buffer
		shutdown, err := telemetry.Setup(context.Background(), "x", telemetry.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
		require.NoError(t, err)
		require.NoError(t, shutdown(context.Background()))
		require.Contains(t, buf.String(), "disabled")
	})
}
