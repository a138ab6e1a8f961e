package app_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/client-go/dynamic"

	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	"github.com/plexusnet/plexus/internal/fleet"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// restartFleet is an importer process (leader election on, its members
// from ClusterProfiles) in a fleet of simulated members that all export
// the same services, to be restarted.
type restartFleet struct {
	e    *env
	srcs []*sourcetest.Source
	proc *proctest.Proc
	api  importerv1.ImporterServiceClient
	// health is the importer's gRPC health service.
	health healthpb.HealthClient
}

// restartedResources are the resources an importer writes, or whose
// writes a restart must not cause.
var restartedResources = []kubetest.Resource{kubetest.EndpointSlices, kubetest.ServiceImports, kubetest.Services,
	kubetest.ServiceCIDRs, kubetest.ServiceExports, kubetest.Leases}

// startRestartFleet starts the fleet and waits until the importer has
// written every slice and has nothing left to do. The VIP pool lies
// outside the cluster's Service range, so the importer also makes it a
// ServiceCIDR.
func startRestartFleet(tb testing.TB, clusters, services, endpoints int) *restartFleet {
	tb.Helper()
	e := newEnv(tb)
	e.pool(tb, "vips", "10.200.0.0/20")
	e.namespace(tb, benchNamespace)
	e.namespace(tb, "fleet")
	dyn, err := dynamic.NewForConfig(e.cluster.Config)
	require.NoError(tb, err)
	f := &restartFleet{e: e}
	for c := range clusters {
		src := sourcetest.Start(tb, fmt.Sprintf("cluster-%03d", c))
		for i := range services {
			src.Set(fleetEndpoints(c, i, endpoints))
		}
		_, err := fleet.Join(context.Background(), dyn, "fleet", fleet.Member{Name: src.Cluster(), Addr: src.Addr()}, "")
		require.NoError(tb, err)
		f.srcs = append(f.srcs, src)
	}
	args := []string{"--kubeconfig", e.cluster.Kubeconfig, "--cluster-name", "member",
		"--allocator-addr", e.allocAddr, "--vip-pool", "vips", "--inventory-namespace", "fleet",
		"--lease-namespace", "default", "--log-level", "warn"}
	f.proc = proctest.Start(tb, proctest.Build(tb, "./services/importer"), args)
	conn := f.proc.Dial(tb)
	f.api, f.health = importerv1.NewImporterServiceClient(conn), healthpb.NewHealthClient(conn)
	e.waitSlices(tb, clusters*services, clusters*services*endpoints, 10*time.Minute)
	f.waitCaughtUp(tb, 5*time.Minute)
	return f
}

// ready reports whether the importer says it is ready: /readyz passes,
// its API serves, and ListSources shows every source synced.
func (f *restartFleet) ready(ctx context.Context) bool {
	resp, err := http.Get("http://" + f.proc.HTTPAddr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	h, err := f.health.Check(ctx, &healthpb.HealthCheckRequest{Service: "plexus.importer.v1.ImporterService"})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return false
	}
	srcs, err := f.api.ListSources(ctx, &importerv1.ListSourcesRequest{})
	if err != nil || len(srcs.GetSources()) != len(f.srcs) {
		return false
	}
	for _, s := range srcs.GetSources() {
		if !s.GetSynced() {
			return false
		}
	}
	return true
}

// restart stops the importer, starts it again with the same arguments and
// returns the time from its start until it is ready.
func (f *restartFleet) restart(tb testing.TB) time.Duration {
	tb.Helper()
	f.proc.Stop()
	start := time.Now()
	f.proc.Restart()
	f.waitReady(tb)
	return time.Since(start)
}

// waitReady waits until the importer is ready.
func (f *restartFleet) waitReady(tb testing.TB) {
	tb.Helper()
	if !assert.Eventually(tb, func() bool { return f.ready(context.Background()) }, 2*time.Minute, 5*time.Millisecond) {
		require.FailNow(tb, "importer not ready after 2m", f.proc.Log())
	}
}

// waitSource waits until ListSources shows cluster as ok says.
func (f *restartFleet) waitSource(tb testing.TB, cluster string, ok func(*importerv1.Source) bool) {
	tb.Helper()
	require.Eventually(tb, func() bool {
		resp, err := f.api.ListSources(context.Background(), &importerv1.ListSourcesRequest{})
		if err != nil {
			return false
		}
		for _, s := range resp.GetSources() {
			if s.GetCluster() == cluster {
				return ok(s)
			}
		}
		return false
	}, 2*time.Minute, tick, "source %s", cluster)
}

