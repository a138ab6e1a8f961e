package app_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// benchNamespace holds every service of the benchmarks.
const benchNamespace = "bench"

// benchEndpoints is service i's endpoint set from cluster with n
// endpoints (at most 254, i below 4,000); addresses are unique per
// cluster, service and endpoint.
func benchEndpoints(cluster, i, n int) *membershipv1.ServiceEndpoints {
	addrs := make([]string, n)
	for j := range n {
		addrs[j] = fmt.Sprintf("10.%d.%d.%d", 64+cluster*16+i/250, i%250, j+1)
	}
	return sourcetest.Endpoints(benchNamespace, fmt.Sprintf("svc-%04d", i), []string{"http=8080"}, addrs...)
}

// listSlices counts the importer's slices and their endpoints in the
// member cluster, read from the API, page by page.
func (e *env) listSlices(ctx context.Context) (slices, endpoints int, err error) {
	opts := metav1.ListOptions{LabelSelector: mcsnames.LabelManagedBy + "=" + mcsnames.ManagedBy, Limit: 500}
	for {
		list, err := e.kube.DiscoveryV1().EndpointSlices(benchNamespace).List(ctx, opts)
		if err != nil {
			return 0, 0, err
		}
		for i := range list.Items {
			slices++
			endpoints += len(list.Items[i].Endpoints)
		}
		if list.Continue == "" {
			return slices, endpoints, nil
		}
		opts.Continue = list.Continue
	}
}

// waitSlices waits until the member cluster holds want slices with
// wantEndpoints endpoints in all, and returns when that was first seen.
func (e *env) waitSlices(tb testing.TB, want, wantEndpoints int, limit time.Duration) time.Time {
	tb.Helper()
	deadline := time.Now().Add(limit)
	var s, n int
	for time.Now().Before(deadline) {
		var err error
		s, n, err = e.listSlices(context.Background())
		require.NoError(tb, err)
		if s == want && n == wantEndpoints {
			return time.Now()
		}
		time.Sleep(250 * time.Millisecond)
	}
	require.FailNowf(tb, "slices not written", "after %s: %d slices with %d endpoints, want %d with %d", limit, s, n, want, wantEndpoints)
	return time.Time{}
}

// latency is a snapshot of the export_import_duration histogram.
type latency struct {
	count   uint64
	buckets []float64 // upper bounds
	cum     []uint64  // cumulative counts per bucket
}

func readLatency(tb testing.TB, reg *prometheus.Registry) latency {
	tb.Helper()
	mfs, err := reg.Gather()
	require.NoError(tb, err)
	for _, mf := range mfs {
		if mf.GetName() != "plexus_importer_export_import_duration_seconds" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		l := latency{count: h.GetSampleCount()}
		for _, b := range h.GetBucket() {
			l.buckets = append(l.buckets, b.GetUpperBound())
			l.cum = append(l.cum, b.GetCumulativeCount())
		}
		return l
	}
	require.FailNow(tb, "no export_import_duration histogram")
	return latency{}
}

// since returns the observations after an earlier snapshot.
func (l latency) since(before latency) latency {
	out := latency{count: l.count - before.count, buckets: l.buckets, cum: make([]uint64, len(l.cum))}
	for i := range l.cum {
		out.cum[i] = l.cum[i] - before.cum[i]
	}
	return out
}

// quantile interpolates linearly inside the bucket that holds q, as
// Prometheus's histogram_quantile does.
func (l latency) quantile(q float64) float64 {
	if l.count == 0 {
		return math.NaN()
	}
	rank := q * float64(l.count)
	i := sort.Search(len(l.cum), func(i int) bool { return float64(l.cum[i]) >= rank })
	if i == len(l.cum) {
		return math.Inf(1)
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = l.buckets[i-1], float64(l.cum[i-1])
	}
	in := float64(l.cum[i]) - below
	if in == 0 {
		return l.buckets[i]
	}
	return lo + (l.buckets[i]-lo)*(rank-below)/in
}

// within is the exact share of observations at or below a bucket bound.
func (l latency) within(bound float64) float64 {
	for i, b := range l.buckets {
		if b == bound {
			return float64(l.cum[i]) / float64(l.count)
		}
	}
	return math.NaN()
}

// flip turns endpoint i of a set's first group ready or not ready.
func flip(set *membershipv1.ServiceEndpoints, i int) {
	ep := set.Groups[0].Endpoints[i]
	ep.Conditions.Ready = !ep.Conditions.Ready
	ep.Conditions.Serving = ep.Conditions.Ready
}

// churn calls change at a steady rate per second for d, and returns how
// many changes it made.
func churn(rate int, d time.Duration, change func()) int {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(d)
	changes := 0
	for time.Now().Before(end) {
		<-tick.C
		change()
		changes++
	}
	return changes
}

