package app_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// TestSameVIPInClustersWithOtherServiceRanges: two importing clusters whose
// Service ranges differ from each other and from the VIP pool. Each
// importer makes the pool's range known to its API server as a ServiceCIDR,
// and both derived Services carry the same clusterset VIP as their cluster
// IP, so kube-proxy routes the same address in both. Before, the derived
// Services got addresses of their own and the imports said
// ClusterSetIPNotProgrammed.
func TestSameVIPInClustersWithOtherServiceRanges(t *testing.T) {
	a := newEnv(t) // 10.96.0.0/16
	a.pool(t, "vips", "10.200.0.0/24")
	etcd := kubetest.StartEtcd(t)
	bCluster := kubetest.StartAPIServer(t, etcd, kubetest.WithName("member-b"), kubetest.WithServiceClusterIPRange("10.97.0.0/16"))
	kubetest.InstallCRDs(t, bCluster.Config)
	bMCS, err := mcsclient.NewForConfig(bCluster.Config)
	require.NoError(t, err)
	b := &env{cluster: bCluster, kube: bCluster.Clientset, mcs: bMCS, alloc: a.alloc, allocAddr: a.allocAddr}

	east := sourcetest.Start(t, "east")
	east.Set(sourcetest.Endpoints("shop", "cart", []string{"http=80"}, "10.1.0.1"))
	for _, e := range []*env{a, b} {
		e.namespace(t, "shop")
		e.startImporter(t, e.options("vips"), east)
	}

	var vips []string
	for _, e := range []*env{a, b} {
		require.Eventually(t, func() bool {
			si, err := e.serviceImport("shop", "cart")
			if err != nil || len(si.Spec.IPs) != 1 {
				return false
			}
			svc, err := e.derived("shop", "cart")
			ready := condition(si, "Ready")
			return err == nil && svc.Spec.ClusterIP == si.Spec.IPs[0] && ready != nil && ready.Status == metav1.ConditionTrue
		}, waitFor, tick, "the derived Service of %s does not carry the VIP", e.cluster.Name)
		si, err := e.serviceImport("shop", "cart")
		require.NoError(t, err)
		vips = append(vips, si.Spec.IPs[0])
		cidrs, err := e.kube.NetworkingV1().ServiceCIDRs().Get(context.Background(), "plexus-vips-10-200-0-0-24", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, []string{"10.200.0.0/24"}, cidrs.Spec.CIDRs)
	}
	require.Equal(t, vips[0], vips[1], "the same VIP in both clusters")
	require.Contains(t, vips[0], "10.200.0.")
}
