package e2e_test

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/apierr"
)

// scrape returns the allocator's Prometheus exposition as series -> value.
func scrape(t *testing.T, httpAddr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		out[line[:i]] = v
	}
	return out
}

func TestMetricsOfTheRunningAllocator(t *testing.T) {
	a := startAllocator(t, "--store=bolt:"+filepath.Join(t.TempDir(), "metrics.db"))
	c := a.client(t)
	for id, cidr := range map[string]string{"tiny": "10.40.0.0/29", "wide": "fd00:40::/64"} {
		_, err := c.CreatePool(callCtx(t), &allocatorv1.CreatePoolRequest{PoolId: id, Pool: &allocatorv1.Pool{Cidrs: []string{cidr}}})
		require.NoError(t, err)
	}
	for i := range 7 {
		_, err := c.Allocate(callCtx(t), &allocatorv1.AllocateRequest{Pool: "pools/tiny", Owner: &allocatorv1.Owner{Kind: "Pod", Name: fmt.Sprint("p", i)}})
		if i < 6 {
			require.NoError(t, err)
			continue
		}
		require.Equal(t, codes.ResourceExhausted, status.Code(err))
		require.Equal(t, "POOL_EXHAUSTED", apierr.Reason(err))
	}
	for i := range 3 {
		_, err := c.Allocate(callCtx(t), &allocatorv1.AllocateRequest{Pool: "pools/wide", Owner: &allocatorv1.Owner{Kind: "Pod", Name: fmt.Sprint("p", i)}})
		require.NoError(t, err)
	}
	_, err := c.Allocate(callCtx(t), &allocatorv1.AllocateRequest{Pool: "pools/wide", Owner: &allocatorv1.Owner{Kind: "Pod", Name: "x"}, Address: "fd00:41::1"})
	require.Equal(t, "ADDRESS_OUT_OF_RANGE", apierr.Reason(err))

	m := scrape(t, a.httpAddr)
	want := map[string]float64{
		`plexus_allocator_pool_capacity{pool="tiny"}`:                                6,
		`plexus_allocator_pool_allocated{pool="tiny"}`:                               6,
		`plexus_allocator_pool_free{pool="tiny"}`:                                    0,
		`plexus_allocator_pool_capacity{pool="wide"}`:                                18446744073709551616,
		`plexus_allocator_pool_allocated{pool="wide"}`:                               3,
		`plexus_allocator_pool_out_of_range{pool="wide"}`:                            0,
		`plexus_allocator_allocation_duration_seconds_count{pool="tiny"}`:            6,
		`plexus_allocator_allocation_duration_seconds_bucket{pool="wide",le="+Inf"}`: 3,
		`plexus_allocator_errors_total{reason="POOL_EXHAUSTED"}`:                     1,
		`plexus_allocator_errors_total{reason="ADDRESS_OUT_OF_RANGE"}`:               1,
		`grpc_server_handled_total{grpc_code="ResourceExhausted",grpc_method="Allocate",grpc_service="plexus.allocator.v1.AllocatorService",grpc_type="unary"}`: 1,
	}
	for series, v := range want {
		got, ok := m[series]
		require.True(t, ok, "%s not exposed", series)
		require.Equal(t, v, got, series)
	}
	// Durable allocations take time: the latency sum is positive and the
	// histogram has the documented buckets.
	require.Positive(t, m[`plexus_allocator_allocation_duration_seconds_sum{pool="tiny"}`])
	require.Contains(t, m, `plexus_allocator_allocation_duration_seconds_bucket{pool="tiny",le="0.001"}`)
	require.Contains(t, m, `plexus_allocator_allocation_duration_seconds_bucket{pool="tiny",le="0.025"}`)
}