// caughtUp reports, from the importer's metrics, whether it leads, has
// queued every service knowing the complete state of sources sources, and
// has nothing left to do: no service queued or being reconciled, and every
// write it made seen by its caches. It returns its writes so far.
func (f *restartFleet) caughtUp(t require.TestingT, sources int) (bool, float64) {
	m := scrape(t, f.proc.HTTPAddr)
	return m["plexus_importer_leader"] == 1 && m["plexus_importer_caught_up_sources"] == float64(sources) &&
		m["plexus_importer_queue_depth"] == 0 && m["plexus_importer_reconciles_running"] == 0 &&
		m["plexus_importer_unobserved_writes"] == 0, m["plexus_importer_writes_total"]
}

// waitCaughtUp waits until the importer has caught up with every source
// (see caughtUp) on two scrapes with no write in between, and returns its
// writes.
func (f *restartFleet) waitCaughtUp(tb testing.TB, limit time.Duration) float64 {
	tb.Helper()
	return f.waitCaughtUpWith(tb, len(f.srcs), limit)
}

// waitCaughtUpWith is waitCaughtUp with sources sources synced.
func (f *restartFleet) waitCaughtUpWith(tb testing.TB, sources int, limit time.Duration) float64 {
	tb.Helper()
	var writes float64
	if !assert.EventuallyWithT(tb, func(c *assert.CollectT) {
		ok, before := f.caughtUp(c, sources)
		require.True(c, ok, "caught up")
		again, after := f.caughtUp(c, sources)
		require.True(c, again && after == before, "still caught up, with no write between two scrapes")
		writes = after
	}, limit, 20*time.Millisecond) {
		require.FailNowf(tb, "importer not caught up", "after %s: %v\n%s", limit, scrape(tb, f.proc.HTTPAddr), f.proc.Log())
	}
	return writes
}

// An importer restarted in a running fleet, and a member's membership
// restarted under a running importer, write nothing: every slice,
// ServiceImport, derived Service, ServiceCIDR and ServiceExport keeps its
// resourceVersion, no object is written and put back meanwhile, the
// restarted importer counts no write once it has caught up, and it is
// ready (serving, every source synced) within 10 s. So does an importer
// restarted while a member is unreachable, when the member is back.
func TestRestartWritesNothing(t *testing.T) {
	const clusters, services, endpoints = 10, 20, 3
	f := startRestartFleet(t, clusters, services, endpoints)
	writes := kubetest.WatchWrites(t, f.e.cluster.Config, restartedResources...)
	unchanged := func(why string) {
		t.Helper()
		require.Empty(t, kubetest.Churn(writes.Settle(t), "default/plexus-importer"), "writes %s", why)
		require.Equal(t, kubetest.WithoutLeases(writes.Before), kubetest.WithoutLeases(writes.Versions(t)), "resourceVersions %s", why)
	}

	ready := f.restart(t)
	t.Logf("ready %s after the start", ready)
	require.Less(t, ready, 10*time.Second, "ready within 10 s")
	require.Zero(t, f.waitCaughtUp(t, 2*time.Minute), "the restarted importer wrote")
	unchanged("during the importer's restart")

	// A member's membership restarts: a new epoch, the same state, and a
	// complete snapshot to the importer.
	src := f.srcs[0]
	before := scrape(t, f.proc.HTTPAddr)["plexus_importer_writes_total"]
	src.Stop()
	f.waitSource(t, src.Cluster(), func(s *importerv1.Source) bool {
		return s.GetState() != importerv1.SourceState_SOURCE_STATE_CONNECTED
	})
	src.Restart(true)
	f.waitSource(t, src.Cluster(), func(s *importerv1.Source) bool {
		return s.GetState() == importerv1.SourceState_SOURCE_STATE_CONNECTED && s.GetSynced() && s.GetEpoch() == src.Epoch()
	})
	require.Equal(t, before, f.waitCaughtUp(t, 2*time.Minute), "the importer wrote after a membership restart")
	unchanged("after the membership's restart")

	// The importer restarts while a member is unreachable: that member's
	// slices stay as they are (its word is not final), and its imports
	// still name it. Before, every import lost the member from its status
	// and got it back when the member was heard from again.
	down := f.srcs[1]
	down.Stop()
	f.proc.Stop()
	f.proc.Restart()
	require.Zero(t, f.waitCaughtUpWith(t, clusters-1, 2*time.Minute), "the importer restarted without a member wrote")
	unchanged("while a member is unreachable")
	down.Restart(false)
	f.waitReady(t)
	require.Zero(t, f.waitCaughtUp(t, 2*time.Minute), "the importer wrote once the member was back")
	unchanged("once the member is back")
}

