package selector

import "maps"

// Finder answers which Services of a namespace select a workload with the
// given labels, sorted by name. *Index is the Finder of the membership
// service.
type Finder interface {
	Select(namespace string, labels map[string]string) []ServiceKey
}

// Workload is one state of a workload as Affected sees it.
type Workload struct {
	Namespace string
	Labels    map[string]string
	// Fingerprint summarises everything of the workload that shows in an
	// endpoint (addresses, ports, readiness, deletion, placement), so that
	// two states with equal fingerprints give equal endpoints. The
	// endpoints package's Workload.Fingerprint computes one.
	Fingerprint uint64
}

// Affected returns the Services to reconcile after a workload went from prev
// to next, sorted: nil prev means the workload was added, nil next that it
// was deleted. It follows the Kubernetes EndpointSlice controller:
//   - added: the Services that select the new state;
//   - deleted: the Services that selected the old state;
//   - spec (fingerprint) changed: both the old and the new selections, since
//     the endpoint changed in every Service that still holds it;
//   - only labels changed: the Services that selected one state but not the
//     other, since those that select both see the same endpoint as before;
//   - nothing changed (a resync): none.
func Affected(f Finder, prev, next *Workload) []ServiceKey {
	switch {
	case prev == nil && next == nil:
		return nil
	case prev == nil:
		return f.Select(next.Namespace, next.Labels)
	case next == nil:
		return f.Select(prev.Namespace, prev.Labels)
	}
	switch {
	case prev.Fingerprint != next.Fingerprint || prev.Namespace != next.Namespace:
		return union(f.Select(prev.Namespace, prev.Labels), f.Select(next.Namespace, next.Labels))
	case !maps.Equal(prev.Labels, next.Labels):
		return symmetricDifference(f.Select(prev.Namespace, prev.Labels), f.Select(next.Namespace, next.Labels))
	default:
		return nil
	}
}

// union merges two sorted lists without duplicates.
func union(a, b []ServiceKey) []ServiceKey { return merge(a, b, true) }

// symmetricDifference returns the keys of two sorted lists that are in
// exactly one of them.
func symmetricDifference(a, b []ServiceKey) []ServiceKey { return merge(a, b, false) }

// merge merges two sorted lists without duplicates, keeping the keys in
// both only when common is set. An empty result is nil.
func merge(a, b []ServiceKey, common bool) []ServiceKey {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make([]ServiceKey, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch c := compareAt(a, i, b, j); {
		case c < 0:
			out = append(out, a[i])
			i++
		case c > 0:
			out = append(out, b[j])
			j++
		default:
			if common {
				out = append(out, a[i])
			}
			i++
			j++
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// compareAt compares a[i] with b[j], an exhausted list sorting last.
func compareAt(a []ServiceKey, i int, b []ServiceKey, j int) int {
	switch {
	case i == len(a):
		return 1
	case j == len(b):
		return -1
	default:
		return compareServiceKeys(a[i], b[j])
	}
}
