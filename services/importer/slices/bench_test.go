package slices

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	discovery "k8s.io/api/discovery/v1"
)

// BenchmarkPlan measures one reconcile of a service whose slices exist,
// for a single readiness flip and for a 10 % rolling replacement.
func BenchmarkPlan(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		p, err := New()
		require.NoError(b, err)
		all := eps(0, n)
		first, err := p.Plan(testTemplate(), []Group{v4(all)}, nil)
		require.NoError(b, err)
		c := newCluster()
		c.apply(b, first)
		existing := c.list()

		flip := []Group{v4(append(copyEndpoints(all[:n-1]), withReady(all[n-1], false)))}
		replace := []Group{v4(all[n/10:], eps(n, n+n/10))}
		for _, tc := range []struct {
			name    string
			desired []Group
		}{{"flip", flip}, {"replace10pct", replace}} {
			b.Run(tc.name+"/endpoints="+strconv.Itoa(n), func(b *testing.B) {
				var writes int
				b.ReportAllocs()
				for b.Loop() {
					plan, err := p.Plan(testTemplate(), tc.desired, existing)
					if err != nil {
						b.Fatal(err)
					}
					writes = plan.Writes()
				}
				b.ReportMetric(float64(writes), "writes/plan")
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "endpoints/s")
			})
		}
	}
}

// BenchmarkPlanFromScratch measures packing a large service into no slices.
func BenchmarkPlanFromScratch(b *testing.B) {
	p, err := New()
	require.NoError(b, err)
	desired := []Group{v4(eps(0, 10000))}
	var slices int
	for b.Loop() {
		plan, err := p.Plan(testTemplate(), desired, []*discovery.EndpointSlice{})
		if err != nil {
			b.Fatal(err)
		}
		slices = len(plan.Create)
	}
	b.ReportMetric(float64(slices), "slices")
}
