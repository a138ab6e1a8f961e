package decide

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/mcsnames"
)

var (
	callerA      = Caller{Principal: "spiffe://plexus.local/clusterset/east/cluster/a/membership", Clusterset: "east", Cluster: "a"}
	callerB      = Caller{Principal: "spiffe://plexus.local/clusterset/east/cluster/b/membership", Clusterset: "east", Cluster: "b"}
	callerWestA  = Caller{Principal: "spiffe://plexus.local/clusterset/west/cluster/a/membership", Clusterset: "west", Cluster: "a"}
	callerFleet  = Caller{Principal: "spiffe://plexus.local/clusterset/east/fleet/repair", Clusterset: "east"}
	callerShared = Caller{Principal: "spiffe://plexus.local/membership", Shared: true}
	callerAnon   = Caller{Shared: true}

	podA      = Owner{Cluster: "a", Kind: "Pod", Namespace: "ns", Name: "web-0", UID: "u1"}
	podB      = Owner{Cluster: "b", Kind: "Pod", Namespace: "ns", Name: "web-0", UID: "u2"}
	vipOwner  = Owner{Kind: mcsnames.OwnerKindClusterSetService, Namespace: "ns", Name: "web"}
	noCluster = Owner{Kind: "Pod", Namespace: "ns", Name: "stray"}
)

// TestAccess: who may do what to whose allocations, for every kind of
// caller and owner.
func TestAccess(t *testing.T) {
	east := Access{Clusterset: "east"}
	strict := Access{Clusterset: "east", RequireClusterIdentities: true}
	anyset := Access{}
	tests := []struct {
		name   string
		access Access
		caller Caller
		owner  Owner
		// allocate, release and read are the refusals of each operation
		// (nil: allowed).
		allocate, release, read error
	}{
		{name: "own pod", access: east, caller: callerA, owner: podA},
		{name: "other cluster's pod", access: east, caller: callerA, owner: podB,
			allocate: ErrOwnerOutsideCluster, release: ErrOwnerOutsideCluster, read: ErrOwnerOutsideCluster},
		{name: "VIP by a member", access: east, caller: callerA, owner: vipOwner, release: ErrFleetRightsRequired},
		{name: "owner of no cluster that is no VIP", access: east, caller: callerA, owner: noCluster,
			allocate: ErrOwnerOutsideCluster, release: ErrFleetRightsRequired},
		{name: "fleet, any pod", access: east, caller: callerFleet, owner: podB},
		{name: "fleet, VIP", access: east, caller: callerFleet, owner: vipOwner},
		{name: "shared, any pod", access: east, caller: callerShared, owner: podB},
		{name: "shared, VIP", access: east, caller: callerShared, owner: vipOwner},
		{name: "anonymous without identities required", access: east, caller: callerAnon, owner: podA},
		{name: "other clusterset", access: east, caller: callerWestA, owner: podA,
			allocate: ErrClustersetMismatch, release: ErrClustersetMismatch, read: ErrClustersetMismatch},
		{name: "other clusterset when any is accepted", access: anyset, caller: callerWestA, owner: podA},
		{name: "shared refused", access: strict, caller: callerShared, owner: podA,
			allocate: ErrSharedIdentityRefused, release: ErrSharedIdentityRefused, read: ErrSharedIdentityRefused},
		{name: "anonymous refused", access: strict, caller: callerAnon, owner: vipOwner,
			allocate: ErrSharedIdentityRefused, release: ErrSharedIdentityRefused, read: ErrSharedIdentityRefused},
		{name: "strict, own pod", access: strict, caller: callerA, owner: podA},
		{name: "strict, fleet releases a VIP", access: strict, caller: callerFleet, owner: vipOwner},
	}
	check := func(t *testing.T, op string, want, got error, owner Owner) {
		t.Helper()
		if want == nil {
			require.NoError(t, got, op)
			return
		}
		require.ErrorIs(t, got, want, op)
		var r *Refusal
		require.True(t, errors.As(got, &r), op)
		if r.HasOwner {
			require.Equal(t, owner, r.Owner, op)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, "allocate", tt.allocate, tt.access.Allocate(tt.caller, tt.owner), tt.owner)
			check(t, "release", tt.release, tt.access.Release(tt.caller, tt.owner), tt.owner)
			check(t, "read", tt.read, tt.access.Read(tt.caller, tt.owner), tt.owner)
		})
	}
}

func TestAccessListAndWatch(t *testing.T) {
	east := Access{Clusterset: "east"}
	scope, err := east.List(callerA, "")
	require.NoError(t, err)
	require.Equal(t, "a", scope, "a member sees its cluster's and the VIPs")
	scope, err = east.List(callerA, "a")
	require.NoError(t, err)
	require.Equal(t, "a", scope)
	_, err = east.List(callerA, "b")
	require.ErrorIs(t, err, ErrOwnerOutsideCluster)
	for _, c := range []Caller{callerFleet, callerShared, callerAnon} {
		scope, err = east.List(c, "b")
		require.NoError(t, err)
		require.Empty(t, scope, "%+v sees all", c)
		require.NoError(t, east.Watch(c))
	}
	_, err = east.List(callerWestA, "")
	require.ErrorIs(t, err, ErrClustersetMismatch)
	require.ErrorIs(t, east.Watch(callerA), ErrFleetRightsRequired)
	require.ErrorIs(t, Access{RequireClusterIdentities: true}.Watch(callerShared), ErrSharedIdentityRefused)
}

// TestReleaseChecksTheHolderFirst: the caller's rights are decided on the
// holder before any guard; a right etag or uid lifts nothing.
func TestReleaseChecksTheHolderFirst(t *testing.T) {
	addr := netip.MustParseAddr("10.0.0.1")
	h := Holding{Pool: "p", Address: addr, Owner: podA, Revision: 7}
	east := Access{Clusterset: "east"}
	for _, req := range []ReleaseRequest{
		{Pool: "p", Address: addr},
		{Pool: "p", Address: addr, Etag: "7", OwnerUID: "u1"},
		{Pool: "p", Address: addr, Etag: "6"},
	} {
		req.Caller, req.Access = &callerB, east
		_, err := Release(req, h)
		require.ErrorIs(t, err, ErrOwnerOutsideCluster)
	}
	st, err := Release(ReleaseRequest{Pool: "p", Address: addr, Etag: "7", Caller: &callerA, Access: east}, h)
	require.NoError(t, err)
	require.Equal(t, Free, st)
	h.Releasing = true
	_, err = Release(ReleaseRequest{Pool: "p", Address: addr, Caller: &callerB, Access: east}, h)
	require.ErrorIs(t, err, ErrOwnerOutsideCluster, "refused even while another release commits")
}

// TestAccessManagePools: only fleet (or, until refused, shared) identities
// create, change or delete pools: a forced deletion releases every
// cluster's allocations in the pool.
func TestAccessManagePools(t *testing.T) {
	east := Access{Clusterset: "east"}
	for _, c := range []Caller{callerA, callerB} {
		require.ErrorIs(t, east.ManagePools(c), ErrFleetRightsRequired, c.Principal)
	}
	require.NoError(t, east.ManagePools(callerFleet))
	require.NoError(t, east.ManagePools(callerShared))
	require.ErrorIs(t, east.ManagePools(callerWestA), ErrClustersetMismatch)
	require.ErrorIs(t, Access{RequireClusterIdentities: true}.ManagePools(callerShared), ErrSharedIdentityRefused)
}
