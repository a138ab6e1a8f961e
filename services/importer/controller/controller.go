package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/exportpolicy"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/kube"
	"github.com/plexusnet/plexus/services/importer/reconcile"
	islices "github.com/plexusnet/plexus/services/importer/slices"
	"github.com/plexusnet/plexus/services/importer/vips"
)

// Defaults of a Controller.
const (
	DefaultWorkers     = 8
	DefaultSourceGrace = 5 * time.Minute
	// authorityPoll is how often the controller looks for sources that
	// became authoritative (synced, or past the grace).
	authorityPoll = time.Second
	// sweepPage is the page size of the start-up list of slices.
	sweepPage = 500
)

// Config configures a Controller.
type Config struct {
	// Store holds the exports; its notify function should call Changed.
	Store *exports.Store
	// Informers are the member cluster's caches; Tracker the record of the
	// writes; Writer makes them.
	Informers *kube.Informers
	Tracker   *kube.Tracker
	Writer    *kube.Writer
	// Kube lists slices from the API at start-up.
	Kube kubernetes.Interface
	// Allocator hands out the clusterset VIPs from VIPPools (one pool per
	// family, at most two). Without pools, a ClusterSetIP import carries
	// the derived Service's own cluster IPs.
	Allocator allocatorv1.AllocatorServiceClient
	VIPPools  []string
	// Guard, when set, is asked before every call to the allocator and
	// refuses it with an error: the leader's check that its lease is
	// still its own (the Writer has its own for the Kubernetes writes).
	Guard func() error
	// Packer packs endpoints into slices.
	Packer *islices.Packer
	// ClusterName is the member cluster's own name (see
	// reconcile.Config.ClusterName).
	ClusterName string
	// ManageServiceCIDRs: see reconcile.Config.ManageServiceCIDRs.
	ManageServiceCIDRs bool
	// Recorder emits Kubernetes Events; nil emits none.
	Recorder record.EventRecorder
	// Workers reconcile services concurrently; DefaultWorkers when 0.
	Workers int
	// SourceGrace is how long, from the start of a leadership term, the
	// slices of a source cluster the importer has not heard from are kept.
	SourceGrace time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
	// TracerProvider; nil uses the global one.
	TracerProvider trace.TracerProvider
	// Policy is the clusterset policy as this cluster holds it; nil
	// imports everything. A term starts once it has been read; call
	// PolicyChanged when it changes.
	Policy Policy
}

// Policy is the clusterset policy as the member cluster holds it.
type Policy interface {
	// Current returns the policy, nil for none.
	Current() *exportpolicy.Policy
	// HasSynced reports whether the policy has been read once.
	HasSynced() bool
}

// Controller reconciles imported services into the member cluster. Only a
// running controller (the leader's, see Run) writes; Status and Statuses
// answer on every replica.
type Controller struct {
	cfg     Config
	logger  *slog.Logger
	tracer  trace.Tracer
	metrics *metrics
	vips    *vips.Cache
	rec     *reconcile.Reconciler

	mu        sync.Mutex
	queue     workqueue.TypedRateLimitingInterface[exports.Key]
	termStart time.Time

	// running counts the reconciles in progress: with the queue's
	// length, what is left to do (a key added while it is reconciled
	// waits, uncounted by the queue, until its reconcile is done).
	running atomic.Int64
	// caughtUp counts the sources whose word was final when the term
	// last swept and queued every service.
	caughtUp atomic.Int64
}

