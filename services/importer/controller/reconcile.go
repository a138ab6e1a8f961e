package controller

import (
	"context"
	"errors"
	"fmt"
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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/kube"
	"github.com/plexusnet/plexus/services/importer/mcs"
	islices "github.com/plexusnet/plexus/services/importer/slices"
)

// Condition types of a ServiceImport.
const (
	ConditionConflict         = "Conflict"
	ConditionReady            = string(mcsv1beta1.ServiceImportConditionReady)
	ConditionVIPAllocated     = "VIPAllocated"
	ConditionNamespaceMissing = "NamespaceMissing"
)

// Reasons of conditions and Events.
const (
	ReasonReady                     = string(mcsv1beta1.ServiceImportReasonReady)
	ReasonPending                   = string(mcsv1beta1.ServiceImportReasonPending)
	ReasonIPFamilyNotSupported      = string(mcsv1beta1.ServiceImportReasonIPFamilyNotSupported)
	ReasonClusterSetIPNotProgrammed = "ClusterSetIPNotProgrammed"
	ReasonInvalidExport             = "InvalidExport"
	ReasonAllocated                 = "Allocated"
	ReasonAllocationFailed          = "AllocationFailed"
	ReasonNamespaceMissing          = "NamespaceMissing"
	ReasonImportNotManaged          = "ServiceImportNotManaged"
	ReasonDerivedNotManaged         = "DerivedServiceNotManaged"
	ReasonExportConflict            = "ExportConflict"
)

var (
	errDerivedNotManaged = errors.New("a Service with the derived Service's name exists and is not managed by the importer")
	// propagator reads the trace context carried by membership events.
	propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
)

// run is one reconcile of one service.
type run struct {
	c       *Controller
	key     exports.Key
	derived string
	pending exports.Pending
	handled map[string]bool
	writes  int
	latency time.Duration
	// ipNote is why the API server refused the VIPs as the derived
	// Service's cluster IPs, when it did in this run.
	ipNote error
	// troubled is set when the run recorded a problem; a run without one
	// clears the last.
	troubled bool
}

