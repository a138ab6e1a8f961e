// Package reconcile runs one reconcile of one imported service: it reads
// the service's view from the exports store and the member cluster's
// caches, asks the pure core (package materialize) what to write, makes the
// writes through the Kubernetes adapter (package kube), and records the
// outcome, from which the ServiceImport's status and the gRPC API's answer
// are built. The loop around it (workqueue, leadership term, orphan sweep)
// is package controller.
//
// A cluster whose slice writes fail does not stop the others: its last
// good slices stay, the import's Ready condition says
// EndpointSlicesNotWritten and names it (with an Event and
// plexus_importer_cluster_write_failures_total), and a write the API
// server refused as invalid waits for the cluster's next change instead of
// being retried. Endpoints the API server would refuse are left out by the
// packer (EndpointsDropped, plexus_importer_dropped_endpoints_total).
package reconcile

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/record"

	"github.com/plexusnet/plexus/internal/exportpolicy"
	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/kube"
	"github.com/plexusnet/plexus/services/importer/materialize"
	islices "github.com/plexusnet/plexus/services/importer/slices"
	"github.com/plexusnet/plexus/services/importer/vips"
)

// staleRetry is when a service whose cache is older than its last write is
// looked at again if no informer event comes first.
const staleRetry = time.Second

// Config configures a Reconciler.
type Config struct {
	// Store holds the exports.
	Store *exports.Store
	// Informers are the member cluster's caches; Tracker the record of the
	// writes; Writer makes them.
	Informers *kube.Informers
	Tracker   *kube.Tracker
	Writer    *kube.Writer
	// VIPs hands out the clusterset VIPs.
	VIPs *vips.Cache
	// Packer packs endpoints into slices.
	Packer *islices.Packer
	// ClusterName is the member cluster's own name: when it exports a
	// service too, its ServiceExport carries the import's Conflict
	// condition. Empty writes none.
	ClusterName string
	// ManageServiceCIDRs lets the importer create ServiceCIDRs for the VIP
	// pools' ranges when the API server refuses a VIP as a cluster IP.
	ManageServiceCIDRs bool
	// Recorder emits Kubernetes Events.
	Recorder record.EventRecorder
	Logger   *slog.Logger
	Tracer   trace.Tracer
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
	// Policy is the clusterset policy as this cluster holds it; nil
	// imports everything.
	Policy Policy
}

// Policy is the clusterset policy as the member cluster holds it.
type Policy interface {
	// Current returns the policy, nil for none.
	Current() *exportpolicy.Policy
}

// Reconciler reconciles one service at a time; any number of goroutines
// may call it for different services.
type Reconciler struct {
	cfg     Config
	logger  *slog.Logger
	tracer  trace.Tracer
	metrics *metrics

	// changes are the exports' changes not yet written, per service.
	changes changes

	mu    sync.Mutex
	local map[exports.Key]*local
	// refusedSeen is, per service, the refusals of the clusterset policy
	// last logged and counted (noteRefused), so that a refusal is told
	// once when it takes effect, not at every look.
	refusedSeen map[exports.Key]string
}

// Note records a change of the exports store for the service's next
// reconcile: the latency of its write is measured from it, the reconcile's
// span links to its trace, and a withdrawal in it is the cluster's last
// word about the service.
func (c *Reconciler) Note(ch exports.Change) { c.changes.note(ch) }

// EndTerm forgets the changes not yet written: the leadership term that
// would have written them has ended, and the next term reconciles every
// service from what it reads then (measuring from changes it notes itself,
// not from ones another leader wrote meanwhile).
func (c *Reconciler) EndTerm() { c.changes.reset() }

// local is what only the reconciling replica knows about a service.
type local struct {
	reconciled time.Time
	// outcome is what the last reconcile of the materialised import wrote,
	// and written the slices it left each cluster with (which the cache
	// may not show yet).
	outcome *materialize.Outcome
	written map[string][]*discovery.EndpointSlice
	// problem is what holds the service back, when something does.
	problem *materialize.Condition
	// planned are the clusters whose last plan asked for no writes, and
	// what it was planned from: the same inputs plan nothing again.
	planned map[string]planStamp
	// localFirst: the last reconcile kept traffic on local endpoints.
	localFirst bool
}

// New returns a Reconciler.
func New(cfg Config) (*Reconciler, error) {
	if cfg.Store == nil || cfg.Informers == nil || cfg.Tracker == nil || cfg.Writer == nil || cfg.VIPs == nil ||
		cfg.Packer == nil || cfg.Recorder == nil || cfg.Logger == nil || cfg.Tracer == nil {
		return nil, errors.New("reconcile: every part of the config is required")
	}
	m, err := newMetrics(cfg.Registerer, cfg.Tracker)
	if err != nil {
		return nil, err
	}
	return &Reconciler{cfg: cfg, logger: cfg.Logger, tracer: cfg.Tracer, metrics: m, local: map[exports.Key]*local{}, refusedSeen: map[exports.Key]string{}}, nil
}

func (c *Reconciler) localOf(key exports.Key) *local {
	l := c.local[key]
	if l == nil {
		l = &local{}
		c.local[key] = l
	}
	return l
}

// metrics are the reconciles' Prometheus metrics.
type metrics struct {
	latency         prometheus.Histogram
	stale           prometheus.Counter
	dropped         *prometheus.CounterVec
	clusterFailures *prometheus.CounterVec
	plansSkipped    prometheus.Counter
	localFirst      *prometheus.CounterVec
	refused         *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, tracker *kube.Tracker) (*metrics, error) {
	m := &metrics{
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "plexus_importer_export_import_duration_seconds",
			Help: "From the observation of an export change at the source to the last EndpointSlice write for it in this cluster.",
			Buckets: []float64{.005, .01, .02, .03, .05, .075, .1, .15, .2, .3, .5, .75,
				1, 2, 5, 10, 30, 60, 300},
		}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "plexus_importer_stale_cache_total",
			Help: "Reconciles put off because the cache was older than the importer's own last write.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plexus_importer_dropped_endpoints_total",
			Help: "Exported endpoints left out of the slices because the API server would refuse them (invalid, no_addresses), they repeat another (duplicate) or lie outside the ranges their cluster declares (out_of_range); counted when what a cluster's plan leaves out changes.",
		}, []string{"reason"}),
		clusterFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plexus_importer_cluster_write_failures_total",
			Help: "Reconciles in which a source cluster's slice writes failed; the other clusters' slices were still written.",
		}, []string{"cluster"}),
		plansSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "plexus_importer_cluster_plans_skipped_total",
			Help: "Source clusters' slices not planned again in a reconcile because their export, derived Service and slices were those of a plan with nothing to write.",
		}),
		localFirst: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plexus_importer_local_first_transitions_total",
			Help: "Imports with local first whose traffic moved to this cluster's own endpoints (to=local) or, with fewer ready local endpoints than asked, to every cluster's (to=failover).",
		}, []string{"to"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plexus_importer_policy_refusals_total",
			Help: "Reconciles that removed or kept out a source cluster's export because the clusterset policy refuses it, by reason (ImportNotPermitted, ExportNotPermitted).",
		}, []string{"reason"}),
	}
	if reg == nil {
		return m, nil
	}
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "plexus_importer_unobserved_writes",
		Help: "The importer's writes not yet seen in its informer caches.",
	}, func() float64 { return float64(tracker.Len()) })
	for _, col := range []prometheus.Collector{m.latency, m.stale, m.dropped, m.clusterFailures, m.plansSkipped, m.localFirst, m.refused, pending} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("register reconcile metrics: %w", err)
		}
	}
	return m, nil
}
