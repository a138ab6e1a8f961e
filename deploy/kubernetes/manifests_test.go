package manifests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/plexusnet/plexus/internal/kubetest"
)

// apply creates objs on the cluster of cfg; with dryRun the server only
// validates them (admission included) and stores nothing.
func apply(t *testing.T, cfg *rest.Config, objs []*unstructured.Unstructured, dryRun bool) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	kube := kubernetes.NewForConfigOrDie(cfg)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	opts := metav1.CreateOptions{FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		require.NoError(t, err, "%s %s", gvk, obj.GetName())
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if obj.GetNamespace() != "" {
			ri = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		_, err = ri.Create(context.Background(), obj, opts)
		require.NoError(t, err, "%s %s/%s", gvk.Kind, obj.GetNamespace(), obj.GetName())
	}
}

// access is one question to a SubjectAccessReview.
type access struct {
	verb, group, resource, subresource, namespace string
}

func allowed(t *testing.T, kube kubernetes.Interface, sa string, a access) bool {
	t.Helper()
	sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:plexus-system:" + sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:plexus-system", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace,
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return sar.Status.Allowed
}

// TestManifests: the RBAC objects are created for real, the workloads are
// validated by a server-side dry run, and each ServiceAccount may do what
// its service does and is refused a sample of what it must not.
func TestManifests(t *testing.T) {
	etcd := kubetest.StartEtcd(t)
	cluster := kubetest.StartAPIServer(t, etcd)
	kubetest.InstallCRDs(t, cluster.Config)
	kube := kubernetes.NewForConfigOrDie(cluster.Config)

	rbac, err := Objects("rbac.yaml")
	require.NoError(t, err)
	apply(t, cluster.Config, rbac, false)
	workloads, err := Objects("services.yaml")
	require.NoError(t, err)
	require.Len(t, workloads, 12, "a workload, a Service and a PodDisruptionBudget per service")
	apply(t, cluster.Config, workloads, true)

	const ns, sys = "shop", "plexus-system"
	may := map[string][]access{
		"plexus-membership": {
			{"list", "", "pods", "", ""}, {"watch", "", "services", "", ""}, {"list", "", "nodes", "", ""},
			{"watch", "multicluster.x-k8s.io", "serviceexports", "", ""},
			{"create", "workload.plexus.dev", "externalworkloads", "", ns}, {"update", "workload.plexus.dev", "externalworkloads", "status", ns},
			{"delete", "workload.plexus.dev", "externalworkloads", "", ns},
		},
		"plexus-importer": {
			{"create", "discovery.k8s.io", "endpointslices", "", ns}, {"update", "discovery.k8s.io", "endpointslices", "", ns},
			{"delete", "discovery.k8s.io", "endpointslices", "", ns}, {"create", "", "services", "", ns},
			{"create", "multicluster.x-k8s.io", "serviceimports", "", ns}, {"update", "multicluster.x-k8s.io", "serviceimports", "status", ns},
			{"watch", "", "namespaces", "", ""}, {"create", "", "events", "", ns},
			{"update", "coordination.k8s.io", "leases", "", sys},
		},
		"plexus-repair": {
			{"list", "", "pods", "", ""}, {"watch", "workload.plexus.dev", "externalworkloads", "", ""},
			{"list", "multicluster.x-k8s.io", "serviceimports", "", ""}, {"delete", "discovery.k8s.io", "endpointslices", "", ns},
			{"create", "", "events", "", ns}, {"create", "coordination.k8s.io", "leases", "", sys},
		},
	}
	mayNot := map[string][]access{
		"plexus-allocator": {
			{"list", "", "pods", "", ""}, {"get", "", "services", "", ns}, {"create", "", "events", "", ns},
		},
		"plexus-membership": {
			{"create", "discovery.k8s.io", "endpointslices", "", ns}, {"update", "", "pods", "", ns}, {"get", "", "secrets", "", ns},
			{"create", "multicluster.x-k8s.io", "serviceexports", "", ns}, {"update", "coordination.k8s.io", "leases", "", sys},
		},
		"plexus-importer": {
			{"delete", "", "pods", "", ns}, {"get", "", "secrets", "", ns}, {"create", "", "namespaces", "", ""},
			{"update", "coordination.k8s.io", "leases", "", "kube-system"}, {"update", "workload.plexus.dev", "externalworkloads", "", ns},
		},
		"plexus-repair": {
			{"create", "discovery.k8s.io", "endpointslices", "", ns}, {"update", "", "services", "", ns}, {"get", "", "secrets", "", ns},
			{"delete", "", "pods", "", ns}, {"delete", "workload.plexus.dev", "externalworkloads", "", ns},
		},
	}
	for sa, list := range may {
		for _, a := range list {
			require.True(t, allowed(t, kube, sa, a), "%s may %+v", sa, a)
		}
	}
	for sa, list := range mayNot {
		for _, a := range list {
			require.False(t, allowed(t, kube, sa, a), "%s may not %+v", sa, a)
		}
	}

	// The admission policy holds repair's deletes to the importer's slices.
	_, err = kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	slice := func(name, managedBy string) {
		_, err := kube.DiscoveryV1().EndpointSlices(ns).Create(context.Background(), &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelManagedBy: managedBy}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	slice("theirs", "endpointslice-controller.k8s.io")
	slice("ours", "importer.plexus.dev")
	asRepair := rest.CopyConfig(cluster.Config)
	asRepair.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:plexus-system:plexus-repair",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:plexus-system", "system:authenticated"}}
	repair := kubernetes.NewForConfigOrDie(asRepair)
	require.Eventually(t, func() bool {
		err := repair.DiscoveryV1().EndpointSlices(ns).Delete(context.Background(), "theirs", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err)
	}, 30*time.Second, 200*time.Millisecond, "the policy refuses repair a slice of another controller")
	require.NoError(t, repair.DiscoveryV1().EndpointSlices(ns).Delete(context.Background(), "ours", metav1.DeleteOptions{}))
	_, err = kube.DiscoveryV1().EndpointSlices(ns).Get(context.Background(), "theirs", metav1.GetOptions{})
	require.NoError(t, err, "the other controller's slice is still there")
}
