package otlpsink

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/plexusnet/plexus/internal/traceview"
)

// TestSinkReceivesAndConnects: spans exported by the OTel SDK over
// OTLP/gRPC arrive with their parents, links and service, and Flow
// follows a link into another trace.
func TestSinkReceivesAndConnects(t *testing.T) {
	sink, err := Start("127.0.0.1:0", 100)
	require.NoError(t, err)
	defer sink.Stop()
	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(sink.Addr()), otlptracegrpc.WithInsecure())
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "test"))))
	defer tp.Shutdown(ctx)
	tr := tp.Tracer("t")

	_, observe := tr.Start(ctx, "observe")
	observe.End()
	rctx, reconcile := tr.Start(ctx, "reconcile", trace.WithLinks(trace.Link{SpanContext: observe.SpanContext()}),
		trace.WithAttributes(attribute.String("service", "shop/web")))
	_, write := tr.Start(rctx, "kube POST endpointslices")
	write.End()
	reconcile.End()
	_, other := tr.Start(ctx, "unrelated")
	other.End()

	require.Eventually(t, func() bool { return len(sink.Spans()) == 4 }, 5*time.Second, 10*time.Millisecond)
	var from Span
	for _, sp := range sink.Spans() {
		require.Equal(t, "test", sp.Service)
		if sp.Name == "kube POST endpointslices" {
			from = sp
		}
	}
	flow := traceview.Flow(sink.Spans(), from)
	var names []string
	for _, sp := range flow {
		names = append(names, sp.Name)
	}
	require.ElementsMatch(t, []string{"observe", "reconcile", "kube POST endpointslices"}, names, "the link leads to the observing trace; the unrelated one stays out")
	tree := traceview.Tree(flow)
	require.Contains(t, tree, "test  reconcile")
	require.Contains(t, tree, "\n  test  kube POST endpointslices", "the write is a child of the reconcile")
	require.Contains(t, tree, "links→ "+observe.SpanContext().TraceID().String())
}
