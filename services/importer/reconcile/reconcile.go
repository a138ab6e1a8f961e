package reconcile

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/plexusnet/plexus/internal/exportpolicy"
	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/kube"
	"github.com/plexusnet/plexus/services/importer/materialize"
	islices "github.com/plexusnet/plexus/services/importer/slices"
)

// propagator reads the trace context carried by membership events.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// run is one reconcile of one service: it reads the view, asks the core
// (package materialize) what to write, writes it and records the outcome.
type run struct {
	c       *Reconciler
	final   func(cluster string) bool
	key     exports.Key
	pending pending
	handled map[string]bool
	writes  int
	latency time.Duration
	// refused are the clusters the clusterset policy keeps out (see
	// materialize.Admit).
	refused map[string]exportpolicy.Decision
	// exports are the exports the run's view was read from, by cluster:
	// their endpoints are converted only for the clusters to plan.
	exports map[string]exports.Export
}

// Reconcile brings the member cluster's objects of one service in line
// with the exports. final reports whether what the importer knows of a
// cluster is its last word, so that slices it does not ask for may go; its
// answers must be fixed before Reconcile reads the exports, or a cluster
// whose exports arrive during the reconcile counts as final on a view that
// lacks them. It
// returns a delay after which to look again without counting a failure,
// or an error to retry with backoff.
func (c *Reconciler) Reconcile(ctx context.Context, key exports.Key, final func(cluster string) bool) (time.Duration, error) {
	taken := c.changes.take(key)
	var links []trace.Link
	for _, tc := range taken.links {
		sc := trace.SpanContextFromContext(propagator.Extract(context.Background(), propagation.MapCarrier(tc)))
		if sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	ctx, span := c.tracer.Start(ctx, "importer.reconcile", trace.WithLinks(links...), trace.WithAttributes(
		attribute.String("plexus.namespace", key.Namespace), attribute.String("plexus.service", key.Name)))
	defer span.End()

	r := &run{c: c, final: final, key: key, pending: taken, handled: map[string]bool{}}
	after, err := r.sync(ctx)
	span.SetAttributes(attribute.Int("plexus.writes", r.writes))
	if r.latency > 0 {
		span.SetAttributes(attribute.Float64("plexus.export_import_latency_ms", float64(r.latency.Microseconds())/1000))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	// What this run did not write is still pending for the next one.
	rest := pending{since: map[string]time.Time{}}
	for cl, t := range taken.since {
		if !r.handled[cl] {
			rest.since[cl] = t
		}
	}
	if len(rest.since) > 0 {
		rest.links = taken.links
	}
	c.changes.restore(key, rest)
	if err == nil && after == 0 {
		r.setLocal(func(l *local) { l.reconciled = time.Now() })
	}
	return after, err
}

// view reads what the core decides on from the store and the caches. The
// exports come without their endpoints (a status read only counts them);
// keep, when given, receives the exports themselves, for a reconcile to
// convert the endpoints of the clusters it plans.
func (c *Reconciler) view(key exports.Key, keep map[string]exports.Export) materialize.View {
	svc, _ := c.cfg.Store.Get(key)
	v := materialize.View{
		Namespace: key.Namespace, Name: key.Name,
		NamespaceExists: c.cfg.Informers.NamespaceExists(key.Namespace),
		Import:          c.cfg.Informers.Import(key.Namespace, key.Name),
		Slices:          map[string][]*discovery.EndpointSlice{},
	}
	v.Derived = c.cfg.Informers.Service(key.Namespace, v.DerivedName())
	if v.LocalCluster = c.cfg.ClusterName; v.LocalCluster != "" {
		v.LocalExport = c.cfg.Informers.Export(key.Namespace, key.Name)
	}
	for _, e := range svc.Exports {
		v.Exports = append(v.Exports, e.Summary())
		if keep != nil {
			keep[e.Cluster] = e
		}
	}
	for _, s := range c.cfg.Informers.SlicesOf(key) {
		cl := s.Labels[islices.LabelSourceCluster]
		v.Slices[cl] = append(v.Slices[cl], s)
	}
	if c.cfg.Policy != nil {
		v = materialize.Admit(v, c.cfg.Policy.Current())
	}
	return v
}

// authoritative reports whether cluster's slices of this service may go
// when it asks for none: the cluster is authoritative as a whole, or this
// run carries its own word about this very service (a withdrawal, pushed
// or streamed), which is its last word whatever the state of the rest.
func (r *run) authoritative(cluster string) bool {
	if _, ok := r.refused[cluster]; ok {
		return true // the clusterset policy's word is final
	}
	if _, ok := r.pending.since[cluster]; ok {
		return true
	}
	return r.final(cluster)
}

// observe records the latency of a cluster's pending change once its
// slices were written.
func (r *run) observe(cluster string) {
	t, ok := r.pending.since[cluster]
	if !ok {
		return
	}
	d := time.Since(t)
	r.c.metrics.latency.Observe(d.Seconds())
	r.latency = max(r.latency, d)
}

func (r *run) setLocal(fn func(l *local)) {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	fn(r.c.localOf(r.key))
}

func (r *run) importRef(si *mcsv1beta1.ServiceImport) *corev1.ObjectReference {
	ref := &corev1.ObjectReference{APIVersion: mcsv1beta1.GroupVersion.String(), Kind: "ServiceImport", Namespace: r.key.Namespace, Name: r.key.Name}
	if si != nil {
		ref.UID, ref.ResourceVersion = si.UID, si.ResourceVersion
	}
	return ref
}

func (r *run) sync(ctx context.Context) (time.Duration, error) {
	c := r.c
	if stale, obj := c.cfg.Tracker.Stale(r.key, c.cfg.Informers.Lookup); stale {
		c.metrics.stale.Inc()
		c.logger.Debug("cache older than the last write; waiting", "service", r.key, "object", obj)
		return staleRetry, nil
	}
	r.exports = map[string]exports.Export{}
	v := c.view(r.key, r.exports)
	r.refused = v.Refused
	defer r.noteRefused(v)
	d := materialize.Decide(v)
	switch d.Verdict {
	case materialize.Withdrawn:
		return 0, r.remove(ctx, v)
	case materialize.Hold:
		r.hold(v, d)
		return 0, nil
	}
	o := &materialize.Outcome{VIPs: r.vips(ctx, v, d), Clusters: map[string]materialize.ClusterOutcome{}}
	imp, err := r.writeImport(ctx, v, d, o.VIPs)
	if err != nil {
		return 0, err
	}
	if o.VIPs.Err != nil {
		return 0, errors.Join(o.VIPs.Err, r.finish(ctx, v, d, imp, v.Slices, o))
	}
	if o.Derived, err = r.writeDerived(ctx, v, d, imp, o); err != nil {
		r.record(o, nil)
		if errors.Is(err, errRetrySoon) {
			return staleRetry, nil
		}
		return 0, err
	}
	steer := materialize.Steer(v, d, c.cfg.Informers.NodeZones())
	r.noteSteering(steer)
	after, werr := r.writeSlices(ctx, v, o, steer)
	return 0, errors.Join(werr, r.finish(ctx, v, d, imp, after, o))
}

// noteSteering logs and counts the moments local first starts or stops
// keeping the cluster's traffic on its own endpoints.
func (r *run) noteSteering(s materialize.Steering) {
	var was bool
	r.setLocal(func(l *local) { was, l.localFirst = l.localFirst, s.Local() })
	switch {
	case s.Local() && !was:
		r.c.metrics.localFirst.WithLabelValues("local").Inc()
		r.c.logger.Info("local first: traffic stays on this cluster's endpoints", "service", r.key, "readyLocal", s.Ready, "min", s.Min, "zones", s.Zones)
	case !s.Local() && was:
		r.c.metrics.localFirst.WithLabelValues("failover").Inc()
		r.c.logger.Info("local first: too few ready local endpoints; failing over to every cluster's", "service", r.key, "readyLocal", s.Ready, "min", s.Min)
	}
}

// hold records a problem that keeps the service from being materialised,
// with a log line and an Event when it is new.
func (r *run) hold(v materialize.View, d materialize.Decision) {
	var first bool
	r.setLocal(func(l *local) {
		first = l.problem == nil || l.problem.Reason != d.Problem.Reason
		l.problem, l.outcome, l.written, l.planned = d.Problem, nil, nil, nil
	})
	if !first {
		return
	}
	p := d.Problem
	if p.Reason == materialize.ReasonNamespaceMissing {
		r.c.logger.Warn("namespace of an imported service does not exist; it is not created", "service", r.key)
		r.c.cfg.Recorder.Eventf(&corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: v.Namespace}, corev1.EventTypeWarning, p.Reason,
			"service %s is exported to the clusterset but namespace %s does not exist in this cluster; create it to import the service", v.Name, v.Namespace)
		return
	}
	r.c.logger.Warn("service not imported", "service", r.key, "reason", p.Reason, "message", p.Message)
	r.c.cfg.Recorder.Event(r.importRef(v.Import), corev1.EventTypeWarning, p.Reason, p.Message)
}

// record keeps the outcome of a reconcile, and the slices it left (nil:
// as the cache shows them), for the status this replica serves.
func (r *run) record(o *materialize.Outcome, written map[string][]*discovery.EndpointSlice) {
	r.setLocal(func(l *local) { l.outcome, l.problem, l.written = o, nil, written })
}

// vips asks the allocator for the import's VIPs, when it hands them out.
func (r *run) vips(ctx context.Context, v materialize.View, d materialize.Decision) materialize.VIPs {
	var allocated []string
	var err error
	if d.ClusterSetIP() && r.c.cfg.VIPs.Enabled() {
		allocated, err = r.c.cfg.VIPs.Get(ctx, r.key)
	}
	vips := materialize.ChooseVIPs(v, d, r.c.cfg.VIPs.Enabled(), allocated, err)
	if vips.Kept != nil {
		r.c.logger.Warn("allocator unavailable; keeping the VIPs on the ServiceImport", "service", r.key, "error", vips.Kept)
	}
	return vips
}

// writeImport creates the ServiceImport or brings its spec up to date.
func (r *run) writeImport(ctx context.Context, v materialize.View, d materialize.Decision, vips materialize.VIPs) (*mcsv1beta1.ServiceImport, error) {
	want := materialize.Import(v, d, vips)
	if want == nil {
		return v.Import, nil
	}
	out, err := r.c.cfg.Writer.ApplyImport(ctx, r.key, v.Import, want)
	if err == nil {
		r.writes++
	}
	return out, err
}

// writeDerived makes the derived Service's write, if it needs one. When
// the API server refuses the VIPs as cluster IPs and the importer manages
// ServiceCIDRs, it first makes the VIP pools' ranges known to the API server
// and tries again once it took them up (errRetrySoon meanwhile); only then
// does the Service get addresses of the cluster's own.
func (r *run) writeDerived(ctx context.Context, v materialize.View, d materialize.Decision, imp *mcsv1beta1.ServiceImport, o *materialize.Outcome) (*corev1.Service, error) {
	op, want := materialize.Derived(v, d, imp, o.VIPs)
	if op == materialize.DerivedForeign {
		o.Problem = materialize.DerivedProblem(v)
		return nil, materialize.ErrDerivedNotManaged
	}
	w := r.c.cfg.Writer
	manage := r.c.cfg.ManageServiceCIDRs && o.VIPs.FromAllocator
	out, n, note, err := w.ApplyDerived(ctx, r.key, op, v.Derived, want, !manage)
	r.writes += n
	if manage && errors.Is(err, kube.ErrVIPRefused) {
		if r.ensureServiceCIDRs(ctx) {
			return nil, errRetrySoon
		}
		out, n, note, err = w.ApplyDerived(ctx, r.key, materialize.DerivedCreate, nil, want, true)
		r.writes += n
	}
	if note != nil {
		// The import still works through an address of the cluster's
		// own, and the Ready condition says so.
		o.IPNote = note
		r.c.logger.Warn("the API server refused the clusterset VIPs as cluster IPs; the derived Service gets its own", "service", r.key, "error", note)
	}
	if apierrors.IsAlreadyExists(err) {
		o.Problem = materialize.DerivedProblem(v)
	}
	return out, err
}

// serviceCIDRSettle is how long after creating a ServiceCIDR the importer
// waits for the API server's allocator to take it up before it gives up on
// the VIPs as cluster IPs.
const serviceCIDRSettle = 15 * time.Second

// errRetrySoon asks for the service to be looked at again shortly, without
// counting a failure.
var errRetrySoon = errors.New("retry soon")

// ensureServiceCIDRs makes the VIP pools' ranges known to the API server
// and reports whether to wait for it to take them up.
func (r *run) ensureServiceCIDRs(ctx context.Context) bool {
	cidrs, err := r.c.cfg.VIPs.CIDRs(ctx)
	if err == nil {
		var youngest time.Time
		if youngest, err = r.c.cfg.Writer.EnsureServiceCIDRs(ctx, cidrs); err == nil {
			wait := time.Since(youngest) < serviceCIDRSettle
			if wait {
				r.c.logger.Info("VIP ranges made known to the API server as ServiceCIDRs; the derived Service waits for them", "service", r.key, "cidrs", cidrs)
			}
			return wait
		}
	}
	r.c.logger.Warn("could not make the VIP ranges known to the API server as ServiceCIDRs", "service", r.key, "error", err)
	return false
}

// finish records the outcome and writes the ServiceImport's status from
// what was written, with the Events its changes call for.
func (r *run) finish(ctx context.Context, v materialize.View, d materialize.Decision, imp *mcsv1beta1.ServiceImport,
	after map[string][]*discovery.EndpointSlice, o *materialize.Outcome) error {
	r.record(o, after)
	st := materialize.Report(v, d, after, o)
	if se := materialize.ExportStatus(v, st); se != nil {
		if _, err := r.c.cfg.Writer.UpdateExportStatus(ctx, r.key, se); err != nil {
			return err
		}
		r.writes++
	}
	want := materialize.ImportStatus(imp, st, materialize.ImportClusters(v, after))
	if equality.Semantic.DeepEqual(imp.Status, want) {
		return nil
	}
	for _, ev := range materialize.Events(imp.Status.Conditions, st.Conditions) {
		r.c.cfg.Recorder.Event(r.importRef(imp), ev.Type, ev.Reason, ev.Message)
	}
	upd := imp.DeepCopy()
	upd.Status = want
	if _, err := r.c.cfg.Writer.UpdateImportStatus(ctx, r.key, upd); err != nil {
		return err
	}
	r.writes++
	return nil
}

// remove takes away what is left of a service no cluster exports: its
// slices, then its derived Service and ServiceImport. Slices of a cluster
// that is not authoritative yet stay, and with them the objects that own
// them, until the cluster is heard from or the grace passes.
func (r *run) remove(ctx context.Context, v materialize.View) error {
	c := r.c
	rm := materialize.Remove(v, r.authoritative)
	for _, cl := range slices.Sorted(maps.Keys(rm.Slices)) {
		a, err := r.c.cfg.Writer.ApplyPlan(ctx, r.key, islices.Plan{Delete: rm.Slices[cl]})
		r.writes += len(a.Deleted)
		if err != nil {
			return err
		}
		r.handled[cl] = true
		r.observe(cl)
	}
	for cl := range r.pending.since {
		if _, ok := v.Slices[cl]; !ok {
			r.handled[cl] = true
		}
	}
	if rm.Blocked {
		return nil
	}
	if rm.Derived != nil {
		if err := c.cfg.Writer.DeleteService(ctx, r.key, rm.Derived); err != nil {
			return err
		}
		r.writes++
	}
	if rm.Import != nil {
		if err := c.cfg.Writer.DeleteImport(ctx, r.key, rm.Import); err != nil {
			return err
		}
		r.writes++
	}
	if r.writes > 0 {
		c.logger.Info("service no longer exported; import removed", "service", r.key, "writes", r.writes)
	}
	c.cfg.VIPs.Forget(r.key)
	c.mu.Lock()
	delete(c.local, r.key)
	c.mu.Unlock()
	return nil
}

// noteRefused logs and counts the clusters the clusterset policy keeps
// out of a service when they change: a refusal that takes effect (it
// removed something, or kept an export from ever being imported), not
// every look at it.
func (r *run) noteRefused(v materialize.View) {
	var sig strings.Builder
	for _, cl := range slices.Sorted(maps.Keys(v.Refused)) {
		sig.WriteString(cl + "=" + v.Refused[cl].Reason + ";")
	}
	c := r.c
	c.mu.Lock()
	seen := c.refusedSeen[r.key]
	if sig.Len() == 0 {
		delete(c.refusedSeen, r.key)
	} else {
		c.refusedSeen[r.key] = sig.String()
	}
	c.mu.Unlock()
	if sig.Len() == 0 || (seen == sig.String() && r.writes == 0) {
		return
	}
	for _, cl := range slices.Sorted(maps.Keys(v.Refused)) {
		d := v.Refused[cl]
		c.metrics.refused.WithLabelValues(d.Reason).Inc()
		c.logger.Info("export kept out by the clusterset policy", "service", r.key, "source", cl, "reason", d.Reason, "message", d.Message)
	}
}
