package decide_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/repair/decide"
)

// TestClusterBoundRepair: a repair whose identity is bound to its cluster
// releases its cluster's leaks and reports leaked clusterset VIPs and
// stalled deletions as left to a repair with fleet rights, which releases
// and finishes them.
func TestClusterBoundRepair(t *testing.T) {
	web := pod("web-0", "u1")
	vip := decide.Owner{Kind: "ClusterSetService", Namespace: "default", Name: "gone"}
	in := input(view(), alloc("p", "10.0.0.1", web, "4", old), alloc("p", "10.0.0.2", vip, "5", old))
	in.Pools = append(in.Pools, deleting("9", old))
	in.Allocations = append(in.Allocations, remains(2)...)
	in.Config.MaxReleaseFraction = 1

	bound := in
	bound.Config.ClusterBound = true
	out, err := passes(4, bound)
	require.NoError(t, err)
	require.Equal(t, []decide.Release{{Pool: "p", Address: netip.MustParseAddr("10.0.0.1"), Etag: "4", OwnerUID: "u1", Owner: web}}, out.Releases)
	f, ok := findingAt(out.Findings, decide.KindLeak, "10.0.0.2")
	require.True(t, ok, "the leaked VIP is reported")
	require.Equal(t, decide.ActionReported, f.Action)
	require.Contains(t, f.Message, "left to a repair with fleet rights")
	require.Empty(t, out.PoolDeletes)
	var stalled []decide.Finding
	for _, f := range out.Findings {
		if f.Kind == decide.KindStalledDeletion {
			stalled = append(stalled, f)
		}
	}
	require.Len(t, stalled, 1)
	require.Equal(t, decide.ActionReported, stalled[0].Action)
	require.Contains(t, stalled[0].Message, "left to a repair with fleet rights")

	out, err = passes(4, in)
	require.NoError(t, err)
	require.Len(t, out.Releases, 2, "with fleet rights, the VIP too")
	require.Equal(t, []decide.PoolDelete{{Pool: "d", Etag: "9"}}, out.PoolDeletes)
}
