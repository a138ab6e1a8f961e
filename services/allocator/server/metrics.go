package server

import (
	"math/big"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexusnet/plexus/services/allocator/allocation"
)

// Metrics are the allocator's own Prometheus metrics; the shared runtime
// adds the per-RPC ones.
type Metrics struct {
	latency *prometheus.HistogramVec
	errors  *prometheus.CounterVec
}

// NewMetrics registers the allocator's metrics, including per-pool gauges
// read from svc at scrape time.
func NewMetrics(reg prometheus.Registerer, svc *allocation.Service) *Metrics {
	m := &Metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "plexus_allocator_allocation_duration_seconds",
			Help:    "Time to make one durable allocation, from request to reply.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"pool"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plexus_allocator_errors_total",
			Help: "Allocator errors by reason.",
		}, []string{"reason"}),
	}
	reg.MustRegister(m.latency, m.errors, &poolCollector{svc: svc})
	return m
}

var (
	capacityDesc   = prometheus.NewDesc("plexus_allocator_pool_capacity", "Addresses a pool can hand out.", []string{"pool"}, nil)
	allocatedDesc  = prometheus.NewDesc("plexus_allocator_pool_allocated", "Addresses allocated in a pool.", []string{"pool"}, nil)
	freeDesc       = prometheus.NewDesc("plexus_allocator_pool_free", "Addresses a pool can still hand out.", []string{"pool"}, nil)
	outOfRangeDesc = prometheus.NewDesc("plexus_allocator_pool_out_of_range", "Allocations outside their pool's CIDRs.", []string{"pool"}, nil)
)

// poolCollector reads pool statistics at scrape time, so the gauges are
// never stale and cost nothing between scrapes.
type poolCollector struct{ svc *allocation.Service }

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- capacityDesc
	ch <- allocatedDesc
	ch <- freeDesc
	ch <- outOfRangeDesc
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, id := range c.svc.Pools() {
		v, err := c.svc.GetPool(id)
		if err != nil {
			continue
		}
		capacity, _ := new(big.Float).SetInt(v.Stats.Capacity).Float64()
		free, _ := new(big.Float).SetInt(v.Stats.Free).Float64()
		ch <- prometheus.MustNewConstMetric(capacityDesc, prometheus.GaugeValue, capacity, id)
		ch <- prometheus.MustNewConstMetric(allocatedDesc, prometheus.GaugeValue, float64(v.Stats.Allocated), id)
		ch <- prometheus.MustNewConstMetric(freeDesc, prometheus.GaugeValue, free, id)
		ch <- prometheus.MustNewConstMetric(outOfRangeDesc, prometheus.GaugeValue, float64(v.Stats.OutOfRange), id)
	}
}
