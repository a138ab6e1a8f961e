package reconcile

import (
	"slices"
	"time"

	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/materialize"
)

// Source is what the importer knows of one cluster's stream or pushes for
// an import, beside what the core reports.
type Source struct {
	Revision uint64
	// LastHeard is when the cluster was last heard from: now for a
	// connected source, the last update for a pushing cluster.
	LastHeard time.Time
	// Stale is true while a configured source is unreachable and its last
	// known endpoints are kept.
	Stale         bool
	ExportCreated time.Time
	Origin        exports.Origin
	Generation    uint64
	ObserveTime   time.Time
}

// Status is an import as this replica sees it: the core's status value
// (materialize.Report, the same that is written on the ServiceImport) and
// what the importer knows of each source.
type Status struct {
	materialize.Status
	Key exports.Key
	// Sources are by cluster, for the clusters that export the service.
	Sources map[string]Source
	// ReconcileTime is zero on a replica that never reconciled the import.
	ReconcileTime time.Time
}

// Status returns the import of key; false when no cluster exports it and no
// ServiceImport of the importer's exists for it.
func (c *Reconciler) Status(key exports.Key) (Status, bool) {
	v := c.view(key, nil)
	d := materialize.Decide(v)
	if v.Import != nil && !mcsnames.Managed(v.Import.Labels) {
		v.Import = nil
	}
	if len(v.Exports) == 0 && v.Import == nil {
		return Status{}, false
	}
	c.mu.Lock()
	var loc local
	if l := c.local[key]; l != nil {
		loc = *l
	}
	c.mu.Unlock()
	o, written := loc.outcome, v.Slices
	if d.Verdict != materialize.Materialize {
		o = nil
	}
	if o != nil && loc.written != nil {
		written = loc.written
	}
	st := Status{Status: materialize.Report(v, d, written, o), Key: key, ReconcileTime: loc.reconciled, Sources: map[string]Source{}}
	if len(st.IPs) == 0 && d.ClusterSetIP() {
		st.IPs = c.cfg.VIPs.Peek(key)
	}
	svc, _ := c.cfg.Store.Get(key)
	sources := c.cfg.Store.Sources()
	now := time.Now()
	for _, e := range svc.Exports {
		s := Source{Revision: e.Revision, Origin: e.Origin, Generation: e.Generation, ObserveTime: e.ObserveTime, LastHeard: e.ReceiveTime}
		if t := e.Endpoints.GetExport().GetExportCreateTime(); t != nil {
			s.ExportCreated = t.AsTime()
		}
		if src, ok := sources[e.Cluster]; ok && e.Origin == exports.OriginWatch {
			s.Stale, s.LastHeard = !src.Connected, src.LastHeard
			if src.Connected {
				s.LastHeard = now
			}
		}
		st.Sources[e.Cluster] = s
	}
	return st, true
}

// Keys returns the imports of a namespace (every namespace when empty):
// the exported services and the importer's ServiceImports, sorted.
func (c *Reconciler) Keys(namespace string) []exports.Key {
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
