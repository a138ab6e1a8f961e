package materialize

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	discovery "k8s.io/api/discovery/v1"

	islices "github.com/plexusnet/plexus/services/importer/slices"
)

func TestLocalFirstSetting(t *testing.T) {
	for v, want := range map[string]int{"true": 1, "TRUE": 1, " 3 ": 3, "1000": 1000, "false": 0, "": 0, "0": 0, "-1": 0, "1001": 0, "two": 0} {
		require.Equal(t, want, LocalFirst(map[string]string{AnnotationLocalFirst: v}), "value %q", v)
	}
	require.Zero(t, LocalFirst(nil), "unset")
}

// TestSteer: local first holds while the member cluster exports at least
// Min ready endpoints itself and its nodes have zones; below that, or
// without the setting, nothing is hinted.
func TestSteer(t *testing.T) {
	unready := endpoints(5, 6)[0]
	no := false
	unready.Conditions.Ready = &no
	local := export("member", time.Hour, 80, append(endpoints(0, 2), unready)...)
	remote := export("east", 2*time.Hour, 80, endpoints(10, 13)...)
	v := view(remote, local)
	v.LocalCluster = "member"
	decide := func(setting string) Decision {
		d := Decide(v)
		d.Merged.Annotations = map[string]string{AnnotationLocalFirst: setting}
		return d
	}
	zones := []string{"zone-b", "zone-a"}
	for _, tc := range []struct {
		name    string
		setting string
		zones   []string
		local   bool
	}{
		{"two ready of at least one", "true", zones, true},
		{"two ready of at least two", "2", zones, true},
		{"two ready of at least three: fail over", "3", zones, false},
		{"off", "false", zones, false},
		{"nodes without zones", "true", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Steer(v, decide(tc.setting), tc.zones)
			require.Equal(t, tc.local, s.Local())
			if s.Min > 0 {
				require.Equal(t, 2, s.Ready, "the unready local endpoint does not count")
			}
			if tc.local {
				require.Equal(t, []string{"zone-a", "zone-b"}, s.Zones)
			}
		})
	}
	other := v
	other.LocalCluster = "west" // exports nothing itself
	require.False(t, Steer(other, decide("true"), zones).Local(), "no local endpoints: every cluster's")
}

// TestSteeredHints: while local first holds, local endpoints carry the
// local zones and the others RemoteZone; when it ends, the endpoints carry
// what their export says again. An export's own groups are never changed
// in place.
func TestSteeredHints(t *testing.T) {
	g := []islices.Group{{AddressType: discovery.AddressTypeIPv4, Endpoints: endpoints(0, 2)}}
	on := Steering{Zones: []string{"a1", "a2"}}
	zonesOf := func(gs []islices.Group) [][]string {
		var out [][]string
		for _, ep := range gs[0].Endpoints {
			var z []string
			if ep.Hints != nil {
				for _, f := range ep.Hints.ForZones {
					z = append(z, f.Name)
				}
			}
			out = append(out, z)
		}
		return out
	}
	localG := steered(g, "member", "member", on)
	require.Equal(t, [][]string{{"a1", "a2"}, {"a1", "a2"}}, zonesOf(localG))
	require.Equal(t, [][]string{{RemoteZone}, {RemoteZone}}, zonesOf(steered(g, "east", "member", on)))
	require.Nil(t, g[0].Endpoints[0].Hints, "the export's endpoints are not changed")
	g[0].Endpoints[1].Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: "source-zone"}}}
	require.Equal(t, [][]string{nil, {"source-zone"}}, zonesOf(steered(g, "member", "member", Steering{})), "off: the export's own hints")
	require.Same(t, &g[0].Endpoints[0], &steered(g, "member", "member", Steering{})[0].Endpoints[0], "nothing to change: the same groups")

	p, err := islices.New()
	require.NoError(t, err)
	v := view(export("member", time.Hour, 80, endpoints(0, 1)...), export("east", time.Hour, 80, endpoints(10, 11)...))
	v.LocalCluster = "member"
	for _, cp := range PlanSlices(p, v, derivedObj(), on, func(string) bool { return true }) {
		want := RemoteZone
		if cp.Cluster == "member" {
			want = "a1"
		}
		require.Equal(t, want, cp.Plan.Create[0].Endpoints[0].Hints.ForZones[0].Name, "cluster %s", cp.Cluster)
	}
}
