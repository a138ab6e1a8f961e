package materialize

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/plexusnet/plexus/internal/mcsnames"
	islices "github.com/plexusnet/plexus/services/importer/slices"
)

// ClusterPlan is what one source cluster's slices need.
type ClusterPlan struct {
	Cluster string
	// Plan holds the writes (none when the slices already hold the
	// desired endpoints) and the endpoints it dropped.
	Plan islices.Plan
	// Skipped is why no plan was made: the cluster's endpoints cannot be
	// used at all. Its slices are left as they are.
	Skipped error
	// Waiting is true when the cluster exports nothing for the service
	// but its word is not final yet (see Remove): its slices stay.
	Waiting bool
	// Exported counts the endpoints the cluster exports.
	Exported int
}

// clusters returns every cluster with an export or a slice, sorted.
func clusters(v View) []string {
	out := slices.Collect(maps.Keys(v.Slices))
	for _, e := range v.Exports {
		if _, ok := v.Slices[e.Cluster]; !ok {
			out = append(out, e.Cluster)
		}
	}
	slices.Sort(out)
	return out
}

// PlanSlices plans every source cluster's slices of a materialised import,
// owned by derived (as written), with the hints steer asks for. final
// reports whether a cluster's silence about the service is its last word,
// so that its slices may go.
func PlanSlices(p *islices.Packer, v View, derived *corev1.Service, steer Steering, final func(cluster string) bool) []ClusterPlan {
	var out []ClusterPlan
	for _, cl := range clusters(v) {
		cp := ClusterPlan{Cluster: cl}
		e, has := v.Export(cl)
		switch {
		case !has && !final(cl):
			cp.Waiting = true
		case has && v.Unchanged[cl]:
			cp.Exported = e.Endpoints
		case has && e.Unusable != nil:
			cp.Skipped = e.Unusable
		default:
			var desired []islices.Group
			if has {
				desired = steered(carriedPorts(e.Groups, e.Properties.Ports, derived.Spec.Ports), cl, v.LocalCluster, steer)
				cp.Exported = e.Endpoints
			}
			// Endpoints outside the cluster's ranges are dropped before
			// packing, so they are never written.
			desired, outOfRange := inRanges(desired, e.Ranges, cl)
			tmpl := islices.ImportTemplate(v.Namespace, derived.Name, derived.UID, v.Name, cl)
			plan, err := p.Plan(tmpl, desired, v.Slices[cl])
			plan.Dropped = append(outOfRange, plan.Dropped...)
			cp.Plan, cp.Skipped = plan, err
		}
		out = append(out, cp)
	}
	return out
}

// carriedPorts drops from groups the ports that the derived Service gives
// another port or protocol under the same name: another cluster's port of
// that name won the conflict. kube-proxy matches a slice's ports to the
// Service's by name, so a port left in would send the winner's traffic to
// this cluster's endpoints; without it they get none of that port's
// traffic, as the MCS API's port conflict resolution asks. groups is
// returned as it is when nothing is dropped.
func carriedPorts(groups []islices.Group, exported []mcsv1beta1.ServicePort, derived []corev1.ServicePort) []islices.Group {
	lost := map[string]bool{}
	for _, p := range exported {
		for _, d := range derived {
			if d.Name == p.Name && (d.Port != p.Port || d.Protocol != p.Protocol) {
				lost[p.Name] = true
			}
		}
	}
	if len(lost) == 0 {
		return groups
	}
	out := make([]islices.Group, len(groups))
	for i, g := range groups {
		out[i] = g
		out[i].Ports = slices.DeleteFunc(slices.Clone(g.Ports), func(p discovery.EndpointPort) bool {
			return p.Name != nil && lost[*p.Name] || p.Name == nil && lost[""]
		})
	}
	return out
}

// Removal is what goes when no cluster exports a service.
type Removal struct {
	// Slices are the slices to delete, by cluster: those of clusters
	// whose word is final.
	Slices map[string][]*discovery.EndpointSlice
	// Blocked is true while a cluster whose word is not final still has
	// slices: they stay, and with them the derived Service and the
	// ServiceImport that own them.
	Blocked bool
	// Derived and Import are the importer's objects to delete after the
	// slices (nil: none, or not the importer's, or Blocked).
	Derived *corev1.Service
	Import  *mcsv1beta1.ServiceImport
}

// Remove returns what to take away of a service no cluster exports.
func Remove(v View, final func(cluster string) bool) Removal {
	r := Removal{Slices: map[string][]*discovery.EndpointSlice{}}
	for cl, ss := range v.Slices {
		if final(cl) {
			r.Slices[cl] = ss
		} else {
			r.Blocked = true
		}
	}
	if r.Blocked {
		return r
	}
	if v.Derived != nil && mcsnames.Managed(v.Derived.Labels) {
		r.Derived = v.Derived
	}
	if v.Import != nil && mcsnames.Managed(v.Import.Labels) {
		r.Import = v.Import
	}
	return r
}

// Applied is what became of one plan: the writes that succeeded, in the
// order the runner makes them (creates, updates, deletes), up to the first
// that failed.
type Applied struct {
	Created []*discovery.EndpointSlice
	Updated []*discovery.EndpointSlice
	Deleted []*discovery.EndpointSlice
}

// AfterWrites returns the slices a cluster holds once the applied writes
// of a plan landed on existing: what was written, whether or not the whole
// plan was.
func AfterWrites(existing []*discovery.EndpointSlice, a Applied) []*discovery.EndpointSlice {
	gone := map[string]bool{}
	for _, s := range a.Deleted {
		gone[s.Name] = true
	}
	updated := map[string]*discovery.EndpointSlice{}
	for _, s := range a.Updated {
		updated[s.Name] = s
	}
	out := make([]*discovery.EndpointSlice, 0, len(existing)+len(a.Created))
	for _, s := range existing {
		switch {
		case gone[s.Name]:
		case updated[s.Name] != nil:
			out = append(out, updated[s.Name])
		default:
			out = append(out, s)
		}
	}
	return append(out, a.Created...)
}

// countSlices returns the endpoints and ready endpoints the slices hold.
func countSlices(ss []*discovery.EndpointSlice) (total, ready int) {
	for _, s := range ss {
		for _, ep := range s.Endpoints {
			total++
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				ready++
			}
		}
	}
	return total, ready
}