// reconcile brings the member cluster's objects of one service in line with
// the exports. It returns a delay after which to look again without
// counting a failure, or an error to retry with backoff.
func (c *Controller) reconcile(ctx context.Context, key exports.Key) (time.Duration, error) {
	pending := c.cfg.Store.TakePending(key)
	var links []trace.Link
	for _, tc := range pending.Links {
		sc := trace.SpanContextFromContext(propagator.Extract(context.Background(), propagation.MapCarrier(tc)))
		if sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	ctx, span := c.tracer.Start(ctx, "importer.reconcile", trace.WithLinks(links...), trace.WithAttributes(
		attribute.String("plexus.namespace", key.Namespace), attribute.String("plexus.service", key.Name)))
	defer span.End()

	r := &run{c: c, key: key, derived: mcsnames.DerivedServiceName(key.Name), pending: pending, handled: map[string]bool{}}
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
	rest := exports.Pending{Since: map[string]time.Time{}}
	for cl, t := range pending.Since {
		if !r.handled[cl] {
			rest.Since[cl] = t
		}
	}
	if len(rest.Since) > 0 {
		rest.Links = pending.Links
	}
	c.cfg.Store.RestorePending(key, rest)
	c.mu.Lock()
	if l := c.local[key]; l != nil && after == 0 {
		if !r.troubled {
			l.problem = nil
		}
		if err == nil {
			l.reconciled = time.Now()
		}
	}
	c.mu.Unlock()
	return after, err
}

// authoritative reports whether cluster's slices of this service may go
// when it asks for none: the cluster is authoritative as a whole, or this
// run carries its own word about this very service (a withdrawal, pushed
// or streamed), which is its last word whatever the state of the rest.
func (r *run) authoritative(cluster string) bool {
	if _, ok := r.pending.Since[cluster]; ok {
		return true
	}
	return r.c.authoritative(cluster)
}

// observe records the latency of a cluster's pending change once its
// slices were written.
func (r *run) observe(cluster string) {
	t, ok := r.pending.Since[cluster]
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
	ns := r.key.Namespace
	svc, exported := c.cfg.Store.Get(r.key)
	imp := c.cfg.Informers.Import(ns, r.key.Name)
	derived := c.cfg.Informers.Service(ns, r.derived)
	existing := map[string][]*discovery.EndpointSlice{}
	for _, s := range c.cfg.Informers.SlicesOf(r.key) {
		cl := s.Labels[mcsnames.LabelSourceCluster]
		existing[cl] = append(existing[cl], s)
	}
	if !exported {
		return 0, r.remove(ctx, imp, derived, existing)
	}
	if imp != nil && !kube.Managed(imp) {
		r.problem(imp, ReasonImportNotManaged, "a ServiceImport of this name exists and is not managed by the importer; it is left alone")
		return 0, nil
	}
	if !c.cfg.Informers.NamespaceExists(ns) {
		var first bool
		r.setLocal(func(l *local) { first, l.namespaceMissing = !l.namespaceMissing, true })
		if first {
			c.logger.Warn("namespace of an imported service does not exist; it is not created", "service", r.key)
			c.cfg.Recorder.Eventf(&corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: ns}, corev1.EventTypeWarning, ReasonNamespaceMissing,
				"service %s is exported to the clusterset but namespace %s does not exist in this cluster; create it to import the service", r.key.Name, ns)
		}
		return 0, nil
	}
	merged, invalid, err := merge(svc)
	r.setLocal(func(l *local) { l.namespaceMissing, l.invalid = false, invalid })
	if err != nil {
		r.problem(imp, ReasonInvalidExport, err.Error())
		return 0, nil
	}

	var vips []string
	var vipErr error
	clusterSetIP := merged.Type == mcsv1beta1.ClusterSetIP
	if clusterSetIP && c.vips.enabled() {
		vips, vipErr = c.vips.get(ctx, r.key)
		if vipErr != nil && imp != nil && len(imp.Spec.IPs) > 0 {
			// Allocations are idempotent per owner: the VIPs on the
			// ServiceImport are the ones the allocator would answer with,
			// so an allocator outage does not stop endpoint updates.
			c.logger.Warn("allocator unavailable; keeping the VIPs on the ServiceImport", "service", r.key, "error", vipErr)
			vips, vipErr = imp.Spec.IPs, nil
		}
	}
	if !c.vips.enabled() && imp != nil && clusterSetIP {
		vips = imp.Spec.IPs // until the derived Service says otherwise
	}
	if imp, err = r.ensureImport(ctx, imp, merged, vips); err != nil {
		return 0, err
	}
	if vipErr != nil {
		if err := r.writeStatus(ctx, imp, svc, merged, nil, nil, -1, vipErr, invalid); err != nil {
			c.logger.Warn("status not written", "service", r.key, "error", err)
		}
		return 0, vipErr
	}
	if derived, err = r.ensureDerived(ctx, imp, derived, merged, vips); err != nil {
		if errors.Is(err, errDerivedNotManaged) || apierrors.IsAlreadyExists(err) {
			r.problem(imp, ReasonDerivedNotManaged, fmt.Sprintf("Service %s/%s exists and is not managed by the importer; the import cannot be materialised", ns, r.derived))
		}
		return 0, err
	}
	if !c.vips.enabled() && clusterSetIP {
		own := slices.DeleteFunc(slices.Clone(derived.Spec.ClusterIPs), func(ip string) bool { return ip == corev1.ClusterIPNone })
		if !slices.Equal(own, vips) {
			vips = own
			if imp, err = r.ensureImport(ctx, imp, merged, vips); err != nil {
				return 0, err
			}
		}
	}

	count := 0
	clusters := slices.Sorted(maps.Keys(existing))
	for _, e := range svc.Exports {
		if !slices.Contains(clusters, e.Cluster) {
			clusters = append(clusters, e.Cluster)
		}
	}
	slices.Sort(clusters)
	badSlices := map[string]error{}
	for _, cl := range clusters {
		e, has := svc.Export(cl)
		if !has && !r.authoritative(cl) {
			count += len(existing[cl])
			continue
		}
		var desired []islices.Group
		if has {
			if desired, err = groups(e.Endpoints); err != nil {
				badSlices[cl] = err
				r.handled[cl] = true
				count += len(existing[cl])
				continue
			}
		}
		tmpl := islices.ImportTemplate(ns, r.derived, derived.UID, r.key.Name, cl)
		plan, err := c.cfg.Packer.Plan(tmpl, desired, existing[cl])
		if err != nil {
			badSlices[cl] = err
			r.handled[cl] = true
			count += len(existing[cl])
			continue
		}
		if err := r.apply(ctx, plan); err != nil {
			return 0, err
		}
		r.handled[cl] = true
		count += len(existing[cl]) + len(plan.Create) - len(plan.Delete)
		if !plan.Empty() {
			r.observe(cl)
		}
	}
	for cl, err := range badSlices {
		if invalid == nil {
			invalid = map[string]error{}
		}
		invalid[cl] = err
		c.logger.Warn("endpoints of a cluster cannot be written; its slices are left as they are", "service", r.key, "cluster", cl, "error", err)
	}
	r.setLocal(func(l *local) { l.invalid = invalid })
	return 0, r.writeStatus(ctx, imp, svc, merged, vips, derived, count, nil, invalid)
}

