package materialize

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/plexusnet/plexus/services/importer/mcs"
	islices "github.com/plexusnet/plexus/services/importer/slices"
)

// Condition types of an import.
const (
	ConditionConflict         = "Conflict"
	ConditionReady            = string(mcsv1beta1.ServiceImportConditionReady)
	ConditionVIPAllocated     = "VIPAllocated"
	ConditionNamespaceMissing = "NamespaceMissing"
	// ConditionEndpointsDropped is True while endpoints a source cluster
	// exports are left out of the slices because the API server would
	// refuse them (or they repeat another endpoint).
	ConditionEndpointsDropped = "EndpointsDropped"
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
	// ReasonSlicesNotWritten: the API server refused (or did not take) a
	// source cluster's slice writes; what was written before stays.
	ReasonSlicesNotWritten = "EndpointSlicesNotWritten"
	ReasonEndpointsDropped = "EndpointsDropped"
	ReasonNoneDropped      = "NoneDropped"
)

const (
	conditionTrue  = metav1.ConditionTrue
	conditionFalse = metav1.ConditionFalse
	// maxMessage bounds a condition message; the API server refuses
	// messages over 32 KiB.
	maxMessage = 4096
)

// Condition is a condition of an import.
type Condition struct {
	Type    string
	Status  metav1.ConditionStatus
	Reason  string
	Message string
	// Clusters are the clusters involved: for a conflict the winner
	// first, for the others the clusters named in the message.
	Clusters       []string
	LastTransition time.Time
}

// ClusterOutcome is what became of one source cluster's slices in a
// reconcile.
type ClusterOutcome struct {
	// Skipped is why no plan was made (see ClusterPlan.Skipped).
	Skipped error
	// WriteErr is the first write of the plan that failed; the writes
	// before it landed, the rest did not.
	WriteErr error
	// Dropped are the endpoints the plan left out.
	Dropped []islices.Dropped
	// Exported counts the endpoints the cluster exports.
	Exported int
}

// Outcome is what a reconcile of a materialised import wrote.
type Outcome struct {
	VIPs VIPs
	// Derived is the derived Service as written (nil: none).
	Derived *corev1.Service
	// IPNote is why the API server refused the VIPs as the derived
	// Service's cluster IPs, when it did in this reconcile.
	IPNote error
	// Problem is a Ready=False condition found while writing (a foreign
	// derived Service).
	Problem *Condition
	// Clusters are the outcomes by source cluster.
	Clusters map[string]ClusterOutcome
}

// ClusterStatus is one source cluster's part of an import.
type ClusterStatus struct {
	Cluster string
	// Endpoints and ReadyEndpoints are what the cluster's slices hold:
	// what was written, not what was planned.
	Endpoints, ReadyEndpoints int
	// Exported counts the endpoints the cluster exports; Dropped those
	// left out, with the first reason.
	Exported, Dropped int
	DropReason        string
	// Problem says why the cluster's slices do not hold its export: its
	// export was left out of the merge, its endpoints are unusable, or a
	// write failed.
	Problem string
	// WriteFailed is true when the problem is a write the API server
	// refused or did not take (Ready says EndpointSlicesNotWritten).
	WriteFailed bool
}

// Status is the one status value of an import: the ServiceImport's status
// is rendered from it (ImportStatus) and the gRPC API serves it.
type Status struct {
	Namespace, Name string
	IPs             []string
	Type            mcsv1beta1.ServiceImportType
	Ports           []mcsv1beta1.ServicePort
	SessionAffinity corev1.ServiceAffinity
	// SessionAffinityTimeout is zero when not set.
	SessionAffinityTimeout time.Duration
	DerivedService         string
	// EndpointSlices counts the slices the import's clusters hold.
	EndpointSlices int
	Clusters       []ClusterStatus
	Conditions     []Condition
}

