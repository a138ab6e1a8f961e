package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// TestDocsAreCurrent fails when a committed reference differs from what the
// generator writes from the code now.
func TestDocsAreCurrent(t *testing.T) {
	t.Cleanup(isolateEnvironment())
	for _, d := range docs {
		t.Run(d.file, func(t *testing.T) {
			want, err := d.gen()
			require.NoError(t, err)
			path := filepath.Join("..", "..", "docs", d.file)
			got, err := os.ReadFile(path)
			require.NoError(t, err, "docs/%s is missing: run `%s`", d.file, regenerate)
			if string(got) != string(want) {
				t.Fatalf("docs/%s is stale: run `%s` and commit it\n%s", d.file, regenerate, firstDifference(string(got), string(want)))
			}
		})
	}
}

// firstDifference describes the first line where the committed file and
// the generated one differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("first difference, line %d:\n  committed: %s\n  generated: %s", i+1, gl, wl)
		}
	}
	return ""
}

func TestServiceFlagMustBeBoundToItsVariable(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.String("store", "memory", "where allocations are kept [env PLEXUS_STORE]")
	fs.String("unbound", "", "a flag config.Bind never saw")
	row, err := serviceRow(fs.Lookup("store"))
	require.NoError(t, err)
	require.Equal(t, "`PLEXUS_STORE`", code(row.env))
	require.Equal(t, "where allocations are kept", row.usage)
	_, err = serviceRow(fs.Lookup("unbound"))
	require.ErrorContains(t, err, "PLEXUS_UNBOUND")
}

func TestPlexusctlVariablesAreReadFromUsage(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.String("token", "", "bearer token (env PLEXUS_TOKEN)")
	fs.String("allocator-addr", "", "address (env PLEXUS_ALLOCATOR_ADDR, context field allocator)")
	fs.String("config", "", "config file (env PLEXUSCONFIG; default ~/.config)")
	fs.String("timeout", "", "deadline of each call")
	rows := ctlRows([]*pflag.Flag{fs.Lookup("token"), fs.Lookup("allocator-addr"), fs.Lookup("config"), fs.Lookup("timeout")})
	require.Equal(t, []flagRow{
		{name: "`--token`", env: "PLEXUS_TOKEN", usage: "bearer token"},
		{name: "`--allocator-addr`", env: "PLEXUS_ALLOCATOR_ADDR", usage: "address (context field allocator)"},
		{name: "`--config`", env: "PLEXUSCONFIG", usage: "config file (default ~/.config)"},
		{name: "`--timeout`", usage: "deadline of each call"},
	}, rows)
}

func TestMetricsOf(t *testing.T) {
	reg := prometheus.NewRegistry()
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t_events_total", Help: "Events | by type."}, []string{"type"})
	leader := prometheus.NewGauge(prometheus.GaugeOpts{Name: "t_leader", Help: "Leader.", ConstLabels: prometheus.Labels{"identity": "host-1"}})
	reg.MustRegister(vec, leader)
	ms, err := metricsOf(reg, []prometheus.Collector{vec, leader})
	require.NoError(t, err)
	require.Equal(t, []metric{
		{name: "t_events_total", typ: "counter", help: "Events | by type.", labels: []string{"type"}},
		{name: "t_leader", typ: "gauge", help: "Leader.", labels: []string{"identity"}},
	}, ms)

	// A collector registered on the registry directly, bypassing the
	// observer, cannot be documented: the generator refuses.
	reg.MustRegister(prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "t_hidden_seconds", Help: "Hidden."}, []string{"op"}))
	_, err = metricsOf(reg, []prometheus.Collector{vec, leader})
	require.ErrorContains(t, err, "t_hidden_seconds")
}
