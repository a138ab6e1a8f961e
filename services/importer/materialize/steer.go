package materialize

import (
	"slices"
	"strconv"
	"strings"

	discovery "k8s.io/api/discovery/v1"

	islices "github.com/plexusnet/plexus/services/importer/slices"
)

// AnnotationLocalFirst, among a ServiceExport's exportedAnnotations (so on
// the ServiceImport too), keeps every connection from a member cluster on
// that cluster's own endpoints while it has at least N ready ones ("true"
// or "1": one; "3": three), and lets it fail over to the other clusters'
// when fewer remain. The importer steers through what kube-proxy already
// reads: topology hints on the derived Service's EndpointSlices.
const AnnotationLocalFirst = "multicluster.plexus.io/local-first"

// RemoteZone is the one zone hint of other clusters' endpoints while local
// first holds: a zone no node has, so kube-proxy never picks them then.
const RemoteZone = "plexus-remote-clusters"

// maxLocalFirst bounds N.
const maxLocalFirst = 1000

// LocalFirst reads the setting from an import's annotations: the ready
// local endpoints needed to keep traffic local, or 0 when it is off or
// unreadable (a value that is not true, false or 1..1000).
func LocalFirst(annotations map[string]string) int {
	v, ok := annotations[AnnotationLocalFirst]
	if !ok {
		return 0
	}
	switch v = strings.TrimSpace(strings.ToLower(v)); v {
	case "true":
		return 1
	case "false", "":
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxLocalFirst {
		return 0
	}
	return n
}

// Steering is how an import's slices steer the member cluster's traffic.
type Steering struct {
	// Zones is the hint of every local endpoint (the zones of the member
	// cluster's nodes); other clusters' endpoints get RemoteZone. Empty:
	// no hints, every ready endpoint of every cluster takes traffic.
	Zones []string
	// Min and Ready are the setting and the ready local endpoints it was
	// held against (Min 0: local first is off).
	Min, Ready int
}

// Local reports whether traffic stays on the local cluster.
func (s Steering) Local() bool { return len(s.Zones) > 0 }

// Steer decides the steering of a materialised import: local first holds
// while the member cluster exports at least Min ready endpoints itself and
// its nodes have zones (kube-proxy matches hints against its node's zone
// label).
func Steer(v View, d Decision, zones []string) Steering {
	s := Steering{Min: LocalFirst(d.Merged.Annotations)}
	if s.Min == 0 || v.LocalCluster == "" {
		return s
	}
	if e, ok := v.Export(v.LocalCluster); ok {
		s.Ready = e.Ready
	}
	if s.Ready >= s.Min && len(zones) > 0 {
		s.Zones = slices.Sorted(slices.Values(zones))
	}
	return s
}

// steered returns cluster's groups with the hints the steering asks for:
// while local first holds, the local zones on local endpoints and
// RemoteZone on the others'. Otherwise, and when its endpoints already say
// so, groups is returned as it is: the hints the source cluster exported,
// if any, as without local first.
func steered(groups []islices.Group, cluster, local string, s Steering) []islices.Group {
	if !s.Local() {
		return groups
	}
	zones := []string{RemoteZone}
	if cluster == local {
		zones = s.Zones
	}
	want := &discovery.EndpointHints{}
	for _, z := range zones {
		want.ForZones = append(want.ForZones, discovery.ForZone{Name: z})
	}
	same := true
	for _, g := range groups {
		for _, ep := range g.Endpoints {
			same = same && hintsSay(ep.Hints, want)
		}
	}
	if same {
		return groups
	}
	out := make([]islices.Group, len(groups))
	for i, g := range groups {
		out[i] = g
		out[i].Endpoints = slices.Clone(g.Endpoints)
		for j := range out[i].Endpoints {
			out[i].Endpoints[j].Hints = want
		}
	}
	return out
}

func hintsSay(h, want *discovery.EndpointHints) bool {
	return h != nil && len(h.ForNodes) == 0 && slices.Equal(h.ForZones, want.ForZones)
}
