package app_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/services/importer/slices"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// TestCoexistsWithControllers runs the importer beside the member
// cluster's real kube-controller-manager: a local Deployment and its
// Service of the same name as the imported one get the EndpointSlice
// controller's slices, which the importer never touches; the controllers
// leave the importer's slices of the selectorless derived Service alone
// (no adoption, no mirroring); and once the importer is gone, deleting the
// ServiceImport lets the garbage collector remove the derived Service and
// its slices, as their owner references say.
func TestCoexistsWithControllers(t *testing.T) {
	e := newEnv(t)
	kubetest.StartControllers(t, e.cluster, netip.MustParsePrefix("10.128.0.0/16"))
	e.pool(t, "vips", "10.96.100.0/24")
	e.namespace(t, "shop")
	ctx := ctxFor(t)

	// The cluster's own shop/web: a Deployment of 2 and a Service.
	labels := map[string]string{"app": "web"}
	two := int32(2)
	_, err := e.kube.AppsV1().Deployments("shop").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = e.kube.CoreV1().Services("shop").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	local := func() []discovery.EndpointSlice {
		list, err := e.kube.DiscoveryV1().EndpointSlices("shop").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web"})
		require.NoError(t, err)
		return list.Items
	}
	var own discovery.EndpointSlice
	require.Eventually(t, func() bool {
		ss := local()
		if len(ss) != 1 || len(ss[0].Endpoints) != 2 {
			return false
		}
		own = ss[0]
		return true
	}, waitFor, tick, "the EndpointSlice controller did not write the local Service's slice")
	require.Equal(t, "endpointslice-controller.k8s.io", own.Labels[discovery.LabelManagedBy])

	// The clusterset's shop/web, exported by east.
	east := sourcetest.Start(t, "east")
	east.Set(webEndpoints(5))
	im := e.startImporter(t, e.options("vips"), east)
	require.Eventually(t, func() bool { return endpointsIn(e.slicesOf(t, "shop", "web"))["east"] == 5 }, waitFor, tick)
	east.Set(webEndpoints(3))
	require.Eventually(t, func() bool { return endpointsIn(e.slicesOf(t, "shop", "web"))["east"] == 3 }, waitFor, tick)

	// The controllers' slice of the local Service is as they wrote it;
	// the derived Service has only the importer's slices.
	ss := local()
	require.Len(t, ss, 1)
	require.Equal(t, own.ResourceVersion, ss[0].ResourceVersion, "the importer touched the EndpointSlice controller's slice")
	derived, err := e.kube.DiscoveryV1().EndpointSlices("shop").List(ctx, metav1.ListOptions{
		LabelSelector: "kubernetes.io/service-name=" + mcsnames.DerivedServiceName("web")})
	require.NoError(t, err)
	require.NotEmpty(t, derived.Items)
	for _, s := range derived.Items {
		require.Equal(t, slices.ManagedBy, s.Labels[discovery.LabelManagedBy], "slice %s of the derived Service is not the importer's", s.Name)
	}

	// Without the importer, the ServiceImport's deletion is carried down
	// its owner references by the garbage collector.
	im.stop()
	require.NoError(t, e.mcs.MulticlusterV1beta1().ServiceImports("shop").Delete(ctx, "web", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		_, err := e.derived("shop", "web")
		return apierrors.IsNotFound(err) && len(e.slicesOf(t, "shop", "web")) == 0
	}, waitFor, tick, "the garbage collector did not remove the derived Service and its slices")
	ss = local()
	require.Len(t, ss, 1)
	require.Equal(t, own.ResourceVersion, ss[0].ResourceVersion)
}
