package server_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
)

// sample returns the value of one series (name and labels exactly as
// exposed, e.g. `plexus_allocator_pool_free{pool="p"}`) of a Prometheus
// text exposition.
func sample(t *testing.T, exposition, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(exposition, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
			require.NoError(t, err, line)
			return v
		}
	}
	require.Failf(t, "series not exposed", "%s", series)
	return 0
}

func TestMetrics(t *testing.T) {
	e := start(t)
	e.createPool(t, "small", poolV4("10.0.0.0/29")) // six usable addresses
	e.createPool(t, "v6", poolV4("fd00::/64"))
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		e.allocate(t, "small", pod("ns", n))
	}
	e.allocate(t, "v6", pod("ns", "a"))
	_, err := e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/small", Owner: pod("ns", "g")})
	requireStatus(t, err, codes.ResourceExhausted, "POOL_EXHAUSTED", "")
	for range 2 {
		_, err = e.client.Release(ctx(t), &allocatorv1.ReleaseRequest{Pool: "pools/small", Owner: pod("ns", "a"), OwnerUid: "not-a"})
		requireStatus(t, err, codes.FailedPrecondition, "OWNER_MISMATCH", "")
	}

	m := httpGet(t, "http://"+e.httpAddr+"/metrics")
	require.Equal(t, 6.0, sample(t, m, `plexus_allocator_pool_capacity{pool="small"}`))
	require.Equal(t, 6.0, sample(t, m, `plexus_allocator_pool_allocated{pool="small"}`))
	require.Equal(t, 0.0, sample(t, m, `plexus_allocator_pool_free{pool="small"}`))
	require.Equal(t, 0.0, sample(t, m, `plexus_allocator_pool_out_of_range{pool="small"}`))
	require.Equal(t, 0.0, sample(t, m, `plexus_allocator_pools_deleting`))
	require.Equal(t, float64(uint64(1)<<63)*2, sample(t, m, `plexus_allocator_pool_capacity{pool="v6"}`))
	require.Equal(t, 1.0, sample(t, m, `plexus_allocator_pool_allocated{pool="v6"}`))

	// Every successful allocation is timed; failures are counted by reason.
	require.Equal(t, 6.0, sample(t, m, `plexus_allocator_allocation_duration_seconds_count{pool="small"}`))
	require.Equal(t, 6.0, sample(t, m, `plexus_allocator_allocation_duration_seconds_bucket{pool="small",le="+Inf"}`))
	require.Equal(t, 1.0, sample(t, m, `plexus_allocator_allocation_duration_seconds_count{pool="v6"}`))
	require.Equal(t, 1.0, sample(t, m, `plexus_allocator_errors_total{reason="POOL_EXHAUSTED"}`))
	require.Equal(t, 2.0, sample(t, m, `plexus_allocator_errors_total{reason="OWNER_MISMATCH"}`))

	// Alone on its store the allocator loses no transaction, follows
	// nothing, and its state holds its last commit (2 pools and 7
	// allocations).
	require.Equal(t, 0.0, sample(t, m, `plexus_allocator_store_conflicts_total`))
	require.Equal(t, 0.0, sample(t, m, `plexus_allocator_follow_watch_restarts_total`))
	require.Equal(t, 0.0, sample(t, m, `plexus_allocator_follow_rebuilds_total`))
	require.Equal(t, 9.0, sample(t, m, `plexus_allocator_store_revision`))

	// The shared runtime's per-RPC metrics carry the allocator's methods.
	require.Equal(t, 7.0, sample(t, m, `grpc_server_handled_total{grpc_code="OK",grpc_method="Allocate",grpc_service="plexus.allocator.v1.AllocatorService",grpc_type="unary"}`))
}

// TestFollowerRevisionMetric: a replica sharing its store exposes the
// revision its state has reached through the watch.
func TestFollowerRevisionMetric(t *testing.T) {
	e := start(t, withSharedStore(func(context.Context) (int64, error) { return 0, nil }))
	revision := func() float64 {
		return sample(t, httpGet(t, "http://"+e.httpAddr+"/metrics"), "plexus_allocator_store_revision")
	}
	require.Equal(t, 0.0, revision())
	e.createPool(t, "p", poolV4("10.0.0.0/29"))
	e.allocate(t, "p", pod("ns", "a"))
	require.Eventually(t, func() bool { return revision() == 2 }, 10*time.Second, 10*time.Millisecond)
}
