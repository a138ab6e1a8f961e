package server

import (
	"math/big"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexusnet/plexus/services/allocator/allocation"
)

// Metrics are the allocator's own Prometheus metrics; the shared runtime
// adds the per-RPC ones.
type Metrics struct {
	latency       *prometheus.HistogramVec
	errors        *prometheus.CounterVec
	turnWait      prometheus.Histogram
	turnsTimedOut prometheus.Counter
	watches       prometheus.Gauge
	refusals      *prometheus.CounterVec
}

// NewMetrics registers the allocator's metrics, including per-pool gauges
// read from svc at scrape time.
func NewMetrics(reg prometheus.Registerer, svc *allocation.Allocator) *Metrics {
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
		turnWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "plexus_allocator_watch_turn_wait_seconds",
			Help:    "Time a watch waited for its turn to send its snapshot (a few watches send theirs at once).",
			Buckets: []float64{.001, .01, .1, .5, 1, 2.5, 5, 10, 30},
		}),
		turnsTimedOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "plexus_allocator_watch_turns_timed_out_total",
			Help: "Watches whose snapshot took longer than their turn (a slow reader or a big pool); each went on beside the others.",
		}),
		watches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "plexus_allocator_watches_open",
			Help: "Open WatchAllocations streams (at most --max-watches).",
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plexus_allocator_refusals_total",
			Help: "Calls refused because the caller may not touch the allocations they name (a member cluster's identity acting for another cluster, a shared identity once refused), by reason; each is also logged as \"call refused\".",
		}, []string{"reason"}),
	}
	reg.MustRegister(m.latency, m.errors, m.turnWait, m.turnsTimedOut, m.watches, m.refusals, &poolCollector{svc: svc})
	return m
}

var (
	capacityDesc   = prometheus.NewDesc("plexus_allocator_pool_capacity", "Addresses a pool can hand out.", []string{"pool"}, nil)
	allocatedDesc  = prometheus.NewDesc("plexus_allocator_pool_allocated", "Addresses allocated in a pool.", []string{"pool"}, nil)
	freeDesc       = prometheus.NewDesc("plexus_allocator_pool_free", "Addresses a pool can still hand out.", []string{"pool"}, nil)
	outOfRangeDesc = prometheus.NewDesc("plexus_allocator_pool_out_of_range", "Allocations outside their pool's CIDRs.", []string{"pool"}, nil)
	deletingDesc   = prometheus.NewDesc("plexus_allocator_pools_deleting",
		"Pools marked deleting: a forced deletion releasing their allocations in chunks, or one cut short (repair finishes those; plexusctl pool list shows which).", nil, nil)

	conflictsDesc = prometheus.NewDesc("plexus_allocator_store_conflicts_total",
		"Store commits that lost their transaction to a concurrent writer (another replica, or a concurrent request); the request was tried again or answered ABORTED.", nil, nil)
	watchRestartsDesc = prometheus.NewDesc("plexus_allocator_follow_watch_restarts_total",
		"Store watches of the follower (etcd store) that ended with an error and were started again.", nil, nil)
	rebuildsDesc = prometheus.NewDesc("plexus_allocator_follow_rebuilds_total",
		"Snapshots the follower (etcd store) took because the history it needed had been compacted away.", nil, nil)
	revisionDesc = prometheus.NewDesc("plexus_allocator_store_revision",
		"Store revision up to which this replica's in-memory state holds every commit (of every replica, on etcd); a replica that stays below the others is behind.", nil, nil)
)

// poolCollector reads pool statistics and the service's counters at
// scrape time, so the gauges are never stale and cost nothing between
// scrapes.
type poolCollector struct{ svc *allocation.Allocator }

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- capacityDesc
	ch <- allocatedDesc
	ch <- freeDesc
	ch <- outOfRangeDesc
	ch <- deletingDesc
	ch <- conflictsDesc
	ch <- watchRestartsDesc
	ch <- rebuildsDesc
	ch <- revisionDesc
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.svc.Counters()
	ch <- prometheus.MustNewConstMetric(conflictsDesc, prometheus.CounterValue, float64(n.Conflicts))
	ch <- prometheus.MustNewConstMetric(watchRestartsDesc, prometheus.CounterValue, float64(n.WatchRestarts))
	ch <- prometheus.MustNewConstMetric(rebuildsDesc, prometheus.CounterValue, float64(n.Rebuilds))
	ch <- prometheus.MustNewConstMetric(revisionDesc, prometheus.GaugeValue, float64(n.Revision))
	deleting := 0
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
		if v.Deleting {
			deleting++
		}
	}
	ch <- prometheus.MustNewConstMetric(deletingDesc, prometheus.GaugeValue, float64(deleting))
}
