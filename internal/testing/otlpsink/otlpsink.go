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
	"sort"
	"strings"
	"sync"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
)

// Span is one received span.
type Span struct {
	TraceID string            `json:"trace_id"`
	SpanID  string            `json:"span_id"`
	Parent  string            `json:"parent_span_id,omitempty"`
	Name    string            `json:"name"`
	Service string            `json:"service"`
	Start   time.Time         `json:"start"`
	End     time.Time         `json:"end"`
	Attrs   map[string]string `json:"attributes,omitempty"`
	// Links are the spans this one links to, as "TRACE/SPAN".
	Links []string `json:"links,omitempty"`
}

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

// Flow is the spans connected to one span: its trace, and, through links,
// the traces it links to (and theirs), in start order.
func Flow(spans []Span, from Span) []Span {
	byTrace := map[string][]Span{}
	for _, sp := range spans {
		byTrace[sp.TraceID] = append(byTrace[sp.TraceID], sp)
	}
	seen := map[string]bool{}
	var out []Span
	var visit func(trace string)
	visit = func(trace string) {
		if seen[trace] {
			return
		}
		seen[trace] = true
		for _, sp := range byTrace[trace] {
			out = append(out, sp)
			for _, l := range sp.Links {
				visit(strings.SplitN(l, "/", 2)[0])
			}
		}
	}
	visit(from.TraceID)
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// Tree renders spans as an indented tree by parent, one line a span:
// service, name and duration; links are shown after the span.
func Tree(spans []Span) string {
	children := map[string][]Span{}
	ids := map[string]bool{}
	for _, sp := range spans {
		ids[sp.SpanID] = true
	}
	var roots []Span
	for _, sp := range spans {
		if sp.Parent == "" || !ids[sp.Parent] {
			roots = append(roots, sp)
		} else {
			children[sp.Parent] = append(children[sp.Parent], sp)
		}
	}
	var b strings.Builder
	var walk func(sp Span, depth int)
	walk = func(sp Span, depth int) {
		fmt.Fprintf(&b, "%s%s  %s  (%s, trace %s)", strings.Repeat("  ", depth), sp.Service, sp.Name, sp.End.Sub(sp.Start).Round(time.Microsecond), sp.TraceID[:8])
		if len(sp.Links) > 0 {
			fmt.Fprintf(&b, "  links→ %s", strings.Join(sp.Links, ", "))
		}
		b.WriteString("\n")
		for _, c := range children[sp.SpanID] {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}
