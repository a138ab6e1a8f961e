package kubetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// WatchWrites sees a write that was undone before Settle (a slice created
// and deleted: the resourceVersions alone do not show it), and one that
// stays; a Lease renewal named as such is not churn.
func TestWatchWrites(t *testing.T) {
	c := kubetest.StartAPIServer(t, kubetest.StartEtcd(t), kubetest.WithName("writes"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The API server makes the kubernetes Service a moment after it
	// serves: the watch begins once it has.
	require.Eventually(t, func() bool {
		_, err := c.Clientset.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		return err == nil
	}, 30*time.Second, 20*time.Millisecond)
	slices := c.Clientset.DiscoveryV1().EndpointSlices("default")
	_, err := slices.Create(ctx, &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, AddressType: discovery.AddressTypeIPv4}, metav1.CreateOptions{})
	require.NoError(t, err)
	w := kubetest.WatchWrites(t, c.Config, kubetest.EndpointSlices, kubetest.Services, kubetest.Leases)
	require.Empty(t, kubetest.Churn(w.Settle(t)), "nothing written yet")

	_, err = slices.Create(ctx, &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "undone"}, AddressType: discovery.AddressTypeIPv4}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, slices.Delete(ctx, "undone", metav1.DeleteOptions{}))
	require.Equal(t, kubetest.WithoutLeases(w.Before), kubetest.WithoutLeases(w.Versions(t)), "the resourceVersions do not show it")
	churn := kubetest.Churn(w.Settle(t))
	require.Len(t, churn, 2)
	require.Contains(t, churn[0], "ADDED endpointslices default/undone@")
	require.Contains(t, churn[1], "DELETED endpointslices default/undone@")

	leases := c.Clientset.CoordinationV1().Leases("default")
	lease, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "holder"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	holder := "me"
	lease.Spec.HolderIdentity = &holder
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	require.NoError(t, err)
	churn = kubetest.Churn(w.Settle(t), "default/holder")
	require.Len(t, churn, 3, "the Lease's creation is churn, its renewal is not: %v", churn)
	require.Contains(t, churn[2], "ADDED leases default/holder@")
	require.Contains(t, w.Versions(t), "leases default/holder")
	require.Equal(t, kubetest.WithoutLeases(w.Before), kubetest.WithoutLeases(w.Versions(t)))
}