// Report builds the status of an import. slices are the slices the import
// holds (after the reconcile's writes, or as the cache shows them). o is
// the outcome of this replica's last reconcile of a materialised import;
// nil on a replica that did not reconcile it, which then reports the
// conditions the reconciling replica wrote on the ServiceImport.
func Report(v View, d Decision, slices map[string][]*discovery.EndpointSlice, o *Outcome) Status {
	st := Status{Namespace: v.Namespace, Name: v.Name, DerivedService: v.DerivedName()}
	st.describe(v, d, o)
	excluded := d.Excluded
	for _, cl := range clustersOf(v, slices) {
		cs := ClusterStatus{Cluster: cl}
		cs.Endpoints, cs.ReadyEndpoints = countSlices(slices[cl])
		st.EndpointSlices += len(slices[cl])
		if e, ok := v.Export(cl); ok {
			cs.Exported = e.Endpoints
		}
		if err := excluded[cl]; err != nil {
			cs.Problem = "export left out: " + err.Error()
		}
		if o != nil {
			co := o.Clusters[cl]
			cs.Dropped = len(co.Dropped)
			if cs.Dropped > 0 {
				cs.DropReason = co.Dropped[0].Err.Error()
			}
			switch {
			case co.Skipped != nil:
				cs.Problem = "endpoints unusable: " + co.Skipped.Error()
			case co.WriteErr != nil:
				cs.Problem, cs.WriteFailed = "slices not written: "+co.WriteErr.Error(), true
			}
		}
		st.Clusters = append(st.Clusters, cs)
	}
	st.Conditions = conditions(v, d, o, st.Clusters)
	return st
}

// describe fills the import's properties: merged when materialised, else
// as the ServiceImport says.
func (st *Status) describe(v View, d Decision, o *Outcome) {
	switch {
	case d.Verdict == Materialize:
		st.Type, st.Ports, st.SessionAffinity = d.Merged.Type, d.Merged.Ports, d.Merged.SessionAffinity
		if cfg := d.Merged.SessionAffinityConfig; cfg != nil && cfg.ClientIP != nil && cfg.ClientIP.TimeoutSeconds != nil {
			st.SessionAffinityTimeout = time.Duration(*cfg.ClientIP.TimeoutSeconds) * time.Second
		}
	case v.Import != nil:
		st.Type, st.Ports, st.SessionAffinity = v.Import.Spec.Type, v.Import.Spec.Ports, v.Import.Spec.SessionAffinity
	}
	switch {
	case o != nil && len(o.VIPs.IPs) > 0:
		st.IPs = slices.Clone(o.VIPs.IPs)
	case v.Import != nil:
		st.IPs = slices.Clone(v.Import.Spec.IPs)
	}
}

// clustersOf returns the clusters that export the service or hold slices.
func clustersOf(v View, ss map[string][]*discovery.EndpointSlice) []string {
	out := slices.Collect(maps.Keys(ss))
	for _, e := range v.Exports {
		if !slices.Contains(out, e.Cluster) {
			out = append(out, e.Cluster)
		}
	}
	slices.Sort(out)
	return out
}

// conditions returns the import's conditions, sorted by type.
func conditions(v View, d Decision, o *Outcome, clusters []ClusterStatus) []Condition {
	var out []Condition
	if d.Verdict == Materialize {
		out = append(out, conflict(d.Merged))
	}
	if o != nil && d.Verdict == Materialize {
		if c, ok := vipCondition(d, o.VIPs); ok {
			out = append(out, c)
		}
		out = append(out, droppedCondition(clusters), readyCondition(d, o, clusters))
	} else if v.Import != nil {
		// Not reconciled here: what the reconciling replica wrote.
		for _, c := range v.Import.Status.Conditions {
			if c.Type != ConditionConflict || d.Verdict != Materialize {
				out = append(out, Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message, LastTransition: c.LastTransitionTime.Time})
			}
		}
	}
	if o != nil && o.Problem != nil {
		out = replace(out, *o.Problem)
	}
	if d.Problem != nil {
		out = replace(out, *d.Problem)
	}
	if v.Import != nil {
		for i := range out {
			if old := meta.FindStatusCondition(v.Import.Status.Conditions, out[i].Type); old != nil && old.Status == out[i].Status && out[i].LastTransition.IsZero() {
				out[i].LastTransition = old.LastTransitionTime.Time
			}
		}
	}
	slices.SortFunc(out, func(a, b Condition) int { return strings.Compare(a.Type, b.Type) })
	return out
}

func replace(conds []Condition, c Condition) []Condition {
	for i := range conds {
		if conds[i].Type == c.Type {
			conds[i] = c
			return conds
		}
	}
	return append(conds, c)
}

func conflict(r mcs.Result) Condition {
	if len(r.Conflicts) == 0 {
		return Condition{Type: ConditionConflict, Status: conditionFalse, Reason: mcs.ReasonNoConflicts, Message: "the exports agree"}
	}
	c := Condition{Type: ConditionConflict, Status: conditionTrue, Reason: r.ConflictReason(), Message: r.ConflictMessage()}
	for _, cf := range r.Conflicts {
		for _, cl := range cf.Clusters {
			if !slices.Contains(c.Clusters, cl) {
				c.Clusters = append(c.Clusters, cl)
			}
		}
	}
	return c
}