// settle waits until read observes every change before it returns what it
// read. Changes to one service that arrive together are written (and
// observed) once, so the count may stay below the changes: it also returns
// once the count stopped moving for 2 s, or after a minute.
func settle(changes int, read func() latency) latency {
	var got latency
	deadline := time.Now().Add(time.Minute)
	for last, quiet := uint64(0), 0; time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		got = read()
		if got.count >= uint64(changes) {
			break
		}
		if got.count == last {
			if quiet++; quiet == 20 {
				break
			}
		} else {
			last, quiet = got.count, 0
		}
	}
	return got
}

// BenchmarkExportImportLatency: 1,000 imported services (10 endpoints
// each) from one source; then endpoint changes at a steady 100 per second
// spread over random services, each flipping one endpoint's readiness.
// Reported: the export_import_duration histogram of the changes (observed
// at the source → last slice write in the member cluster), as
// histogram_quantile computes it, and the exact share within 100 ms.
//
//	go test -run '^$' -bench ExportImportLatency -benchtime 1x -count 3 ./services/importer/app/
//	BENCH_KUBE_QPS=100 go test ... (the same with the old default limit)
func BenchmarkExportImportLatency(b *testing.B) {
	const (
		services   = 1000
		endpoints  = 10
		rate       = 100 // changes per second
		changeTime = 20 * time.Second
	)
	e := newEnv(b)
	// Inside the member cluster's Service range (10.96.0.0/16), where
	// nothing else asks for addresses, so every derived Service carries
	// its VIP as its cluster IP.
	e.pool(b, "vips", "10.96.4.0/22")
	e.namespace(b, benchNamespace)
	src := sourcetest.Start(b, "east")
	sets := make([]*membershipv1.ServiceEndpoints, services)
	for i := range services {
		sets[i] = benchEndpoints(0, i, endpoints)
		src.Set(sets[i])
	}
	o := e.options("vips")
	// BENCH_KUBE_QPS compares client-side limits (burst: twice the QPS).
	if q := os.Getenv("BENCH_KUBE_QPS"); q != "" {
		_, err := fmt.Sscan(q, &o.KubeQPS)
		require.NoError(b, err, "BENCH_KUBE_QPS")
		o.KubeBurst = 2 * int(o.KubeQPS)
	}
	im := e.startImporter(b, o, src)
	e.waitSlices(b, services, services*endpoints, 5*time.Minute)

	rng := rand.New(rand.NewPCG(1, 2))
	for b.Loop() {
		before := readLatency(b, im.registry)
		writesBefore := writes(b, im.registry)
		changes := churn(rate, changeTime, func() {
			i := rng.IntN(services)
			flip(sets[i], rng.IntN(endpoints))
			src.Set(sets[i])
		})
		got := settle(changes, func() latency { return readLatency(b, im.registry).since(before) })
		for k, n := range writes(b, im.registry) {
			if d := n - writesBefore[k]; d > 0 {
				b.Logf("writes during the changes: %s %.0f (%.2f per change)", k, d, d/float64(changes))
			}
		}
		b.ReportMetric(float64(changes)/changeTime.Seconds(), "changes/s")
		b.ReportMetric(float64(got.count), "observed")
		b.ReportMetric(got.quantile(0.5)*1000, "p50-ms")
		b.ReportMetric(got.quantile(0.99)*1000, "p99-ms")
		b.ReportMetric(100*got.within(0.1), "%≤100ms")
	}
}

// BenchmarkBulkImport: 1,000 services × 100 endpoints from each of 3
// source clusters into an empty member cluster: the time until every
// slice (one per service and cluster: 3,000 slices, 300,000 endpoints)
// is in the API, and the writes per second that took. The importer runs
// with --kube-api-qps 1000 --kube-api-burst 2000, so that the client-side
// limit (defaults 100/200) is not what bounds it.
//
//	go test -run '^$' -bench BulkImport -benchtime 1x -count 3 -timeout 30m ./services/importer/app/
func BenchmarkBulkImport(b *testing.B) {
	const (
		services  = 1000
		endpoints = 100
		clusters  = 3
	)
	for b.Loop() {
		e := newEnv(b)
		e.pool(b, "vips", "10.96.4.0/22")
		e.namespace(b, benchNamespace)
		var srcs []*sourcetest.Source
		for c := range clusters {
			src := sourcetest.Start(b, fmt.Sprintf("cluster-%d", c))
			for i := range services {
				src.Set(benchEndpoints(c, i, endpoints))
			}
			srcs = append(srcs, src)
		}
		o := e.options("vips")
		o.KubeQPS, o.KubeBurst = 1000, 2000
		start := time.Now()
		im := e.startImporter(b, o, srcs...)
		done := e.waitSlices(b, services*clusters, services*clusters*endpoints, 10*time.Minute)
		took := done.Sub(start)
		total := 0.0
		for _, n := range writes(b, im.registry) {
			total += n
		}
		b.ReportMetric(took.Seconds(), "s-to-all-slices")
		b.ReportMetric(total, "writes")
		b.ReportMetric(total/took.Seconds(), "writes/s")
	}
}
