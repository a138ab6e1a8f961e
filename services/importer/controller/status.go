package controller

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/kube"
	"github.com/plexusnet/plexus/services/importer/mcs"
)

// Condition is a condition of an import.
type Condition struct {
	Type    string
	Status  metav1.ConditionStatus
	Reason  string
	Message string
	// Clusters are the clusters involved, for a conflict: the winner first.
	Clusters       []string
	LastTransition time.Time
}

// ClusterStatus is one source cluster's contribution to an import.
type ClusterStatus struct {
	Cluster        string
	Endpoints      int
	ReadyEndpoints int
	Revision       uint64
	// LastHeard is when the cluster was last heard from: now for a
	// connected source, the last update for a pushing cluster.
	LastHeard time.Time
	// Stale is true while a configured source is unreachable and its last
	// known endpoints are kept.
	Stale          bool
	ExportCreated  time.Time
	Origin         exports.Origin
	Generation     uint64
	ObserveTime    time.Time
	InvalidMessage string
}

// Status is an import as this replica sees it: the merged exports, the
// ServiceImport in its cache and what it reconciled itself.
type Status struct {
	Key                    exports.Key
	IPs                    []string
	Type                   mcsv1beta1.ServiceImportType
	Ports                  []mcsv1beta1.ServicePort
	SessionAffinity        corev1.ServiceAffinity
	SessionAffinityTimeout time.Duration
	Clusters               []ClusterStatus
	Conditions             []Condition
	DerivedService         string
	EndpointSlices         int
	// ReconcileTime is zero on a replica that never reconciled the import.
	ReconcileTime time.Time
}

// Status returns the import of key; false when no cluster exports it and no
// ServiceImport of the importer's exists for it.
func (c *Controller) Status(key exports.Key) (Status, bool) {
	svc, exported := c.cfg.Store.Get(key)
	imp := c.cfg.Informers.Import(key.Namespace, key.Name)
	if imp != nil && !kube.Managed(imp) {
		imp = nil
	}
	if !exported && imp == nil {
		return Status{}, false
	}
	st := Status{Key: key, DerivedService: mcsnames.DerivedServiceName(key.Name), EndpointSlices: len(c.cfg.Informers.SlicesOf(key))}
	c.mu.Lock()
	var loc local
	if l := c.local[key]; l != nil {
		loc = *l
	}
	c.mu.Unlock()
	st.ReconcileTime = loc.reconciled

	var merged mcs.Result
	haveMerge := false
	if exported {
		if r, _, err := merge(svc); err == nil {
			merged, haveMerge = r, true
		}
	}
	switch {
	case haveMerge:
		st.Type, st.Ports, st.SessionAffinity = merged.Type, merged.Ports, merged.SessionAffinity
		if cfg := merged.SessionAffinityConfig; cfg != nil && cfg.ClientIP != nil && cfg.ClientIP.TimeoutSeconds != nil {
			st.SessionAffinityTimeout = time.Duration(*cfg.ClientIP.TimeoutSeconds) * time.Second
		}
	case imp != nil:
		st.Type, st.Ports, st.SessionAffinity = imp.Spec.Type, imp.Spec.Ports, imp.Spec.SessionAffinity
	}
	switch {
	case imp != nil && len(imp.Spec.IPs) > 0:
		st.IPs = slices.Clone(imp.Spec.IPs)
	case st.Type == mcsv1beta1.ClusterSetIP:
		st.IPs = c.vips.peek(key)
	}

	sources := c.cfg.Store.Sources()
	now := time.Now()
	for _, e := range svc.Exports {
		cs := ClusterStatus{Cluster: e.Cluster, Revision: e.Revision, Origin: e.Origin, Generation: e.Generation,
			ObserveTime: e.ObserveTime, LastHeard: e.ReceiveTime}
		cs.Endpoints, cs.ReadyEndpoints = counts(e.Endpoints)
		if t := e.Endpoints.GetExport().GetExportCreateTime(); t != nil {
			cs.ExportCreated = t.AsTime()
		}
		if src, ok := sources[e.Cluster]; ok && e.Origin == exports.OriginWatch {
			cs.Stale = !src.Connected
			cs.LastHeard = src.LastHeard
			if src.Connected {
				cs.LastHeard = now
			}
		}
		if err := loc.invalid[e.Cluster]; err != nil {
			cs.InvalidMessage = err.Error()
		}
		st.Clusters = append(st.Clusters, cs)
	}

	if imp != nil {
		for _, cond := range imp.Status.Conditions {
			if cond.Type == ConditionConflict && haveMerge {
				continue // computed below, with the clusters involved
			}
			st.Conditions = append(st.Conditions, Condition{Type: cond.Type, Status: cond.Status, Reason: cond.Reason,
				Message: cond.Message, LastTransition: cond.LastTransitionTime.Time})
		}
	}
	if haveMerge {
		cond := Condition{Type: ConditionConflict, Status: metav1.ConditionFalse, Reason: mcs.ReasonNoConflicts, Message: "the exports agree"}
		if len(merged.Conflicts) > 0 {
			cond = Condition{Type: ConditionConflict, Status: metav1.ConditionTrue, Reason: merged.ConflictReason(), Message: merged.ConflictMessage()}
			for _, cf := range merged.Conflicts {
				for _, cl := range cf.Clusters {
					if !slices.Contains(cond.Clusters, cl) {
						cond.Clusters = append(cond.Clusters, cl)
					}
				}
			}
		}
		if imp != nil {
			for _, old := range imp.Status.Conditions {
				if old.Type == ConditionConflict && old.Status == cond.Status {
					cond.LastTransition = old.LastTransitionTime.Time
				}
			}
		}
		st.Conditions = append(st.Conditions, cond)
	}
	if loc.problem != nil {
		st.Conditions = replaceCondition(st.Conditions, *loc.problem)
	}
	if exported && !c.cfg.Informers.NamespaceExists(key.Namespace) {
		st.Conditions = replaceCondition(st.Conditions, Condition{Type: ConditionNamespaceMissing, Status: metav1.ConditionTrue,
			Reason: ReasonNamespaceMissing, Message: "namespace " + key.Namespace + " does not exist in this cluster; it is not created"})
	}
	slices.SortFunc(st.Conditions, func(a, b Condition) int {
		switch {
		case a.Type < b.Type:
			return -1
		case a.Type > b.Type:
			return 1
		}
		return 0
	})
	return st, true
}

func replaceCondition(conds []Condition, c Condition) []Condition {
	for i := range conds {
		if conds[i].Type == c.Type {
			conds[i] = c
			return conds
		}
	}
	return append(conds, c)
}

// Keys returns the imports of a namespace (every namespace when empty):
// the exported services and the importer's ServiceImports, sorted.
func (c *Controller) Keys(namespace string) []exports.Key {
	seen := map[exports.Key]bool{}
	var out []exports.Key
	add := func(k exports.Key) {
		if (namespace == "" || k.Namespace == namespace) && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	for _, k := range c.cfg.Store.Keys() {
		add(k)
	}
	for _, si := range c.cfg.Informers.Imports() {
		add(exports.Key{Namespace: si.Namespace, Name: si.Name})
	}
	slices.SortFunc(out, exports.Key.Compare)
	return out
}