func vipCondition(d Decision, vips VIPs) (Condition, bool) {
	if !d.ClusterSetIP() || !vips.FromAllocator {
		return Condition{}, false
	}
	if vips.Err != nil {
		return Condition{Type: ConditionVIPAllocated, Status: conditionFalse, Reason: ReasonAllocationFailed, Message: bound(vips.Err.Error())}, true
	}
	return Condition{Type: ConditionVIPAllocated, Status: conditionTrue, Reason: ReasonAllocated, Message: "clusterset VIPs " + strings.Join(vips.IPs, ", ")}, true
}

func droppedCondition(clusters []ClusterStatus) Condition {
	var parts []string
	var named []string
	for _, cs := range clusters {
		if cs.Dropped > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d of %d endpoints (%s)", cs.Cluster, cs.Dropped, cs.Exported, cs.DropReason))
			named = append(named, cs.Cluster)
		}
	}
	if len(parts) == 0 {
		return Condition{Type: ConditionEndpointsDropped, Status: conditionFalse, Reason: ReasonNoneDropped, Message: "every exported endpoint is written"}
	}
	return Condition{Type: ConditionEndpointsDropped, Status: conditionTrue, Reason: ReasonEndpointsDropped, Clusters: named,
		Message: bound("left out because the API server would refuse them or they lie outside their cluster's ranges: " + strings.Join(parts, "; "))}
}

// readyCondition says whether the import is usable as exported: Ready only
// when every cluster's slices were written as planned.
func readyCondition(d Decision, o *Outcome, clusters []ClusterStatus) Condition {
	ready := func(reason, msg string, named []string) Condition {
		status := conditionFalse
		if reason == ReasonReady {
			status = conditionTrue
		}
		return Condition{Type: ConditionReady, Status: status, Reason: reason, Message: bound(msg), Clusters: named}
	}
	if o.VIPs.Err != nil {
		return ready(ReasonPending, "waiting for the clusterset VIPs", nil)
	}
	var written, invalid []string
	var wparts, iparts []string
	for _, cs := range clusters {
		switch {
		case cs.WriteFailed:
			written, wparts = append(written, cs.Cluster), append(wparts, cs.Cluster+": "+cs.Problem)
		case cs.Problem != "":
			invalid, iparts = append(invalid, cs.Cluster), append(iparts, cs.Cluster+": "+cs.Problem)
		}
	}
	switch {
	case len(written) > 0:
		return ready(ReasonSlicesNotWritten, "the last good slices stay; "+strings.Join(wparts, "; "), written)
	case len(invalid) > 0:
		return ready(ReasonInvalidExport, "exports left out: "+strings.Join(iparts, "; "), invalid)
	}
	if derived, vips := o.Derived, o.VIPs.IPs; derived != nil && d.ClusterSetIP() && len(vips) > 0 && !slices.Equal(derived.Spec.ClusterIPs, vips) {
		reason := ReasonClusterSetIPNotProgrammed
		if len(vips) > len(derived.Spec.ClusterIPs) {
			reason = ReasonIPFamilyNotSupported
		}
		msg := fmt.Sprintf("the derived Service has cluster IPs %v instead of the clusterset VIPs %v", derived.Spec.ClusterIPs, vips)
		if o.IPNote != nil {
			msg += ": " + o.IPNote.Error()
		}
		return ready(reason, msg, nil)
	}
	return ready(ReasonReady, "the derived Service and its EndpointSlices are written", nil)
}

func bound(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage] + "..."
}

// ImportClusters returns the clusters an import is derived from, sorted:
// those that export the service, and those whose slices it still holds
// (after, by cluster) although their export is not known (a source not
// heard from since a restart, kept until its word is final). Left out,
// such a cluster would vanish from the ServiceImport's status while its
// endpoints are served, and come back when it is heard from: two writes of
// every import it has, for nothing, on every restart of the importer.
func ImportClusters(v View, after map[string][]*discovery.EndpointSlice) []string {
	out := make([]string, 0, len(v.Exports))
	for _, e := range v.Exports {
		out = append(out, e.Cluster)
	}
	for cl, ss := range after {
		if _, ok := v.Export(cl); !ok && len(ss) > 0 {
			out = append(out, cl)
		}
	}
	slices.Sort(out)
	return out
}

