package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Shutdown flushes and stops what Setup started.
type Shutdown func(context.Context) error

// Option changes Setup.
type Option func(*setupOptions)

type setupOptions struct {
	logger     *slog.Logger
	processors []sdktrace.SpanProcessor
}

// WithLogger receives OpenTelemetry's own errors (an exporter that cannot
// reach its collector, for example) and the startup summary.
func WithLogger(l *slog.Logger) Option {
	return func(o *setupOptions) { o.logger = l }
}

// WithSpanProcessor adds a span processor next to the configured exporter;
// tests use it with tracetest.SpanRecorder to see the spans a process makes.
func WithSpanProcessor(p sdktrace.SpanProcessor) Option {
	return func(o *setupOptions) { o.processors = append(o.processors, p) }
}

// Setup installs the global tracer provider, meter provider and propagators
// of a process named serviceName (OTEL_SERVICE_NAME overrides it), as the
// OTEL_* environment says. Call the returned Shutdown before exiting so
// buffered spans are sent.
func Setup(ctx context.Context, serviceName string, opts ...Option) (Shutdown, error) {
	o := setupOptions{logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	env := func(k string) string { return strings.TrimSpace(os.Getenv(k)) }

	// Propagate even when the SDK is off, so this process does not break
	// the trace of the calls that pass through it.
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		o.logger.Warn("opentelemetry", "error", err)
	}))

	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") {
		o.logger.Info("opentelemetry disabled by OTEL_SDK_DISABLED")
		return func(context.Context) error { return nil }, nil
	}

	res, err := newResource(ctx, serviceName)
	if err != nil {
		return nil, err
	}
	tp, traceExporter, err := newTracerProvider(ctx, env, res, o.processors)
	if err != nil {
		return nil, err
	}
	otel.SetTracerProvider(tp)
	shutdowns := []Shutdown{tp.Shutdown}
	mp, metricExporter, err := newMeterProvider(ctx, env, res)
	if err != nil {
		_ = tp.Shutdown(ctx)
		return nil, err
	}
	if mp != nil {
		otel.SetMeterProvider(mp)
		shutdowns = append(shutdowns, mp.Shutdown)
	}

	o.logger.Info("opentelemetry configured", "service", serviceName, "traces", traceExporter, "metrics", metricExporter)
	return func(ctx context.Context) error {
		var errs []error
		for _, s := range shutdowns {
			errs = append(errs, s(ctx))
		}
		return errors.Join(errs...)
	}, nil
}

// newResource describes the process: its service name, the SDK, the host
// and the pid, then what the OTEL_* environment says.
func newResource(ctx context.Context, serviceName string) (*resource.Resource, error) {
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName(serviceName)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithProcessPID(),
		// Last, so that OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win.
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("build telemetry resource: %w", err)
	}
	return res, nil
}

// newTracerProvider builds the tracer provider with the exporter the
// environment asks for (its name, or "none", is returned) and the extra
// processors.
func newTracerProvider(ctx context.Context, env func(string) string, res *resource.Resource, processors []sdktrace.SpanProcessor) (*sdktrace.TracerProvider, string, error) {
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	traceExporter := "none"
	if wantExporter(env, "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("trace exporter from OTEL_* environment: %w", err)
		}
		if !autoexport.IsNoneSpanExporter(exp) {
			tpOpts = append(tpOpts, sdktrace.WithBatcher(exp))
			traceExporter = exporterName(env("OTEL_TRACES_EXPORTER"))
		}
	}
	for _, p := range processors {
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(p))
	}
	if traceExporter == "none" && len(processors) == 0 && env("OTEL_TRACES_SAMPLER") == "" {
		// Nothing would ever read a recorded span: record only when an
		// upstream caller sampled the trace, so ids still propagate (and
		// appear in logs) at almost no cost per call.
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	}
	return sdktrace.NewTracerProvider(tpOpts...), traceExporter, nil
}

// newMeterProvider builds a meter provider when the environment asks for a
// metric exporter (nil and "none" otherwise) and returns the exporter's
// name.
func newMeterProvider(ctx context.Context, env func(string) string, res *resource.Resource) (*sdkmetric.MeterProvider, string, error) {
	if !wantExporter(env, "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") {
		return nil, "none", nil
	}
	reader, err := autoexport.NewMetricReader(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("metric reader from OTEL_* environment: %w", err)
	}
	if autoexport.IsNoneMetricReader(reader) {
		return nil, "none", nil
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(reader))
	return mp, exporterName(env("OTEL_METRICS_EXPORTER")), nil
}

// wantExporter decides whether the operator asked for an exporter of one
// signal: explicitly by name, or implicitly by giving an OTLP endpoint.
func wantExporter(env func(string) string, exporterVar, signalEndpointVar string) bool {
	return env(exporterVar) != "" || env("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || env(signalEndpointVar) != ""
}

func exporterName(v string) string {
	if v == "" {
		return "otlp"
	}
	return v
}
