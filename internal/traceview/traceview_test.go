package traceview

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func span(trace, id, parent, name string, at int, links ...string) Span {
	return Span{TraceID: trace, SpanID: id, Parent: parent, Name: name, Service: "s",
		Start: t0.Add(time.Duration(at) * time.Millisecond), End: t0.Add(time.Duration(at+1) * time.Millisecond), Links: links}
}

// Three traces: b links to a, c links to b; d stands alone.
var spans = []Span{
	span("cccccccc01", "c1", "", "write", 30, "bbbbbbbb01/b1"),
	span("aaaaaaaa01", "a1", "", "observe", 0),
	span("bbbbbbbb01", "b1", "", "reconcile", 10, "aaaaaaaa01/a1"),
	span("bbbbbbbb01", "b2", "b1", "kube PUT", 20),
	span("dddddddd01", "d1", "", "other", 5),
	span("dddddddd02", "d2", "", "other", 6),
}

func names(ss []Span) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

func TestConnectedFollowsLinksBothWays(t *testing.T) {
	got, traces, err := Connected(spans, "AAAAAAAA")
	require.NoError(t, err)
	require.Equal(t, []string{"observe", "reconcile", "kube PUT", "write"}, names(got), "start order, d left out")
	require.Equal(t, []string{"aaaaaaaa01", "bbbbbbbb01", "cccccccc01"}, traces)

	got, traces, err = Connected(spans, "cccccccc01")
	require.NoError(t, err)
	require.Len(t, got, 4)
	require.Equal(t, "cccccccc01", traces[0])

	_, _, err = Connected(spans, "dddddddd")
	require.ErrorContains(t, err, "matches 2 traces (dddddddd01, dddddddd02)")
	_, _, err = Connected(spans, "eeeeeeee")
	require.ErrorContains(t, err, "no span of trace eeeeeeee")
	_, _, err = Connected(spans, "aaa")
	require.ErrorContains(t, err, "at least 8 hex digits")
}

func TestFlowFollowsLinksForward(t *testing.T) {
	require.Equal(t, []string{"observe", "reconcile", "kube PUT"}, names(Flow(spans, spans[3])))
}

func TestTree(t *testing.T) {
	got, _, err := Connected(spans, "bbbbbbbb01")
	require.NoError(t, err)
	require.Equal(t, "s  observe  (1ms, trace aaaaaaaa)\n"+
		"s  reconcile  (1ms, trace bbbbbbbb)  links→ aaaaaaaa01/a1\n"+
		"  s  kube PUT  (1ms, trace bbbbbbbb)\n"+
		"s  write  (1ms, trace cccccccc)  links→ bbbbbbbb01/b1\n", Tree(got))
}

func TestFetch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/spans" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(spans)
	}))
	defer srv.Close()
	got, err := Fetch(context.Background(), srv.URL+"/")
	require.NoError(t, err)
	require.Equal(t, spans, got)

	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusTeapot) }))
	defer bad.Close()
	_, err = Fetch(context.Background(), bad.URL)
	require.ErrorContains(t, err, "418")
}