// New returns a Controller.
func New(cfg Config) (*Controller, error) {
	if cfg.Store == nil || cfg.Informers == nil || cfg.Tracker == nil || cfg.Writer == nil || cfg.Kube == nil || cfg.Packer == nil {
		return nil, errors.New("controller: store, informers, tracker, writer, kube client and packer are required")
	}
	if len(cfg.VIPPools) > 2 {
		return nil, fmt.Errorf("controller: at most two VIP pools (one per family), got %d", len(cfg.VIPPools))
	}
	if len(cfg.VIPPools) > 0 && cfg.Allocator == nil {
		return nil, errors.New("controller: VIP pools need an allocator client")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.SourceGrace <= 0 {
		cfg.SourceGrace = DefaultSourceGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Recorder == nil {
		cfg.Recorder = &record.FakeRecorder{}
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	c := &Controller{
		cfg:    cfg,
		logger: cfg.Logger,
		tracer: tp.Tracer("github.com/plexusnet/plexus/services/importer/controller"),
		vips:   vips.New(cfg.Allocator, cfg.VIPPools, cfg.Guard),
	}
	rcfg := reconcile.Config{
		Store: cfg.Store, Informers: cfg.Informers, Tracker: cfg.Tracker, Writer: cfg.Writer, VIPs: c.vips,
		Packer: cfg.Packer, Recorder: cfg.Recorder, ClusterName: cfg.ClusterName, ManageServiceCIDRs: cfg.ManageServiceCIDRs, Logger: cfg.Logger, Tracer: c.tracer, Registerer: cfg.Registerer,
	}
	if cfg.Policy != nil {
		rcfg.Policy = cfg.Policy // a nil interface, not a typed nil, without one
	}
	rec, err := reconcile.New(rcfg)
	if err != nil {
		return nil, err
	}
	c.rec = rec
	if c.metrics, err = newMetrics(cfg.Registerer, c); err != nil {
		return nil, err
	}
	return c, nil
}

// Changed takes a change of the exports store (the store's notify
// function): the reconciler notes it for the service's next reconcile,
// which it queues.
func (c *Controller) Changed(ch exports.Change) {
	c.rec.Note(ch)
	c.Enqueue(ch.Key)
}

// Enqueue asks for a reconcile of key; it does nothing while the
// controller is not running (a new term reconciles everything anyway).
func (c *Controller) Enqueue(key exports.Key) {
	c.mu.Lock()
	q := c.queue
	c.mu.Unlock()
	if q != nil {
		q.Add(key)
	}
}

// EnqueueNamespace asks for a reconcile of every service of a namespace
// that just appeared.
func (c *Controller) EnqueueNamespace(ns string) {
	for _, k := range c.cfg.Store.Keys() {
		if k.Namespace == ns {
			c.Enqueue(k)
		}
	}
}

func (c *Controller) queueLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.queue == nil {
		return 0
	}
	return c.queue.Len()
}

// Running reports whether a term is running.
func (c *Controller) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queue != nil
}

// Run reconciles until term ends: it is one leadership term. It waits for
// the caches, removes orphaned slices (see the package documentation),
// reconciles every known service, then follows changes.
func (c *Controller) Run(term context.Context) error {
	if !c.cfg.Informers.WaitForSync(term) {
		return term.Err()
	}
	if c.cfg.Policy != nil && !cache.WaitForCacheSync(term.Done(), c.cfg.Policy.HasSynced) {
		// Reconciling before the policy is read would import what it
		// may refuse.
		return term.Err()
	}
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[exports.Key](10*time.Millisecond, time.Minute),
		workqueue.TypedRateLimitingQueueConfig[exports.Key]{Name: "importer"})
	c.mu.Lock()
	if c.queue != nil {
		c.mu.Unlock()
		q.ShutDown()
		return errors.New("controller: a term is already running")
	}
	c.queue, c.termStart = q, time.Now()
	c.mu.Unlock()
	// Each term asks the allocator again (once per service: it answers
	// an owner that holds its VIPs with those VIPs).
	c.vips.Reset()
	defer func() {
		c.mu.Lock()
		c.queue, c.termStart = nil, time.Time{}
		c.mu.Unlock()
	}()

	c.logger.Info("importer term started", "source_grace", c.cfg.SourceGrace, "workers", c.cfg.Workers)
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() { c.worker(term, q) })
	}
	c.enqueueAll()
	last, n := c.authority()
	c.sweepUntilDone(term)
	c.caughtUp.Store(int64(n))
	t := time.NewTicker(authorityPoll)
	defer t.Stop()
	for done := false; !done; {
		select {
		case <-term.Done():
			done = true
		case <-t.C:
			if a, n := c.authority(); a != last {
				c.logger.Info("source authority changed", "authoritative", a)
				last = a
				c.sweepUntilDone(term)
				c.enqueueAll()
				c.caughtUp.Store(int64(n))
			}
		}
	}
	c.caughtUp.Store(0)
	q.ShutDown()
	wg.Wait()
	c.rec.EndTerm()
	c.logger.Info("importer term ended")
	return nil
}

// PolicyChanged queues every service: the clusterset policy changed, and
// with it, maybe, what this cluster imports.
func (c *Controller) PolicyChanged() {
	if c.Running() {
		c.enqueueAll()
	}
}

// enqueueAll queues every service the controller knows of: exported ones,
// and those with objects in the member cluster.
func (c *Controller) enqueueAll() {
	seen := map[exports.Key]bool{}
	add := func(k exports.Key) {
		if !seen[k] {
			seen[k] = true
			c.Enqueue(k)
		}
	}
	for _, k := range c.cfg.Store.Keys() {
		add(k)
	}
	for _, k := range c.cfg.Informers.SliceServices() {
		add(k)
	}
	for _, si := range c.cfg.Informers.Imports() {
		add(exports.Key{Namespace: si.Namespace, Name: si.Name})
	}
}

