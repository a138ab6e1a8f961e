package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	aboutv1alpha1 "github.com/plexusnet/plexus/api/about/v1alpha1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/services/membership/app"
)

// A membership without --cluster-name takes the cluster's id from its
// ClusterProperty and stamps every endpoint set with it; one whose flag
// says otherwise refuses to start, naming both.
func TestIdentityFromClusterProperty(t *testing.T) {
	cluster := startControlPlane(t)
	kubetest.InstallCRDs(t, cluster.Config)
	dyn, err := dynamic.NewForConfig(cluster.Config)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	_, err = dyn.Resource(aboutv1alpha1.ClusterPropertiesResource).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": aboutv1alpha1.SchemeGroupVersion.String(), "kind": "ClusterProperty",
		"metadata": map[string]any{"name": aboutv1alpha1.ClusterIDProperty},
		"spec":     map[string]any{"value": "east"},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	allocAddr := startAllocator(t)

	cfg := loopback(config.Membership)
	cfg.ClusterName, cfg.AllocatorAddr = "west", allocAddr
	srv, err := server.New(*cfg, "membership", server.WithoutSignalHandling())
	require.NoError(t, err)
	_, err = app.Setup(ctx, &server.Runtime{Config: cfg, Server: srv, Logger: srv.Logger()}, app.DefaultOptions().WithRESTConfig(cluster.Config))
	require.ErrorContains(t, err, `--cluster-name "west" disagrees with the ClusterProperty cluster.clusterset.k8s.io, which says "east"`)

	cfg = config.New(config.Membership)
	cfg.AllocatorAddr = allocAddr // and no --cluster-name
	srv = servertest.Start(t, cfg, "membership", func(ctx context.Context, rt *server.Runtime) (func(), error) {
		return app.Setup(ctx, rt, app.DefaultOptions().WithRESTConfig(cluster.Config))
	}).Server
	conn, err := dial.New(srv.GRPCAddr(), dial.WithoutRetry())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.Eventually(t, func() bool {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "plexus.membership.v1.MembershipService"})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}, 30*time.Second, 50*time.Millisecond)
	got, err := membershipv1.NewMembershipServiceClient(conn).GetServiceMembers(ctx, &membershipv1.GetServiceMembersRequest{Service: "namespaces/default/services/kubernetes"})
	require.NoError(t, err)
	require.Equal(t, "east", got.GetEndpoints().GetCluster())
}
