package controller

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	"github.com/plexusnet/plexus/internal/exportpolicy"
	"github.com/plexusnet/plexus/services/membership/endpoints"
	"github.com/plexusnet/plexus/services/membership/kube"
	"github.com/plexusnet/plexus/services/membership/selector"
	"github.com/plexusnet/plexus/services/membership/watch"
)

// Hub is the hub the Controller publishes endpoint sets to.
type Hub = watch.Hub[*membershipv1.ServiceEndpoints]

// maxRetries bounds how often a failing Service is retried before it is
// dropped until its next change.
const maxRetries = 10

// Options configure a Controller.
type Options struct {
	// ClusterName stamps every endpoint set.
	ClusterName string
	// Workers is the number of Services reconciled at once (default 4).
	Workers int
	// BatchPeriod delays the reconcile of a changed Service so that the
	// changes of a burst are published as one event, like the EndpointSlice
	// controller's --endpointslice-updates-batch-period. 0 reconciles as
	// soon as a worker is free.
	BatchPeriod time.Duration
	// Resync is the informers' resync period; 0 turns resyncs off, which
	// is right here: every change arrives as an event and the reconcile
	// reads nothing but the caches.
	Resync time.Duration
	// IgnoredNamespaces are namespaces whose Services and workloads are
	// disregarded.
	IgnoredNamespaces []string
	// Logger receives the controller's logs (default slog.Default).
	Logger *slog.Logger
	// TracerProvider makes the observe and reconcile spans (default the
	// global one).
	TracerProvider trace.TracerProvider
	// Propagator writes the trace context into events (default the global
	// one).
	Propagator propagation.TextMapPropagator
	// Registerer, when set, receives the controller's metrics.
	Registerer prometheus.Registerer
	// Policy is the clusterset policy, which may refuse the cluster's
	// exports of a namespace; nil permits every export. Call
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

// Controller keeps the endpoint set of every Service in a Hub, from shared
// informers over Services, Pods, Nodes, ServiceExports and
// ExternalWorkloads.
type Controller struct {
	opts   Options
	logger *slog.Logger
	tracer trace.Tracer
	hub    *Hub
	index  *selector.Index

	// caches are the cluster's objects as the informers hold them, and
	// the writer of ServiceExport status.
	caches *kube.Caches

	queue workqueue.TypedRateLimitingInterface[selector.ServiceKey]
	mu    sync.Mutex
	// observed holds, per queued Service, the earliest change not yet
	// reconciled.
	observed map[selector.ServiceKey]observation
	// initial holds the Services found at start-up that have not been
	// reconciled yet; the controller is synced once it is empty.
	initial map[selector.ServiceKey]struct{}
	synced  chan struct{}

	metrics metrics
}

type observation struct {
	at   time.Time
	span trace.SpanContext
}

type metrics struct {
	reconcile *prometheus.HistogramVec
	latency   prometheus.Histogram
}

// New builds a Controller over the clients; Run starts it. workloads is a
// REST client of the ExternalWorkload API (see package
// api/workload/v1alpha1/client).
func New(kubeClient kubernetes.Interface, mcs mcsclient.Interface, workloads rest.Interface, hub *Hub, opts Options) (*Controller, error) {
	opts = opts.withDefaults()
	c := &Controller{
		opts:     opts,
		logger:   opts.Logger,
		tracer:   opts.TracerProvider.Tracer("github.com/plexusnet/plexus/services/membership/controller"),
		hub:      hub,
		index:    selector.New(selector.WithIgnoredNamespaces(opts.IgnoredNamespaces...)),
		observed: map[selector.ServiceKey]observation{},
		synced:   make(chan struct{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[selector.ServiceKey](),
			workqueue.TypedRateLimitingQueueConfig[selector.ServiceKey]{Name: "membership_services"}),
		metrics: newMetrics(),
	}
	if err := c.registerMetrics(opts.Registerer); err != nil {
		return nil, err
	}
	var err error
	c.caches, err = kube.NewCaches(kubeClient, mcs, workloads, opts.Resync, kube.Handlers{
		Service: c.serviceChanged, Pod: c.podChanged, Node: c.nodeChanged,
		Export: c.exportChanged, ExternalWorkload: c.externalWorkloadChanged,
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// withDefaults fills in what was left unset.
func (o Options) withDefaults() Options {
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.Propagator == nil {
		o.Propagator = otel.GetTextMapPropagator()
	}
	return o
}

func newMetrics() metrics {
	return metrics{
		reconcile: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "plexus_membership_reconcile_duration_seconds",
			Help:    "Time to recompute one Service's endpoint set, by result (changed, unchanged, deleted, error).",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}, []string{"result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "plexus_membership_change_latency_seconds",
			Help:    "Time from observing a change to publishing the endpoint set that holds it.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
	}
}

// registerMetrics registers the metrics and the queue's depth on r, when
// there is one.
func (c *Controller) registerMetrics(r prometheus.Registerer) error {
	if r == nil {
		return nil
	}
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "plexus_membership_queue_depth",
		Help: "Services waiting to be reconciled.",
	}, func() float64 { return float64(c.queue.Len()) })
	return registerAll(r, c.metrics.reconcile, c.metrics.latency, depth)
}

func registerAll(r prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, col := range cs {
		if err := r.Register(col); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	return nil
}

// Caches returns the controller's informer caches, for other users of the
// same objects (the registry's address book, the heartbeat sweeper). Run
// runs them.
func (c *Controller) Caches() *kube.Caches { return c.caches }

// Synced is closed once the caches have synced and every Service found at
// start-up has its endpoint set in the Hub: only then is a snapshot
// complete.
func (c *Controller) Synced() <-chan struct{} { return c.synced }

// IsSynced reports whether Synced is closed.
func (c *Controller) IsSynced() bool {
	select {
	case <-c.synced:
		return true
	default:
		return false
	}
}

// Run starts the informers, waits for their caches, reconciles until ctx
// ends, then stops everything it started.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	defer c.caches.Start(ctx)()

	start := time.Now()
	synced := c.caches.Synced()
	if c.opts.Policy != nil {
		// An export published before the policy is read could be one it
		// refuses.
		synced = append(synced, c.opts.Policy.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("informers did not sync: %w", context.Cause(ctx))
	}
	if err := c.startInitial(); err != nil {
		return err
	}
	c.logger.Info("informer caches synced", "took", time.Since(start).Round(time.Millisecond),
		"services", len(c.initial), "workers", c.opts.Workers)

	var wg sync.WaitGroup
	for range c.opts.Workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// startInitial records the Services to reconcile before the controller
// counts as synced. Their add events queued them already; the workers have
// not started yet, so none of them can be missed.
func (c *Controller) startInitial() error {
	svcs, err := c.caches.Services.List(labelsEverything)
	if err != nil {
		return fmt.Errorf("list services from cache: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.initial = make(map[selector.ServiceKey]struct{}, len(svcs))
	for _, s := range svcs {
		if !c.index.Ignored(s.Namespace) {
			c.initial[selector.ServiceKey{Namespace: s.Namespace, Name: s.Name}] = struct{}{}
		}
	}
	if len(c.initial) == 0 {
		close(c.synced)
	}
	return nil
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	err := c.sync(ctx, key)
	switch {
	case err == nil:
		c.queue.Forget(key)
		c.reconciled(key)
	case c.queue.NumRequeues(key) < maxRetries:
		c.logger.Warn("reconcile failed, retrying", "service", key.Namespace+"/"+key.Name, "error", err)
		c.queue.AddRateLimited(key)
	default:
		c.logger.Error("reconcile failed, giving up until the service changes again",
			"service", key.Namespace+"/"+key.Name, "error", err)
		c.queue.Forget(key)
		c.takeObservation(key)
		c.reconciled(key)
	}
	return true
}

// reconciled ticks a Service off the start-up list.
func (c *Controller) reconciled(key selector.ServiceKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.initial == nil {
		return
	}
	if _, ok := c.initial[key]; !ok {
		return
	}
	delete(c.initial, key)
	if len(c.initial) == 0 {
		close(c.synced)
	}
}

// observe records that a change of a workload or Service affects keys, with
// a span marking the moment, and queues them.
func (c *Controller) observe(kind, namespace, name string, keys []selector.ServiceKey) {
	if len(keys) == 0 {
		return
	}
	now := time.Now()
	_, span := c.tracer.Start(context.Background(), "membership.observe",
		trace.WithTimestamp(now),
		trace.WithAttributes(
			attribute.String("k8s.kind", kind),
			attribute.String("k8s.namespace", namespace),
			attribute.String("k8s.name", name),
			attribute.Int("membership.affected_services", len(keys)),
		))
	span.End()
	o := observation{at: now, span: span.SpanContext()}
	c.mu.Lock()
	for _, k := range keys {
		if _, ok := c.observed[k]; !ok {
			c.observed[k] = o
		}
	}
	c.mu.Unlock()
	for _, k := range keys {
		if c.opts.BatchPeriod > 0 {
			// A Service already waiting keeps its earlier time, so the
			// window starts with the first change of a burst.
			c.queue.AddAfter(k, c.opts.BatchPeriod)
		} else {
			c.queue.Add(k)
		}
	}
}

func (c *Controller) takeObservation(k selector.ServiceKey) observation {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.observed[k]
	delete(c.observed, k)
	return o
}

// restoreObservation puts back the observation of a failed reconcile, unless
// one that is older still is waiting: the earliest unreconciled change is
// the one to report.
func (c *Controller) restoreObservation(k selector.ServiceKey, o observation) {
	if o.at.IsZero() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.observed[k]; !ok || o.at.Before(cur.at) {
		c.observed[k] = o
	}
}

func (c *Controller) serviceChanged(old, svc *corev1.Service) {
	s := svc
	if s == nil {
		s = old
	}
	if c.index.Ignored(s.Namespace) {
		return
	}
	if old != nil && svc != nil && old.ResourceVersion == svc.ResourceVersion {
		return // resync
	}
	if svc != nil {
		c.index.SetService(svc.Namespace, svc.Name, svc.Spec.Selector)
	} else {
		c.index.DeleteService(old.Namespace, old.Name)
	}
	c.observe("Service", s.Namespace, s.Name, []selector.ServiceKey{{Namespace: s.Namespace, Name: s.Name}})
}

// PolicyChanged queues every exported Service: the clusterset policy
// changed, and with it, maybe, which of them the cluster may export.
func (c *Controller) PolicyChanged() {
	exports, err := c.caches.Exports.List(labelsEverything)
	if err != nil {
		c.logger.Error("list service exports from cache", "error", err)
		return
	}
	keys := make([]selector.ServiceKey, 0, len(exports))
	for _, e := range exports {
		if !c.index.Ignored(e.Namespace) {
			keys = append(keys, selector.ServiceKey{Namespace: e.Namespace, Name: e.Name})
		}
	}
	c.observe("ClusterSetPolicy", "", "clusterset", keys)
}

func (c *Controller) exportChanged(old, export *mcsv1beta1.ServiceExport) {
	e := export
	if e == nil {
		e = old
	}
	if c.index.Ignored(e.Namespace) || (old != nil && export != nil && old.ResourceVersion == export.ResourceVersion) {
		return
	}
	c.observe("ServiceExport", e.Namespace, e.Name, []selector.ServiceKey{{Namespace: e.Namespace, Name: e.Name}})
}

func (c *Controller) podChanged(old, pod *corev1.Pod) {
	var prev, next *selector.Workload
	if old != nil {
		w := kube.PodWorkload(old, c.caches.Zone(old.Spec.NodeName))
		prev = &selector.Workload{Namespace: old.Namespace, Labels: old.Labels, Fingerprint: w.Fingerprint()}
	}
	if pod != nil {
		w := kube.PodWorkload(pod, c.caches.Zone(pod.Spec.NodeName))
		next = &selector.Workload{Namespace: pod.Namespace, Labels: pod.Labels, Fingerprint: w.Fingerprint()}
	}
	c.workloadChanged(endpoints.KindPod, old, pod, prev, next)
}

func (c *Controller) externalWorkloadChanged(old, ew *workloadv1alpha1.ExternalWorkload) {
	var prev, next *selector.Workload
	if old != nil {
		w := kube.ExternalWorkload(old)
		prev = &selector.Workload{Namespace: old.Namespace, Labels: old.Labels, Fingerprint: w.Fingerprint()}
	}
	if ew != nil {
		w := kube.ExternalWorkload(ew)
		next = &selector.Workload{Namespace: ew.Namespace, Labels: ew.Labels, Fingerprint: w.Fingerprint()}
	}
	c.workloadChanged(endpoints.KindExternalWorkload, old, ew, prev, next)
}

// workloadChanged updates the index, then queues the Services the change
// affects. The index goes first: a Service added meanwhile either sees the
// new labels when it reconciles, or was in the index before the lookup
// below and is queued by it.
func (c *Controller) workloadChanged(kind endpoints.Kind, old, obj metav1.Object, prev, next *selector.Workload) {
	o := obj
	if next == nil {
		o = old
	}
	if c.index.Ignored(o.GetNamespace()) {
		return
	}
	if prev != nil && next != nil && old.GetResourceVersion() == obj.GetResourceVersion() {
		return // resync
	}
	key := selector.WorkloadKey{Namespace: o.GetNamespace(), Kind: string(kind), Name: o.GetName()}
	if next != nil {
		c.index.SetWorkload(key, next.Labels)
	} else {
		c.index.DeleteWorkload(key)
	}
	c.observe(string(kind), key.Namespace, key.Name, selector.Affected(c.index, prev, next))
}
