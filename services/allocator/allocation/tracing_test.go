package allocation_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/plexusnet/plexus/services/allocator/allocation"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
)

// traceRecorder records the spans of this test binary. The package's
// tracer binds to the first provider set globally, so the provider is set
// once per process (a second run, -count=2, records to the same one).
var traceRecorder = sync.OnceValue(func() *tracetest.InMemoryExporter {
	exp := tracetest.NewInMemoryExporter()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample()))))
	return exp
})

// TestTracedCommit: a commit in a sampled trace has a store.Commit span
// with what it did and the revision it made; in a trace nobody samples it
// has a span that records nothing (and builds no attributes).
func TestTracedCommit(t *testing.T) {
	rec := traceRecorder()
	rec.Reset()

	st := allocation.Traced(memory.New())
	put := func(ctx context.Context, id string) int64 {
		rev, err := st.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: id, CIDRs: []string{netip.MustParsePrefix("10.0.0.0/24").String()}}}}})
		require.NoError(t, err)
		return rev
	}
	put(context.Background(), "unsampled")
	require.Empty(t, rec.GetSpans())

	sampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	ctx, parent := sampled.Tracer("test").Start(context.Background(), "request")
	rev := put(ctx, "sampled")
	parent.End()
	spans := rec.GetSpans()
	require.Len(t, spans, 1)
	span := spans[0]
	require.Equal(t, "store.Commit", span.Name)
	require.Equal(t, parent.SpanContext().TraceID(), span.SpanContext.TraceID())
	require.Subset(t, span.Attributes, []attribute.KeyValue{
		attribute.Int("plexus.store.conditions", 0),
		attribute.Int("plexus.store.operations", 1),
		attribute.Int64("plexus.store.revision", rev),
	})
}