// authority renders which clusters may lose slices: the synced sources,
// and every cluster once the grace has passed. n counts the sources among
// them.
func (c *Controller) authority() (a string, n int) {
	srcs := c.cfg.Store.Sources()
	if c.graceOver() {
		return "all", len(srcs)
	}
	var synced []string
	for name, st := range srcs {
		if st.Synced {
			synced = append(synced, name)
		}
	}
	slices.Sort(synced)
	return strings.Join(synced, ","), len(synced)
}

func (c *Controller) graceOver() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.termStart.IsZero() && time.Since(c.termStart) >= c.cfg.SourceGrace
}

// authoritative returns, as of now, whether what the importer knows of a
// cluster is the cluster's last word, so that slices it does not ask for
// are orphans: a configured source once it delivered a snapshot in this
// process, any other cluster (a source never reached, a cluster that pushed
// before a restart) once the grace has passed.
//
// The answer is fixed when authoritative is called, and it must be called
// before the exports it judges are read: a snapshot sets a source's exports
// and marks it synced at once, so a source synced by then has its exports
// in what is read after. Asked later, a source whose snapshot landed in
// between would count as final on exports read before it, and its live
// slices would be deleted as orphans and written again (a restarted
// importer did that to every service whose reconcile overlapped a
// source's snapshot).
func (c *Controller) authoritative() func(cluster string) bool {
	if c.graceOver() {
		return func(string) bool { return true }
	}
	srcs := c.cfg.Store.Sources()
	return func(cluster string) bool {
		st, ok := srcs[cluster]
		return ok && st.Synced
	}
}