// problem records a condition that keeps the service from being
// materialised, with an Event when it is new.
func (r *run) problem(imp *mcsv1beta1.ServiceImport, reason, msg string) {
	var first bool
	r.troubled = true
	r.setLocal(func(l *local) {
		first = l.problem == nil || l.problem.Reason != reason
		l.problem = &Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: msg, LastTransition: time.Now()}
	})
	if first {
		r.c.logger.Warn("service not imported", "service", r.key, "reason", reason, "message", msg)
		r.c.cfg.Recorder.Event(r.importRef(imp), corev1.EventTypeWarning, reason, msg)
	}
}

// apply makes a slice plan's writes: creates and updates before deletes, so
// an endpoint moving between slices is never missing in between.
func (r *run) apply(ctx context.Context, plan islices.Plan) error {
	w := r.c.cfg.Writer
	for _, s := range plan.Create {
		if _, err := w.CreateSlice(ctx, r.key, s); err != nil {
			return err
		}
		r.writes++
	}
	for _, s := range plan.Update {
		if _, err := w.UpdateSlice(ctx, r.key, s); err != nil {
			return err
		}
		r.writes++
	}
	for _, s := range plan.Delete {
		if err := w.DeleteSlice(ctx, r.key, s); err != nil {
			return err
		}
		r.writes++
	}
	return nil
}

// remove takes away what is left of a service no cluster exports: its
// slices, then its derived Service and ServiceImport. Slices of a cluster
// that is not authoritative yet stay, and with them the objects that own
// them, until the cluster is heard from or the grace passes.
func (r *run) remove(ctx context.Context, imp *mcsv1beta1.ServiceImport, derived *corev1.Service, existing map[string][]*discovery.EndpointSlice) error {
	c := r.c
	blocked := false
	for _, cl := range slices.Sorted(maps.Keys(existing)) {
		if !r.authoritative(cl) {
			blocked = true
			continue
		}
		if err := r.apply(ctx, islices.Plan{Delete: existing[cl]}); err != nil {
			return err
		}
		r.handled[cl] = true
		r.observe(cl)
	}
	for cl := range r.pending.Since {
		if _, ok := existing[cl]; !ok {
			r.handled[cl] = true
		}
	}
	if blocked {
		return nil
	}
	if derived != nil && kube.Managed(derived) {
		if err := c.cfg.Writer.DeleteService(ctx, r.key, derived); err != nil {
			return err
		}
		r.writes++
	}
	if imp != nil && kube.Managed(imp) {
		if err := c.cfg.Writer.DeleteImport(ctx, r.key, imp); err != nil {
			return err
		}
		r.writes++
	}
	if r.writes > 0 {
		c.logger.Info("service no longer exported; import removed", "service", r.key, "writes", r.writes)
	}
	c.vips.forget(r.key)
	c.mu.Lock()
	delete(c.local, r.key)
	c.mu.Unlock()
	return nil
}

// ensureImport creates the ServiceImport or brings its metadata and spec up
// to date; fields the importer does not set are kept.
func (r *run) ensureImport(ctx context.Context, cur *mcsv1beta1.ServiceImport, merged mcs.Result, vips []string) (*mcsv1beta1.ServiceImport, error) {
	ports := merged.Ports
	if ports == nil {
		ports = []mcsv1beta1.ServicePort{}
	}
	var fams []corev1.IPFamily
	if len(vips) > 0 {
		fams = families(vips)
	}
	var ips []string
	if len(vips) > 0 {
		ips = slices.Clone(vips)
	}
	if cur == nil {
		si := &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Namespace: r.key.Namespace, Name: r.key.Name, Labels: map[string]string{kube.LabelAppManagedBy: mcsnames.ManagedBy}},
			Spec: mcsv1beta1.ServiceImportSpec{Ports: ports, IPs: ips, Type: merged.Type, SessionAffinity: merged.SessionAffinity,
				SessionAffinityConfig: merged.SessionAffinityConfig.DeepCopy(), IPFamilies: fams},
		}
		out, err := r.c.cfg.Writer.CreateImport(ctx, r.key, si)
		if err == nil {
			r.writes++
		}
		return out, err
	}
	upd := cur.DeepCopy()
	upd.Spec.Ports, upd.Spec.IPs, upd.Spec.Type = ports, ips, merged.Type
	upd.Spec.SessionAffinity, upd.Spec.SessionAffinityConfig = merged.SessionAffinity, merged.SessionAffinityConfig.DeepCopy()
	upd.Spec.IPFamilies = fams
	if equality.Semantic.DeepEqual(cur.Spec, upd.Spec) {
		return cur, nil
	}
	out, err := r.c.cfg.Writer.UpdateImport(ctx, r.key, upd)
	if err == nil {
		r.writes++
	}
	return out, err
}

