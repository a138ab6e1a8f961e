package app_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// Every importing cluster of a clusterset gives a service the same
// clusterset VIP: three member clusters (their own kube-apiservers), each
// with its importer, started within moments of each other, import 20
// services that three clusters export (overlapping), against one
// allocator and against two allocator replicas on etcd with the calls
// spread over both. Every service has one VIP, the same in all three
// ServiceImports, and the allocator holds exactly one allocation per
// service.
func TestClustersetVIPsAgree(t *testing.T) {
	const (
		members  = 3
		services = 20
	)
	allocator := proctest.Build(t, "./services/allocator")
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) string
	}{
		{"one allocator", func(t *testing.T) string {
			return proctest.Start(t, allocator, []string{"--store", "memory"}).GRPCAddr
		}},
		{"allocator replicas on etcd", func(t *testing.T) string {
			store := "--store=etcd:" + kubetest.StartEtcd(t).Endpoint()
			a := proctest.Start(t, allocator, []string{store})
			b := proctest.Start(t, allocator, []string{store})
			return a.GRPCAddr + "," + b.GRPCAddr
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allocAddr := tc.start(t)
			conn, err := dial.New(allocAddr)
			require.NoError(t, err)
			t.Cleanup(func() { conn.Close() })
			alloc := allocatorv1.NewAllocatorServiceClient(conn)
			_, err = alloc.CreatePool(ctxFor(t), &allocatorv1.CreatePoolRequest{PoolId: "vips", Pool: &allocatorv1.Pool{Cidrs: []string{"10.96.100.0/24"}}})
			require.NoError(t, err)

			// The exporting clusters: cluster k exports svc-(5k) … svc-(5k+9).
			var sources []string
			for k := range members {
				src := sourcetest.Start(t, fmt.Sprintf("cluster-%d", k))
				for i := 5 * k; i < 5*k+10; i++ {
					src.Set(sourcetest.Endpoints("shop", fmt.Sprintf("svc-%02d", i), []string{"http=80"}, fmt.Sprintf("10.%d.0.%d", k+1, i+1)))
				}
				sources = append(sources, src.Cluster()+"="+src.Addr())
			}

			// The importing clusters, on one etcd, their importers set up
			// back to back.
			etcd := kubetest.StartEtcd(t)
			clusters := make([]*kubetest.Cluster, members)
			for k := range members {
				clusters[k] = kubetest.StartAPIServer(t, etcd, kubetest.WithName(fmt.Sprintf("cluster-%d", k)))
				kubetest.InstallCRDs(t, clusters[k].Config)
				_, err := clusters[k].Clientset.CoreV1().Namespaces().Create(ctxFor(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{})
				require.NoError(t, err)
			}
			for k := range members {
				e := &env{cluster: clusters[k]}
				o := e.options("vips")
				o.Sources = sources
				launchImporter(t, fmt.Sprintf("cluster-%d", k), allocAddr, o)
			}

			// Every cluster imports every service, with a VIP.
			vips := map[string]string{} // service → VIP
			for k, c := range clusters {
				mcs, err := mcsclient.NewForConfig(c.Config)
				require.NoError(t, err)
				require.Eventually(t, func() bool {
					list, err := mcs.MulticlusterV1beta1().ServiceImports("shop").List(ctxFor(t), metav1.ListOptions{})
					if err != nil || len(list.Items) != services {
						return false
					}
					for _, si := range list.Items {
						if len(si.Spec.IPs) != 1 {
							return false
						}
					}
					return true
				}, waitFor, tick, "cluster-%d does not import every service with a VIP", k)
				list, err := mcs.MulticlusterV1beta1().ServiceImports("shop").List(ctxFor(t), metav1.ListOptions{})
				require.NoError(t, err)
				for _, si := range list.Items {
					if k == 0 {
						vips[si.Name] = si.Spec.IPs[0]
						continue
					}
					require.Equal(t, vips[si.Name], si.Spec.IPs[0], "cluster-%d gives %s another VIP than cluster-0", k, si.Name)
				}
			}

			// One allocation per service, each the VIP every cluster uses.
			resp, err := alloc.ListAllocations(ctxFor(t), &allocatorv1.ListAllocationsRequest{Pool: "pools/vips", PageSize: 1000})
			require.NoError(t, err)
			held := map[string]string{}
			for _, a := range resp.GetAllocations() {
				svc := a.GetOwner().GetName()
				require.Empty(t, held[svc], "%s holds two VIPs: %s and %s", svc, held[svc], a.GetAddress())
				held[svc] = a.GetAddress()
			}
			require.Equal(t, vips, held)
			distinct := map[string]bool{}
			for _, v := range vips {
				distinct[v] = true
			}
			require.Len(t, distinct, services, "VIPs: %s", strings.Join(mapsValues(vips), ","))
		})
	}
}

func mapsValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
