package materialize

import "github.com/plexusnet/plexus/internal/exportpolicy"

// Admit returns v with only the exports the clusterset policy (p, nil for
// none) lets into this cluster: none when the cluster is outside the
// namespace's import set, and none of a source cluster the policy does not
// let export the namespace, whatever that cluster's membership decided
// from its own copy of the policy. The clusters left out are in Refused,
// with the decision that refused them; their slices go at once, since the
// policy, not the source, has the last word on them.
func Admit(v View, p *exportpolicy.Policy) View {
	imp := p.MayImport(v.Namespace, v.LocalCluster)
	refused := map[string]exportpolicy.Decision{}
	var kept []Export
	for _, e := range v.Exports {
		d := imp
		if d.Allowed {
			d = p.MayExport(v.Namespace, e.Cluster)
		}
		if d.Allowed {
			kept = append(kept, e)
			continue
		}
		refused[e.Cluster] = d
	}
	if !imp.Allowed {
		for cl := range v.Slices {
			refused[cl] = imp
		}
	}
	if len(refused) == 0 {
		return v
	}
	v.Exports, v.Refused = kept, refused
	return v
}
