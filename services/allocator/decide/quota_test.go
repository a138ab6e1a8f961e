package decide

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckClusterQuota(t *testing.T) {
	for _, tc := range []struct {
		name    string
		quota   uint32
		owner   Owner
		creator string
		held    int
		err     bool
	}{
		{name: "no quota", quota: 0, owner: podA, held: 1 << 20},
		{name: "below", quota: 3, owner: podA, held: 2},
		{name: "reached", quota: 3, owner: podA, held: 3, err: true},
		{name: "beyond, after the quota was lowered", quota: 3, owner: podA, held: 7, err: true},
		{name: "a VIP of a fleet caller is not counted", quota: 1, owner: vipOwner, held: 5},
		{name: "a VIP counts against the cluster that creates it", quota: 3, owner: vipOwner, creator: "a", held: 3, err: true},
		{name: "a VIP below its creator's quota", quota: 3, owner: vipOwner, creator: "a", held: 2},
		{name: "an owner's cluster wins over its creator's", quota: 3, owner: podA, creator: "b", held: 3, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckClusterQuota("p", tc.quota, ChargedCluster(tc.owner, tc.creator), tc.held)
			if !tc.err {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrClusterQuotaExceeded)
			require.ErrorContains(t, err, `cluster "a"`)
		})
	}
}

func TestChargedCluster(t *testing.T) {
	require.Equal(t, "a", ChargedCluster(podA, ""), "an owner of a cluster, created by a fleet caller")
	require.Equal(t, "a", ChargedCluster(podA, "b"))
	require.Equal(t, "c", ChargedCluster(vipOwner, "c"), "a VIP: its creator")
	require.Empty(t, ChargedCluster(vipOwner, ""), "a VIP a fleet caller created")
}

func TestUpdateClusterQuota(t *testing.T) {
	cur := PoolSpec{CIDRs: []string{"10.0.0.0/24"}, ClusterQuota: 5}
	got, err := Update(cur, true, PoolSpec{ClusterQuota: 9}, UpdateMask{Labels: true})
	require.NoError(t, err)
	require.Equal(t, uint32(5), got.ClusterQuota, "kept unless the mask names it")
	got, err = Update(cur, true, PoolSpec{}, UpdateMask{ClusterQuota: true})
	require.NoError(t, err)
	require.Zero(t, got.ClusterQuota, "cleared when the mask names it")
	require.NotEqual(t, PoolRequestKey("p", cur), PoolRequestKey("p", PoolSpec{CIDRs: cur.CIDRs}), "a creation's key covers the quota")
}
