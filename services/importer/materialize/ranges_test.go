package materialize

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	islices "github.com/plexusnet/plexus/services/importer/slices"
)

// Endpoints of a cluster outside the ranges it declares are dropped with
// ErrOutOfRange and never planned; a cluster that declares none keeps
// every address.
func TestPlanSlicesDropsEndpointsOutsideTheClustersRanges(t *testing.T) {
	p, err := islices.New()
	require.NoError(t, err)
	eps := endpoints(0, 3) // 10.1.0.1 .. 10.1.0.3
	stray := endpoints(0, 1)[0]
	stray.Addresses = []string{"10.2.0.9"}
	mapped := endpoints(0, 1)[0]
	mapped.Addresses = []string{"::ffff:10.1.0.77"} // the packer refuses it; the range check does not hide that
	east := export("east", time.Hour, 80, append(eps, stray, mapped)...)
	east.Ranges = []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24"), netip.MustParsePrefix("fd00::/8")}
	west := export("west", time.Minute, 80, stray)

	plans := map[string]ClusterPlan{}
	for _, cp := range PlanSlices(p, view(east, west), derivedObj(), Steering{}, func(string) bool { return true }) {
		plans[cp.Cluster] = cp
	}
	require.Len(t, plans["east"].Plan.Create, 1)
	var written []string
	for _, ep := range plans["east"].Plan.Create[0].Endpoints {
		written = append(written, ep.Addresses...)
	}
	require.Equal(t, []string{"10.1.0.1", "10.1.0.2", "10.1.0.3"}, written)
	require.Equal(t, 5, plans["east"].Exported)
	require.Len(t, plans["east"].Plan.Dropped, 2)
	out := plans["east"].Plan.Dropped[0]
	require.ErrorIs(t, out.Err, ErrOutOfRange)
	require.Equal(t, []string{"10.2.0.9"}, out.Addresses)
	require.Contains(t, out.Err.Error(), "10.2.0.9 is in none of cluster east's ranges")
	require.False(t, errors.Is(plans["east"].Plan.Dropped[1].Err, ErrOutOfRange), "an address in range that the API server would refuse is the packer's to drop")

	require.Len(t, plans["west"].Plan.Create, 1, "a cluster that declares no ranges keeps every address")
	require.Empty(t, plans["west"].Plan.Dropped)

	// The import says so: EndpointsDropped, naming the cluster and why.
	v := view(east, west)
	d := Decide(v)
	st := Report(v, d, nil, &Outcome{Clusters: map[string]ClusterOutcome{
		"east": {Exported: 5, Dropped: plans["east"].Plan.Dropped},
	}})
	c := condition(st, ConditionEndpointsDropped)
	require.Equal(t, metav1.ConditionTrue, c.Status)
	require.Equal(t, []string{"east"}, c.Clusters)
	require.Contains(t, c.Message, "east: 2 of 5 endpoints (address outside the ranges its cluster declares: 10.2.0.9 is in none of cluster east's ranges)")
}

func TestInRangesKeepsGroupsWithoutRanges(t *testing.T) {
	g := []islices.Group{{AddressType: discovery.AddressTypeIPv4, Endpoints: endpoints(0, 2)}}
	out, dropped := inRanges(g, nil, "east")
	require.Equal(t, g, out)
	require.Empty(t, dropped)
}
