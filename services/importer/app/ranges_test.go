package app_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexusnet/plexus/internal/fleet"
	"github.com/plexusnet/plexus/services/importer/materialize"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// addressesIn lists the endpoint addresses of slices, sorted.
func addressesIn(ss []discovery.EndpointSlice) []string {
	var out []string
	for _, s := range ss {
		for _, ep := range s.Endpoints {
			out = append(out, ep.Addresses...)
		}
	}
	slices.Sort(out)
	return out
}

// A member's endpoints outside the ranges its sources-file entry declares
// are never written; the import says so (EndpointsDropped), and widening
// the ranges writes them without anything else changing.
func TestEndpointsOutsideTheMembersRanges(t *testing.T) {
	e := newEnv(t)
	e.namespace(t, "shop")
	east := sourcetest.Start(t, "east")
	east.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, "10.1.0.1", "10.1.0.2", "10.2.0.9"))
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, fleet.EditFile(path, func([]fleet.Member) ([]fleet.Member, error) {
		return []fleet.Member{{Name: "east", Addr: east.Addr(), Ranges: []string{"10.1.0.0/16"}}}, nil
	}))
	o := e.options()
	o.SourcesFile = path
	im := e.startImporter(t, o)

	require.Eventually(t, func() bool {
		si, err := e.serviceImport("shop", "web")
		if err != nil {
			return false
		}
		c := condition(si, materialize.ConditionEndpointsDropped)
		return c != nil && c.Status == metav1.ConditionTrue
	}, waitFor, tick)
	idle(t, im)
	require.Equal(t, []string{"10.1.0.1", "10.1.0.2"}, addressesIn(e.slicesOf(t, "shop", "web")), "10.2.0.9 is never written")
	si, err := e.serviceImport("shop", "web")
	require.NoError(t, err)
	require.Contains(t, condition(si, materialize.ConditionEndpointsDropped).Message, "east: 1 of 3 endpoints (address outside the ranges its cluster declares: 10.2.0.9 is in none of cluster east's ranges)")
	require.Equal(t, 1.0, counter(t, im.registry, "plexus_importer_dropped_endpoints_total", map[string]string{"reason": "out_of_range"}))

	require.NoError(t, fleet.EditFile(path, func(ms []fleet.Member) ([]fleet.Member, error) {
		ms[0].Ranges = append(ms[0].Ranges, "10.2.0.0/16")
		return ms, nil
	}))
	require.Eventually(t, func() bool {
		return fmt.Sprint(addressesIn(e.slicesOf(t, "shop", "web"))) == "[10.1.0.1 10.1.0.2 10.2.0.9]"
	}, waitFor, tick)
	require.Eventually(t, func() bool {
		si, err := e.serviceImport("shop", "web")
		require.NoError(t, err)
		return condition(si, materialize.ConditionEndpointsDropped).Status == metav1.ConditionFalse
	}, waitFor, tick)
}
