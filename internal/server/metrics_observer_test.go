package server_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/server"
)

// TestMetricsObserverSeesEveryRegisteredCollector: the runtime's own
// collectors and those registered through Registerer reach the observer
// and are served on /metrics; a refused registration does not reach it.
func TestMetricsObserverSeesEveryRegisteredCollector(t *testing.T) {
	var seen []prometheus.Collector
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "plexus_test_events_total", Help: "Test events."}, []string{"kind"})
	r := startWith(t, testConfig(), func(s *server.Server) {
		require.NoError(t, s.Registerer().Register(vec))
		dup := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "plexus_test_events_total", Help: "Test events."}, []string{"kind"})
		require.Error(t, s.Registerer().Register(dup))
	}, server.WithMetricsObserver(func(c prometheus.Collector) { seen = append(seen, c) }))

	names := map[string]int{}
	for _, c := range seen {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			// Desc.String starts with Desc{fqName: "NAME", ...
			name, _, _ := strings.Cut(strings.TrimPrefix(d.String(), `Desc{fqName: "`), `"`)
			names[name]++
		}
	}
	require.Equal(t, 1, names["plexus_test_events_total"], "registered once, the duplicate refused")
	for _, own := range []string{"plexus_grpc_rejected_total", "plexus_readiness_check_ok", "grpc_server_handled_total"} {
		require.Equal(t, 1, names[own], "the runtime's own %s", own)
	}

	vec.WithLabelValues("a").Inc()
	_, body := httpGet(t, r.srv.HTTPAddr(), "/metrics")
	require.Contains(t, body, `plexus_test_events_total{kind="a"} 1`)
}