// sweepUntilDone runs the orphan sweep, retrying while the API cannot be
// listed.
func (c *Controller) sweepUntilDone(term context.Context) {
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 10*time.Second) {
		err := c.sweep(term)
		if err == nil || term.Err() != nil {
			return
		}
		c.logger.Warn("orphan sweep failed; retrying", "error", err, "retry_in", backoff)
		select {
		case <-term.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// sweep lists the importer's slices from the API, not from the cache, and
// deletes those of an authoritative cluster that no export asks for. It
// queues every service it finds, so their ServiceImports and derived
// Services are put right too.
func (c *Controller) sweep(ctx context.Context) error {
	ctx, span := c.tracer.Start(ctx, "importer.sweep")
	defer span.End()
	var deleted, kept int
	opts := metav1.ListOptions{LabelSelector: kube.SliceSelector(), Limit: sweepPage}
	for {
		list, err := c.cfg.Kube.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return fmt.Errorf("list the importer's EndpointSlices: %w", err)
		}
		final := c.authoritative() // before the exports are read
		for i := range list.Items {
			s := &list.Items[i]
			switch c.orphan(s, final) {
			case orphanDelete:
				key := exports.Key{Namespace: s.Namespace, Name: s.Labels[mcsnames.LabelMCSServiceName]}
				if err := c.cfg.Writer.DeleteSlice(ctx, key, s); err != nil {
					c.logger.Warn("orphaned slice not deleted", "slice", s.Namespace+"/"+s.Name, "error", err)
					kept++
				} else {
					deleted++
					c.metrics.orphans.Inc()
					c.logger.Info("orphaned slice deleted", "slice", s.Namespace+"/"+s.Name,
						"service", key, "cluster", s.Labels[mcsnames.LabelSourceCluster])
				}
				c.Enqueue(key)
			case orphanWait:
				kept++
			case orphanNo:
				c.Enqueue(exports.Key{Namespace: s.Namespace, Name: s.Labels[mcsnames.LabelMCSServiceName]})
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	if deleted > 0 || kept > 0 {
		c.logger.Info("orphan sweep done", "deleted", deleted, "waiting_for_sources", kept)
	}
	return nil
}

type orphanVerdict int

const (
	orphanNo orphanVerdict = iota
	orphanDelete
	orphanWait
)

func (c *Controller) orphan(s *discovery.EndpointSlice, final func(cluster string) bool) orphanVerdict {
	name, cluster := s.Labels[mcsnames.LabelMCSServiceName], s.Labels[mcsnames.LabelSourceCluster]
	if name == "" || cluster == "" {
		// Not one the importer made, whatever its manager label says.
		return orphanWait
	}
	if svc, ok := c.cfg.Store.Get(exports.Key{Namespace: s.Namespace, Name: name}); ok {
		if _, ok := svc.Export(cluster); ok {
			return orphanNo
		}
	}
	if !final(cluster) {
		return orphanWait
	}
	return orphanDelete
}

// namespaceTerminating reports whether err, wrapped or not, is the API
// server refusing to create in a namespace being deleted.
func namespaceTerminating(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status) && apierrors.HasStatusCause(status.(error), corev1.NamespaceTerminatingCause)
}

// conflict reports whether err, wrapped or not, and alone, is the API
// server refusing a write made against an older resourceVersion.
func conflict(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status) && apierrors.IsConflict(status.(error)) && !multiple(err)
}

// multiple reports whether err joins several errors, of which a conflict
// would be only one.
func multiple(err error) bool {
	j, ok := err.(interface{ Unwrap() []error })
	return ok && len(j.Unwrap()) > 1
}

// namespaceTerminatingRetry is how long a service waits for its
// terminating namespace to go before it is reconciled again.
const namespaceTerminatingRetry = 2 * time.Second

func (c *Controller) worker(ctx context.Context, q workqueue.TypedRateLimitingInterface[exports.Key]) {
	for {
		key, shutdown := q.Get()
		if shutdown {
			return
		}
		c.running.Add(1)
		func() {
			// Uncounted only once Done has put the key back, if it was
			// added meanwhile: the queue or running always shows it.
			defer c.running.Add(-1)
			defer q.Done(key)
			start := time.Now()
			// The authority is read before the reconcile reads the
			// exports (see authoritative).
			after, err := c.rec.Reconcile(ctx, key, c.authoritative())
			result := "ok"
			switch {
			case err != nil && ctx.Err() != nil:
				result = "canceled"
			case err != nil && namespaceTerminating(err):
				// Nothing is wrong: the namespace goes, and with it what
				// the importer would write; once it is gone the service is
				// reconciled as one whose namespace does not exist.
				result = "requeued"
				c.logger.Debug("namespace terminating; waiting for it to go", "service", key)
				q.Forget(key)
				q.AddAfter(key, namespaceTerminatingRetry)
			case err != nil && conflict(err):
				// Another writer (membership on a ServiceExport's status)
				// changed the object first: the retry reads it again.
				result = "error"
				c.logger.Debug("write conflicted with another writer; retrying", "service", key, "error", err)
				q.AddRateLimited(key)
			case err != nil:
				result = "error"
				c.logger.Warn("reconcile failed; retrying", "service", key, "error", err, "retries", q.NumRequeues(key))
				q.AddRateLimited(key)
			case after > 0:
				result = "requeued"
				q.Forget(key)
				q.AddAfter(key, after)
			default:
				q.Forget(key)
			}
			c.metrics.reconcile.WithLabelValues(result).Observe(time.Since(start).Seconds())
		}()
	}
}

// metrics are the controller's Prometheus metrics.
type metrics struct {
	reconcile *prometheus.HistogramVec
	orphans   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, c *Controller) (*metrics, error) {
	m := &metrics{
		reconcile: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "plexus_importer_reconcile_duration_seconds",
			Help:    "Time to reconcile one service, by result (ok, requeued, error, canceled).",
			Buckets: prometheus.ExponentialBuckets(.0005, 2.5, 14),
		}, []string{"result"}),
		orphans: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "plexus_importer_orphaned_slices_deleted_total",
			Help: "EndpointSlices deleted by the start-up sweep because no source asks for them.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "plexus_importer_queue_depth",
		Help: "Services waiting to be reconciled.",
	}, func() float64 { return float64(c.queueLen()) })
	running := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "plexus_importer_reconciles_running",
		Help: "Services being reconciled now; with the queue depth, the importer is idle when both are 0.",
	}, func() float64 { return float64(c.running.Load()) })
	imports := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "plexus_importer_services",
		Help: "Services exported by at least one source cluster.",
	}, func() float64 { return float64(c.cfg.Store.Len()) })
	caughtUp := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "plexus_importer_caught_up_sources",
		Help: "Sources whose complete state the leader held when it last swept orphans and queued every service; once it equals the number of sources and the queue is empty, the term has caught up with all of them (0 on followers).",
	}, func() float64 { return float64(c.caughtUp.Load()) })
	for _, col := range []prometheus.Collector{m.reconcile, m.orphans, depth, running, imports, caughtUp} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("register controller metrics: %w", err)
		}
	}
	return m, nil
}

// Status returns the import of key as this replica sees it; false when no
// cluster exports it and no ServiceImport of the importer's exists for it.
func (c *Controller) Status(key exports.Key) (reconcile.Status, bool) { return c.rec.Status(key) }

// Keys returns the imports of a namespace (every namespace when empty),
// sorted.
func (c *Controller) Keys(namespace string) []exports.Key { return c.rec.Keys(namespace) }
