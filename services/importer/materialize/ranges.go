package materialize

import (
	"errors"
	"fmt"
	"net/netip"

	discovery "k8s.io/api/discovery/v1"

	islices "github.com/plexusnet/plexus/services/importer/slices"
)

// ErrOutOfRange is why an endpoint whose address lies outside the ranges
// its cluster declares is dropped.
var ErrOutOfRange = errors.New("address outside the ranges its cluster declares")

// inRanges keeps of groups the endpoints whose every address lies in one
// of ranges, and returns the others as dropped, indexed as in groups. No
// ranges: every address is kept, and groups is returned as it is.
// Addresses that do not parse are left for the packer to refuse.
func inRanges(groups []islices.Group, ranges []netip.Prefix, cluster string) ([]islices.Group, []islices.Dropped) {
	if len(ranges) == 0 {
		return groups, nil
	}
	var dropped []islices.Dropped
	out := make([]islices.Group, len(groups))
	for i, g := range groups {
		out[i] = g
		out[i].Endpoints = make([]discovery.Endpoint, 0, len(g.Endpoints))
		for j, ep := range g.Endpoints {
			if bad, ok := outside(ep.Addresses, ranges); ok {
				dropped = append(dropped, islices.Dropped{Group: i, Endpoint: j, Addresses: ep.Addresses,
					Err: fmt.Errorf("%w: %s is in none of cluster %s's ranges", ErrOutOfRange, bad, cluster)})
				continue
			}
			out[i].Endpoints = append(out[i].Endpoints, ep)
		}
	}
	return out, dropped
}

// outside returns the first address that parses and lies in none of
// ranges.
func outside(addrs []string, ranges []netip.Prefix) (string, bool) {
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			continue
		}
		ip = ip.Unmap()
		in := false
		for _, r := range ranges {
			if r.Contains(ip) {
				in = true
				break
			}
		}
		if !in {
			return a, true
		}
	}
	return "", false
}