// ImportStatus renders st onto the ServiceImport's status, keeping the
// transition times of conditions that did not change. clusters are the
// clusters the import is derived from (ImportClusters).
func ImportStatus(cur *mcsv1beta1.ServiceImport, st Status, clusters []string) mcsv1beta1.ServiceImportStatus {
	out := cur.Status.DeepCopy()
	out.Clusters = out.Clusters[:0]
	for _, cl := range clusters {
		out.Clusters = append(out.Clusters, mcsv1beta1.ClusterStatus{Cluster: cl})
	}
	out.EndpointSliceObjects = mcsv1beta1.EndpointSliceObjectsAbsent
	if st.EndpointSlices > 0 {
		out.EndpointSliceObjects = mcsv1beta1.EndpointSliceObjectsPresent
	}
	for _, c := range st.Conditions {
		meta.SetStatusCondition(&out.Conditions, metav1.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason,
			Message: c.Message, ObservedGeneration: cur.Generation})
	}
	return *out
}

// Event is a Kubernetes Event the runner emits on the ServiceImport.
type Event struct {
	Type, Reason, Message string
}

// Events returns the Events a change of conditions calls for: a new or
// changed conflict, a failed VIP allocation, slices that could not be
// written, endpoints newly dropped.
func Events(before []metav1.Condition, after []Condition) []Event {
	var out []Event
	for _, c := range after {
		old := meta.FindStatusCondition(before, c.Type)
		changed := old == nil || old.Status != c.Status || old.Message != c.Message
		switch {
		case c.Type == ConditionConflict && c.Status == conditionTrue && changed:
			out = append(out, Event{corev1.EventTypeWarning, ReasonExportConflict, c.Message})
		case c.Type == ConditionVIPAllocated && c.Status == conditionFalse && (old == nil || old.Status != c.Status):
			out = append(out, Event{corev1.EventTypeWarning, ReasonAllocationFailed, c.Message})
		case c.Type == ConditionReady && c.Reason == ReasonSlicesNotWritten && changed:
			out = append(out, Event{corev1.EventTypeWarning, ReasonSlicesNotWritten, c.Message})
		case c.Type == ConditionEndpointsDropped && c.Status == conditionTrue && changed:
			out = append(out, Event{corev1.EventTypeWarning, ReasonEndpointsDropped, c.Message})
		}
	}
	return out
}

// ErrDerivedNotManaged means a Service of the derived name exists and is
// not the importer's.
var ErrDerivedNotManaged = errors.New("a Service with the derived Service's name exists and is not managed by the importer")

// DerivedProblem is the Ready=False condition of a foreign derived Service.
func DerivedProblem(v View) *Condition {
	return &Condition{Type: ConditionReady, Status: conditionFalse, Reason: ReasonDerivedNotManaged,
		Message: fmt.Sprintf("Service %s/%s exists and is not managed by the importer; the import cannot be materialised", v.Namespace, v.DerivedName())}
}

// ExportStatus returns this cluster's ServiceExport with the import's
// Conflict condition (True with the mcs-api reason on every exporting
// cluster's export, False with NoConflicts otherwise), or nil when there is
// nothing to write: the cluster does not export the service, its export is
// not part of the merge, or the export already says so. The Valid and Ready
// conditions are the exporting cluster's membership's and are kept.
func ExportStatus(v View, st Status) *mcsv1beta1.ServiceExport {
	if v.LocalExport == nil || v.LocalCluster == "" {
		return nil
	}
	if _, ok := v.Export(v.LocalCluster); !ok {
		return nil
	}
	var conflict *Condition
	for i := range st.Conditions {
		if st.Conditions[i].Type == ConditionConflict {
			conflict = &st.Conditions[i]
		}
	}
	if conflict == nil {
		return nil
	}
	want := metav1.Condition{Type: string(mcsv1beta1.ServiceExportConditionConflict), Status: conflict.Status,
		Reason: conflict.Reason, Message: bound(conflict.Message), ObservedGeneration: v.LocalExport.Generation}
	if cur := meta.FindStatusCondition(v.LocalExport.Status.Conditions, want.Type); cur != nil &&
		cur.Status == want.Status && cur.Reason == want.Reason && cur.Message == want.Message && cur.ObservedGeneration == want.ObservedGeneration {
		return nil
	}
	out := v.LocalExport.DeepCopy()
	meta.SetStatusCondition(&out.Status.Conditions, want)
	return out
}
