package cmd

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/plexusnet/plexus/internal/testing/proctest"
	"github.com/plexusnet/plexus/internal/traceview"
)

// TestTrace runs the demo's receiver (tracedump serve), sends it the
// spans of two processes over OTLP (membership's trace of a change, and
// the importer's reconcile in another trace that links to it, with a
// child write), and asks plexusctl trace for membership's trace by a
// prefix of its id: both traces come back as one tree; an unknown or too
// short id is a clear error.
func TestTrace(t *testing.T) {
	otlp, httpAddr := proctest.FreeAddr(t), proctest.FreeAddr(t)
	cmd := exec.Command(proctest.Build(t, "./hack/tracedump"), "serve", "--otlp", otlp, "--http", httpAddr)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	ctx := context.Background()
	tracer := func(service string) (trace.Tracer, func()) {
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(otlp), otlptracegrpc.WithInsecure())
		require.NoError(t, err)
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
			sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))))
		return tp.Tracer("t"), func() { _ = tp.Shutdown(ctx) }
	}
	// The receiver listens for OTLP before it serves HTTP.
	require.Eventually(t, func() bool {
		_, err := traceview.Fetch(ctx, "http://"+httpAddr)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "tracedump serve did not start")
	members, doneMembers := tracer("plexus-membership")
	_, observe := members.Start(ctx, "membership.reconcile")
	observe.End()
	doneMembers()
	importer, done := tracer("plexus-importer")
	rctx, reconcile := importer.Start(ctx, "importer.reconcile", trace.WithLinks(trace.Link{SpanContext: observe.SpanContext()}))
	_, write := importer.Start(rctx, "kube POST endpointslices")
	write.End()
	reconcile.End()
	_, other := importer.Start(ctx, "unrelated")
	other.End()
	done()

	id := observe.SpanContext().TraceID().String()
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := NewRoot(&out)
		root.SetArgs(append([]string{"trace", "--from", "http://" + httpAddr, "--timeout", "5s"}, args...))
		err := root.Execute()
		return out.String(), err
	}
	var out string
	require.Eventually(t, func() bool {
		var err error
		out, err = run(id[:10])
		return err == nil && strings.Contains(out, "kube POST endpointslices")
	}, 10*time.Second, 100*time.Millisecond, "plexusctl trace: %s", out)
	require.Contains(t, out, "trace "+id+": 3 spans in 2 trace(s) from 2 service(s); linked: "+reconcile.SpanContext().TraceID().String())
	require.Contains(t, out, "\nplexus-membership  membership.reconcile")
	require.Contains(t, out, "\nplexus-importer  importer.reconcile")
	require.Contains(t, out, "\n  plexus-importer  kube POST endpointslices", "the write is the reconcile's child")
	require.NotContains(t, out, "unrelated")

	_, err := run("0123456789abcdef0123456789abcdef")
	require.ErrorContains(t, err, "no span of trace 0123456789abcdef0123456789abcdef received")
	_, err = run("0123")
	require.ErrorContains(t, err, "at least 8 hex digits")
	_, err = run("--from", "http://"+proctest.FreeAddr(t), id)
	require.ErrorContains(t, err, "is a trace receiver serving at")
}