// derivedService returns the derived Service the import asks for.
func (r *run) derivedService(imp *mcsv1beta1.ServiceImport, merged mcs.Result, vips []string) *corev1.Service {
	controller := true
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: r.key.Namespace,
			Name:      r.derived,
			Labels:    map[string]string{kube.LabelAppManagedBy: mcsnames.ManagedBy, mcsnames.LabelDerivedFrom: r.key.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: mcsv1beta1.GroupVersion.String(), Kind: "ServiceImport", Name: imp.Name, UID: imp.UID, Controller: &controller,
			}},
		},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeClusterIP,
			Ports:                 servicePorts(merged.Ports),
			SessionAffinity:       merged.SessionAffinity,
			SessionAffinityConfig: merged.SessionAffinityConfig.DeepCopy(),
		},
	}
	switch {
	case merged.Type == mcsv1beta1.Headless:
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	case len(vips) > 0 && r.c.vips.enabled():
		// kube-proxy programs the clusterset VIP as the derived Service's
		// cluster IP, so every member cluster reaches the service at the
		// same address.
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = vips[0], slices.Clone(vips)
		svc.Spec.IPFamilies = families(vips)
		policy := corev1.IPFamilyPolicySingleStack
		if len(vips) > 1 {
			policy = corev1.IPFamilyPolicyRequireDualStack
		}
		svc.Spec.IPFamilyPolicy = &policy
	}
	return svc
}

// ipRefused reports whether the API server refused a Service's requested
// cluster IPs or families (outside its service ranges, taken, or a family
// it does not serve).
func ipRefused(err error) bool {
	var st apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	for _, cause := range st.Status().Details.Causes {
		if strings.HasPrefix(cause.Field, "spec.clusterIP") || strings.HasPrefix(cause.Field, "spec.ipFamil") {
			return true
		}
	}
	return false
}

func (r *run) createDerived(ctx context.Context, want *corev1.Service) (*corev1.Service, error) {
	w := r.c.cfg.Writer
	out, err := w.CreateService(ctx, r.key, want)
	if err != nil && want.Spec.ClusterIP != corev1.ClusterIPNone && len(want.Spec.ClusterIPs) > 0 && ipRefused(err) {
		// The VIPs are not usable as cluster IPs here; the import still
		// works through an address of the cluster's own, and the Ready
		// condition says so.
		r.ipNote = err
		r.c.logger.Warn("the API server refused the clusterset VIPs as cluster IPs; the derived Service gets its own", "service", r.key, "error", err)
		want.Spec.ClusterIP, want.Spec.ClusterIPs, want.Spec.IPFamilies, want.Spec.IPFamilyPolicy = "", nil, nil, nil
		out, err = w.CreateService(ctx, r.key, want)
	}
	if err != nil {
		return nil, err
	}
	r.writes++
	return out, nil
}

// ensureDerived creates the derived Service or brings it up to date. Its
// cluster IPs are immutable: only a change between headless and not
// replaces it.
func (r *run) ensureDerived(ctx context.Context, imp *mcsv1beta1.ServiceImport, cur *corev1.Service, merged mcs.Result, vips []string) (*corev1.Service, error) {
	want := r.derivedService(imp, merged, vips)
	if cur == nil {
		return r.createDerived(ctx, want)
	}
	if !kube.Managed(cur) {
		return nil, errDerivedNotManaged
	}
	if (cur.Spec.ClusterIP == corev1.ClusterIPNone) != (merged.Type == mcsv1beta1.Headless) {
		if err := r.c.cfg.Writer.DeleteService(ctx, r.key, cur); err != nil {
			return nil, err
		}
		r.writes++
		return r.createDerived(ctx, want)
	}
	same := portsKey(cur.Spec.Ports) == portsKey(want.Spec.Ports) &&
		cur.Spec.SessionAffinity == want.Spec.SessionAffinity &&
		equality.Semantic.DeepEqual(cur.Spec.SessionAffinityConfig, want.Spec.SessionAffinityConfig) &&
		len(cur.Spec.Selector) == 0 && cur.Spec.Type == corev1.ServiceTypeClusterIP &&
		equality.Semantic.DeepEqual(cur.OwnerReferences, want.OwnerReferences)
	for k, v := range want.Labels {
		same = same && cur.Labels[k] == v
	}
	if same {
		return cur, nil
	}
	upd := cur.DeepCopy()
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	maps.Copy(upd.Labels, want.Labels)
	upd.OwnerReferences = want.OwnerReferences
	upd.Spec.Ports, upd.Spec.Selector, upd.Spec.Type = want.Spec.Ports, nil, corev1.ServiceTypeClusterIP
	upd.Spec.SessionAffinity, upd.Spec.SessionAffinityConfig = want.Spec.SessionAffinity, want.Spec.SessionAffinityConfig
	out, err := r.c.cfg.Writer.UpdateService(ctx, r.key, upd)
	if err != nil {
		return nil, err
	}
	r.writes++
	return out, nil
}