// BenchmarkRestart: one importer in a fleet of 100 simulated members × 100
// services × 5 endpoints (10,000 slices), restarted b.N times (stopped,
// started again with the same arguments). Each round also restarts one
// member's membership (a new epoch: a complete snapshot). It reports the
// medians over the rounds of:
//
//   - ready-s: the importer's start → ready (/readyz passes, its API
//     serves, ListSources shows all 100 sources synced);
//   - caught-up-s: start → every service queued knowing every source and
//     done (plexus_importer_caught_up_sources, an empty queue);
//   - member-resync-s: the membership's restart → its source synced again
//     with the new epoch;
//   - rss-MB, heap-MB: the importer's resident memory and Go heap in use
//     once caught up;
//
// and the most writes in any round (writes, member-writes: the importer's
// own count, and every write the API server saw, must be 0; the benchmark
// fails otherwise).
//
//	go test -run '^$' -bench Restart -benchtime 5x -timeout 60m ./services/importer/app/
func BenchmarkRestart(b *testing.B) {
	const clusters, services, endpoints = 100, 100, 5
	f := startRestartFleet(b, clusters, services, endpoints)
	writes := kubetest.WatchWrites(b, f.e.cluster.Config, restartedResources...)
	var ready, caughtUp, resync, rss, heap []float64
	var worst, memberWorst float64
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		ready = append(ready, f.restart(b).Seconds())
		worst = max(worst, f.waitCaughtUp(b, 5*time.Minute))
		caughtUp = append(caughtUp, time.Since(start).Seconds())
		u := f.proc.Usage()
		rss = append(rss, u.RSS/(1<<20))
		heap = append(heap, scrape(b, f.proc.HTTPAddr)["go_memstats_heap_inuse_bytes"]/(1<<20))

		src := f.srcs[i%clusters]
		before := scrape(b, f.proc.HTTPAddr)["plexus_importer_writes_total"]
		src.Stop()
		f.waitSource(b, src.Cluster(), func(s *importerv1.Source) bool {
			return s.GetState() != importerv1.SourceState_SOURCE_STATE_CONNECTED
		})
		restarted := time.Now()
		src.Restart(true)
		f.waitSource(b, src.Cluster(), func(s *importerv1.Source) bool {
			return s.GetState() == importerv1.SourceState_SOURCE_STATE_CONNECTED && s.GetSynced() && s.GetEpoch() == src.Epoch()
		})
		resync = append(resync, time.Since(restarted).Seconds())
		memberWorst = max(memberWorst, f.waitCaughtUp(b, 5*time.Minute)-before)
	}
	b.StopTimer()
	seen := kubetest.Churn(writes.Settle(b), "default/plexus-importer")
	require.Empty(b, seen, "writes the API server saw")
	require.Equal(b, kubetest.WithoutLeases(writes.Before), kubetest.WithoutLeases(writes.Versions(b)))
	require.Zero(b, worst, "the restarted importer wrote")
	require.Zero(b, memberWorst, "the importer wrote after a membership restart")
	b.ReportMetric(median(ready), "ready-s")
	b.ReportMetric(median(caughtUp), "caught-up-s")
	b.ReportMetric(median(resync), "member-resync-s")
	b.ReportMetric(median(rss), "rss-MB")
	b.ReportMetric(median(heap), "heap-MB")
	b.ReportMetric(worst, "writes")
	b.ReportMetric(memberWorst, "member-writes")
	b.ReportMetric(float64(len(seen)), "api-writes")
	b.Logf("per round: ready %v caught-up %v member-resync %v rss %v heap %v", ready, caughtUp, resync, rss, heap)
}

// median returns the median of xs.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
