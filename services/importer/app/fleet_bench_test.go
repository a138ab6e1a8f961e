package app_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/dynamic"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/fleet"
	"github.com/plexusnet/plexus/internal/testing/proctest"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// fleetEndpoints is service i of cluster c with n endpoints: every
// cluster exports the same services (svc-0000 … ), each with addresses of
// its own (c < 250, i < 250, n < 250).
func fleetEndpoints(c, i, n int) *membershipv1.ServiceEndpoints {
	addrs := make([]string, n)
	for j := range n {
		addrs[j] = fmt.Sprintf("10.%d.%d.%d", c+1, i, j+1)
	}
	return sourcetest.Endpoints(benchNamespace, fmt.Sprintf("svc-%04d", i), []string{"http=8080"}, addrs...)
}

// scrape reads a process's /metrics.
func scrape(tb require.TestingT, httpAddr string) map[string]float64 {
	if h, ok := tb.(interface{ Helper() }); ok {
		h.Helper()
	}
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	require.NoError(tb, err)
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(tb, err)
	out := map[string]float64{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				out[name] += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[name] += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				h := m.GetHistogram()
				out[name+"_count"] += float64(h.GetSampleCount())
				for _, b := range h.GetBucket() {
					out[name+"_le_"+strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)] += float64(b.GetCumulativeCount())
				}
			}
		}
	}
	return out
}

// histogram rebuilds a latency from scraped buckets, the difference of two
// scrapes.
func histogram(after, before map[string]float64, name string) latency {
	var l latency
	l.count = uint64(after[name+"_count"] - before[name+"_count"])
	for k := range after {
		bound, ok := strings.CutPrefix(k, name+"_le_")
		if !ok || bound == "+Inf" {
			continue
		}
		if b, err := strconv.ParseFloat(bound, 64); err == nil {
			l.buckets = append(l.buckets, b)
		}
	}
	slices.Sort(l.buckets)
	for _, b := range l.buckets {
		key := name + "_le_" + strconv.FormatFloat(b, 'g', -1, 64)
		l.cum = append(l.cum, uint64(after[key]-before[key]))
	}
	return l
}

// profile writes a CPU profile of the process serving pprof at httpAddr,
// taken over d, to path.
func profile(tb testing.TB, httpAddr, path string, d time.Duration) {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", httpAddr, int(d.Seconds())))
	if err != nil {
		tb.Errorf("profile: %v", err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		tb.Errorf("profile: %v", err)
	}
}

// BenchmarkFleet: one real importer (its own process, default flags, the
// member clusters from ClusterProfiles) and its real kube-apiserver; N
// simulated member clusters that speak the real WatchServices API, each
// exporting the same 100 services with 10 endpoints of its own (so every
// import has N clusters' slices: N×100 slices, N×1,000 endpoints). It
// reports:
//
//   - converge-s: importer start → every slice written;
//
//   - p50-ms, p99-ms: change observed at a member → slice written, for
//     endpoint changes at 100/s spread over random clusters and services
//     for 20 s (the export_import_duration histogram, as
//     histogram_quantile computes it);
//
//   - cpu-ms/change: the importer's CPU time over the changes, per change;
//
//   - rss-MB, peak-MB, B/endpoint: the importer's resident memory after
//     the changes, its peak, and resident bytes per imported endpoint;
//
//   - join-s: a new member's ClusterProfile created → its 100 slices
//     written, in the running fleet.
//
//     go test -run '^$' -bench Fleet -benchtime 1x -count 3 -timeout 60m ./services/importer/app/
func BenchmarkFleet(b *testing.B) {
	bin := proctest.Build(b, "./services/importer")
	for _, n := range []int{10, 50, 100} {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			for b.Loop() {
				benchFleet(b, bin, n)
			}
		})
	}
}

