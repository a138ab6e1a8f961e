// Package traceview reads and shows the spans that Plexus's small OTLP
// receiver (tracedump serve, the demo's trace viewer) keeps: the JSON shape
// it serves them in, how to fetch them, which spans are connected to one
// another across traces through links, and a tree of them for a terminal.
// It keeps no spans itself; Jaeger or any OTLP backend is the real store.
package traceview

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"
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

// maxBody bounds what Fetch reads: the receiver keeps at most some
// hundred thousand spans.
const maxBody = 256 << 20

// Fetch reads every span a receiver serves at baseURL + "/spans".
func Fetch(ctx context.Context, baseURL string) ([]Span, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(baseURL, "/")+"/spans", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch spans: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch spans from %s: %s", req.URL, resp.Status)
	}
	var spans []Span
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(&spans); err != nil {
		return nil, fmt.Errorf("fetch spans from %s: %w", req.URL, err)
	}
	return spans, nil
}

// traceOf is the trace id of a "TRACE/SPAN" link.
func traceOf(link string) string { return strings.SplitN(link, "/", 2)[0] }

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
				visit(traceOf(l))
			}
		}
	}
	visit(from.TraceID)
	sortByStart(out)
	return out
}

// Connected is the spans of trace and of every trace linked to it in
// either direction (a trace it links to, or one that links to it, and so
// on), in start order; the trace ids in the order found, trace first. A
// trace id may be given by a prefix of at least 8 hex digits when only one
// trace has it.
func Connected(spans []Span, trace string) ([]Span, []string, error) {
	trace = strings.ToLower(trace)
	if len(trace) < 8 {
		return nil, nil, fmt.Errorf("trace id %q: give at least 8 hex digits", trace)
	}
	byTrace := map[string][]Span{}
	linked := map[string][]string{} // both directions
	for _, sp := range spans {
		byTrace[sp.TraceID] = append(byTrace[sp.TraceID], sp)
		for _, l := range sp.Links {
			to := traceOf(l)
			linked[sp.TraceID] = append(linked[sp.TraceID], to)
			linked[to] = append(linked[to], sp.TraceID)
		}
	}
	var matches []string
	for id := range byTrace {
		if strings.HasPrefix(id, trace) {
			matches = append(matches, id)
		}
	}
	switch {
	case len(matches) == 0:
		return nil, nil, fmt.Errorf("no span of trace %s received", trace)
	case len(matches) > 1:
		sort.Strings(matches)
		return nil, nil, fmt.Errorf("trace id prefix %s matches %d traces (%s): give more digits", trace, len(matches), strings.Join(matches, ", "))
	}
	seen := map[string]bool{matches[0]: true}
	order := []string{matches[0]}
	var out []Span
	for i := 0; i < len(order); i++ {
		out = append(out, byTrace[order[i]]...)
		for _, next := range linked[order[i]] {
			if !seen[next] && len(byTrace[next]) > 0 {
				seen[next] = true
				order = append(order, next)
			}
		}
	}
	sortByStart(out)
	return out, order, nil
}

func sortByStart(spans []Span) {
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].Start.Before(spans[j].Start) })
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
		fmt.Fprintf(&b, "%s%s  %s  (%s, trace %s)", strings.Repeat("  ", depth), sp.Service, sp.Name, sp.End.Sub(sp.Start).Round(time.Microsecond), short(sp.TraceID))
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

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