// writeStatus writes the ServiceImport's status when it changed. count is
// the number of slices (-1: unknown, kept as is); vipErr is set when the
// VIPs could not be allocated.
func (r *run) writeStatus(ctx context.Context, imp *mcsv1beta1.ServiceImport, svc exports.Service, merged mcs.Result,
	vips []string, derived *corev1.Service, count int, vipErr error, invalid map[string]error) error {
	st := imp.Status.DeepCopy()
	st.Clusters = st.Clusters[:0]
	for _, e := range svc.Exports {
		st.Clusters = append(st.Clusters, mcsv1beta1.ClusterStatus{Cluster: e.Cluster})
	}
	switch {
	case count > 0:
		st.EndpointSliceObjects = mcsv1beta1.EndpointSliceObjectsPresent
	case count == 0:
		st.EndpointSliceObjects = mcsv1beta1.EndpointSliceObjectsAbsent
	}
	gen := imp.Generation
	set := func(typ string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	before := meta.FindStatusCondition(imp.Status.Conditions, ConditionConflict)
	if len(merged.Conflicts) > 0 {
		set(ConditionConflict, true, merged.ConflictReason(), merged.ConflictMessage())
		if before == nil || before.Status != metav1.ConditionTrue || before.Message != merged.ConflictMessage() {
			r.c.cfg.Recorder.Event(r.importRef(imp), corev1.EventTypeWarning, ReasonExportConflict, merged.ConflictMessage())
		}
	} else {
		set(ConditionConflict, false, mcs.ReasonNoConflicts, "the exports agree")
	}
	if merged.Type == mcsv1beta1.ClusterSetIP && r.c.vips.enabled() {
		if vipErr != nil {
			set(ConditionVIPAllocated, false, ReasonAllocationFailed, vipErr.Error())
			if c := meta.FindStatusCondition(imp.Status.Conditions, ConditionVIPAllocated); c == nil || c.Status != metav1.ConditionFalse {
				r.c.cfg.Recorder.Event(r.importRef(imp), corev1.EventTypeWarning, ReasonAllocationFailed, vipErr.Error())
			}
		} else {
			set(ConditionVIPAllocated, true, ReasonAllocated, "clusterset VIPs "+strings.Join(vips, ", "))
		}
	} else {
		meta.RemoveStatusCondition(&st.Conditions, ConditionVIPAllocated)
	}
	reason, msg := ReasonReady, "the derived Service and its EndpointSlices are written"
	switch {
	case vipErr != nil:
		reason, msg = ReasonPending, "waiting for the clusterset VIPs"
	case len(invalid) > 0:
		var parts []string
		for _, cl := range slices.Sorted(maps.Keys(invalid)) {
			parts = append(parts, cl+": "+invalid[cl].Error())
		}
		reason, msg = ReasonInvalidExport, "exports left out: "+strings.Join(parts, "; ")
	case derived != nil && merged.Type == mcsv1beta1.ClusterSetIP && len(vips) > 0 && !slices.Equal(derived.Spec.ClusterIPs, vips):
		reason = ReasonClusterSetIPNotProgrammed
		if len(vips) > len(derived.Spec.ClusterIPs) {
			reason = ReasonIPFamilyNotSupported
		}
		msg = fmt.Sprintf("the derived Service has cluster IPs %v instead of the clusterset VIPs %v", derived.Spec.ClusterIPs, vips)
		if r.ipNote != nil {
			msg += ": " + r.ipNote.Error()
		}
	}
	set(ConditionReady, reason == ReasonReady, reason, msg)
	if equality.Semantic.DeepEqual(&imp.Status, st) {
		return nil
	}
	upd := imp.DeepCopy()
	upd.Status = *st
	if _, err := r.c.cfg.Writer.UpdateImportStatus(ctx, r.key, upd); err != nil {
		return err
	}
	r.writes++
	return nil
}