func benchFleet(b *testing.B, bin string, clusters int) {
	const (
		services   = 100
		endpoints  = 10
		rate       = 100 // changes per second
		changeTime = 20 * time.Second
	)
	e := newEnv(b)
	e.pool(b, "vips", "10.96.4.0/22")
	e.namespace(b, benchNamespace)
	e.namespace(b, "fleet")
	dyn, err := dynamic.NewForConfig(e.cluster.Config)
	require.NoError(b, err)
	ctx := context.Background()

	srcs := make([]*sourcetest.Source, clusters+1)
	sets := make([][]*membershipv1.ServiceEndpoints, clusters+1)
	for c := range clusters + 1 { // the last one joins later
		srcs[c] = sourcetest.Start(b, fmt.Sprintf("cluster-%03d", c))
		sets[c] = make([]*membershipv1.ServiceEndpoints, services)
		for i := range services {
			sets[c][i] = fleetEndpoints(c, i, endpoints)
			srcs[c].Set(sets[c][i])
		}
	}
	for c := range clusters {
		_, err := fleet.Join(ctx, dyn, "fleet", fleet.Member{Name: srcs[c].Cluster(), Addr: srcs[c].Addr()}, "")
		require.NoError(b, err)
	}

	args := []string{"--kubeconfig", e.cluster.Kubeconfig, "--cluster-name", "member",
		"--allocator-addr", e.allocAddr, "--vip-pool", "vips", "--inventory-namespace", "fleet",
		"--leader-elect=false", "--log-level", "warn"}
	// BENCH_PPROF=DIR writes a CPU profile of the importer during the
	// changes to DIR.
	profileDir := os.Getenv("BENCH_PPROF")
	if profileDir != "" {
		args = append(args, "--pprof")
	}
	start := time.Now()
	proc := proctest.Start(b, bin, args)
	e.waitSlices(b, clusters*services, clusters*services*endpoints, 10*time.Minute)
	converge := time.Since(start)

	// Changes at a steady rate over the whole fleet.
	rng := rand.New(rand.NewPCG(1, 2))
	const hist = "plexus_importer_export_import_duration_seconds"
	before := scrape(b, proc.HTTPAddr)
	usage := proc.Usage()
	profiled := make(chan struct{})
	go func() {
		defer close(profiled)
		if profileDir != "" {
			profile(b, proc.HTTPAddr, filepath.Join(profileDir, fmt.Sprintf("importer-%d.pprof", clusters)), changeTime-2*time.Second)
		}
	}()
	changes := churn(rate, changeTime, func() {
		c, i := rng.IntN(clusters), rng.IntN(services)
		flip(sets[c][i], rng.IntN(endpoints))
		srcs[c].Set(sets[c][i])
	})
	got := settle(changes, func() latency { return histogram(scrape(b, proc.HTTPAddr), before, hist) })
	<-profiled
	after := proc.Usage()

	// A cluster joins the running fleet.
	joiner := srcs[clusters]
	joined := time.Now()
	_, err = fleet.Join(ctx, dyn, "fleet", fleet.Member{Name: joiner.Cluster(), Addr: joiner.Addr()}, "")
	require.NoError(b, err)
	e.waitSlices(b, (clusters+1)*services, (clusters+1)*services*endpoints, 5*time.Minute)
	join := time.Since(joined)

	b.ReportMetric(converge.Seconds(), "converge-s")
	b.ReportMetric(float64(changes)/changeTime.Seconds(), "changes/s")
	b.ReportMetric(got.quantile(0.5)*1000, "p50-ms")
	b.ReportMetric(got.quantile(0.99)*1000, "p99-ms")
	b.ReportMetric(float64((after.CPU-usage.CPU).Microseconds())/1000/float64(changes), "cpu-ms/change")
	b.ReportMetric(after.RSS/(1<<20), "rss-MB")
	b.ReportMetric(after.Peak/(1<<20), "peak-MB")
	b.ReportMetric(after.RSS/float64(clusters*services*endpoints), "B/endpoint")
	b.ReportMetric(join.Seconds(), "join-s")
}
