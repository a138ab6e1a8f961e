// Package otlpsink is a small OTLP trace receiver: it accepts the spans
// that Plexus processes export over OTLP/gRPC and keeps them in memory, so
// that the demo can show one export's trace and tests can assert how the
// spans of several processes connect. It is not a trace store: it keeps at
// most a bounded number of spans and forgets the oldest.
package otlpsink

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"sync"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"

	"github.com/plexusnet/plexus/internal/traceview"
)

// Span is one received span (the JSON shape tracedump serves).
type Span = traceview.Span

// Sink receives spans. It is safe for concurrent use.
type Sink struct {
	collectortrace.UnimplementedTraceServiceServer
	max   int
	mu    sync.Mutex
	spans []Span
	srv   *grpc.Server
	lis   net.Listener
}

// Start serves OTLP/gRPC on addr (for example 127.0.0.1:4317, or
// 127.0.0.1:0) keeping at most max spans.
func Start(addr string, max int) (*Sink, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("otlp sink: %w", err)
	}
	s := &Sink{max: max, srv: grpc.NewServer(), lis: lis}
	collectortrace.RegisterTraceServiceServer(s.srv, s)
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

// Addr is the address the sink listens on.
func (s *Sink) Addr() string { return s.lis.Addr().String() }

// Stop stops serving.
func (s *Sink) Stop() { s.srv.Stop() }

// Export implements the OTLP trace service.
func (s *Sink) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				span := Span{
					TraceID: hex.EncodeToString(sp.GetTraceId()),
					SpanID:  hex.EncodeToString(sp.GetSpanId()),
					Name:    sp.GetName(),
					Service: service,
					Start:   time.Unix(0, int64(sp.GetStartTimeUnixNano())).UTC(),
					End:     time.Unix(0, int64(sp.GetEndTimeUnixNano())).UTC(),
					Attrs:   attrs(sp.GetAttributes()),
				}
				if len(sp.GetParentSpanId()) > 0 {
					span.Parent = hex.EncodeToString(sp.GetParentSpanId())
				}
				for _, l := range sp.GetLinks() {
					span.Links = append(span.Links, hex.EncodeToString(l.GetTraceId())+"/"+hex.EncodeToString(l.GetSpanId()))
				}
				got = append(got, span)
			}
		}
	}
	s.mu.Lock()
	s.spans = append(s.spans, got...)
	if over := len(s.spans) - s.max; over > 0 {
		s.spans = append([]Span(nil), s.spans[over:]...)
	}
	s.mu.Unlock()
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			out[kv.GetKey()] = v.GetStringValue()
		case v.GetIntValue() != 0:
			out[kv.GetKey()] = fmt.Sprint(v.GetIntValue())
		case v.GetBoolValue():
			out[kv.GetKey()] = "true"
		default:
			out[kv.GetKey()] = v.String()
		}
	}
	return out
}

// Spans returns a copy of the spans received so far.
func (s *Sink) Spans() []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Span(nil), s.spans...)
}
