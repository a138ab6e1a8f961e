package materialize

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/plexusnet/plexus/internal/exportpolicy"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/services/importer/mcs"
	islices "github.com/plexusnet/plexus/services/importer/slices"
)

// Export is one source cluster's contribution to a service, converted by
// the runner.
type Export struct {
	// Cluster is the source cluster.
	Cluster string
	// Properties are what the merge compares (type, ports, affinity).
	Properties mcs.Export
	// Endpoints counts the endpoints the cluster exports, Ready those
	// of them that are ready.
	Endpoints, Ready int
	// Groups are the endpoints, by address type and port set; a view
	// read only to report status may leave them out.
	Groups []islices.Group
	// Unusable is set when the endpoint set could not be turned into
	// groups; the cluster's slices are then left as they are.
	Unusable error
	// Ranges are the address ranges the cluster declares: an endpoint
	// with an address outside them is dropped (ErrOutOfRange). None: any
	// address.
	Ranges []netip.Prefix
}

// View is what the runner read for one service: the exports and the
// member cluster's objects of the service, as its caches hold them.
type View struct {
	// Namespace and Name of the exported service (and ServiceImport).
	Namespace, Name string
	// Exports are the clusters' contributions, sorted by cluster; none
	// means no cluster exports the service.
	Exports []Export
	// NamespaceExists is false when the service's namespace does not
	// exist in the member cluster.
	NamespaceExists bool
	// Import and Derived are the ServiceImport and the derived Service of
	// that name, if any (managed by the importer or not).
	Import  *mcsv1beta1.ServiceImport
	Derived *corev1.Service
	// Slices are the importer's slices of the service, by source cluster.
	Slices map[string][]*discovery.EndpointSlice
	// LocalCluster is the member cluster's own name, and LocalExport its
	// ServiceExport of the service, if any: the cluster's own export
	// carries the import's Conflict condition (see ExportStatus).
	LocalCluster string
	LocalExport  *mcsv1beta1.ServiceExport
	// Unchanged are the clusters whose slices the caller knows to be what
	// their export asks for: planned before from the same export, derived
	// Service and slices, with nothing to write. PlanSlices plans nothing
	// for them, and their Groups may be left empty, so that a change of
	// one cluster costs the planning of that cluster alone.
	Unchanged map[string]bool
	// Refused are the clusters whose exports the clusterset policy keeps
	// out of this cluster, with the refusal (see Admit); Exports holds
	// none of theirs.
	Refused map[string]exportpolicy.Decision
}

// DerivedName returns the name of the view's derived Service.
func (v View) DerivedName() string { return mcsnames.DerivedServiceName(v.Name) }

// Export returns the export of cluster, if any.
func (v View) Export(cluster string) (Export, bool) {
	for _, e := range v.Exports {
		if e.Cluster == cluster {
			return e, true
		}
	}
	return Export{}, false
}

// Verdict is what Decide concluded for a service.
type Verdict int

// Verdicts.
const (
	// Materialize: write the ServiceImport, derived Service and slices.
	Materialize Verdict = iota
	// Withdrawn: no cluster exports the service; its objects go (see
	// Remove).
	Withdrawn
	// Hold: a problem keeps the service from being materialised (see
	// Decision.Problem); nothing is written.
	Hold
)

// Decision is the outcome of Decide.
type Decision struct {
	Verdict Verdict
	// Merged is the merged import (Materialize only).
	Merged mcs.Result
	// Excluded are the clusters whose export the merge left out, with why.
	Excluded map[string]error
	// Problem is the Ready=False condition of a Hold.
	Problem *Condition
}

// Decide merges the exports and says what to do with the service.
func Decide(v View) Decision {
	if len(v.Exports) == 0 {
		return Decision{Verdict: Withdrawn}
	}
	if v.Import != nil && !mcsnames.Managed(v.Import.Labels) {
		return hold(ConditionReady, ReasonImportNotManaged,
			"a ServiceImport of this name exists and is not managed by the importer; it is left alone")
	}
	if !v.NamespaceExists {
		return hold(ConditionNamespaceMissing, ReasonNamespaceMissing,
			"namespace "+v.Namespace+" does not exist in this cluster; it is not created")
	}
	merged, excluded, err := merge(v.Exports)
	if err != nil {
		d := hold(ConditionReady, ReasonInvalidExport, err.Error())
		d.Excluded = excluded
		return d
	}
	return Decision{Verdict: Materialize, Merged: merged, Excluded: excluded}
}

func hold(typ, reason, msg string) Decision {
	status := conditionFalse
	if typ == ConditionNamespaceMissing {
		status = conditionTrue
	}
	return Decision{Verdict: Hold, Problem: &Condition{Type: typ, Status: status, Reason: reason, Message: msg}}
}

// merge merges the exports of a service. An export the merge refuses on its
// own is left out and reported, so one broken cluster does not take the
// service away from the others.
func merge(exports []Export) (mcs.Result, map[string]error, error) {
	all := make([]mcs.Export, len(exports))
	for i, e := range exports {
		all[i] = e.Properties
		all[i].Cluster = e.Cluster
	}
	r, err := mcs.Merge(all)
	if err == nil {
		return r, nil, nil
	}
	bad := map[string]error{}
	var good []mcs.Export
	for _, e := range all {
		if _, err := mcs.Merge([]mcs.Export{e}); err != nil {
			bad[e.Cluster] = err
			continue
		}
		good = append(good, e)
	}
	if len(good) == 0 {
		return mcs.Result{}, bad, fmt.Errorf("no valid export: %w", err)
	}
	r, err = mcs.Merge(good)
	return r, bad, err
}

// ClusterSetIP reports whether the decision materialises a ClusterSetIP
// import (one that carries VIPs).
func (d Decision) ClusterSetIP() bool {
	return d.Verdict == Materialize && d.Merged.Type == mcsv1beta1.ClusterSetIP
}
