package clusterid_test

import (
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	aboutv1alpha1 "github.com/plexusnet/plexus/api/about/v1alpha1"
	"github.com/plexusnet/plexus/internal/clusterid"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// The identity as a real kube-apiserver serves it: before the About API is
// installed only the flag can name the cluster; once the ClusterProperty
// exists it names it, and a flag that disagrees is refused.
func TestApplyOnAPIServer(t *testing.T) {
	cluster := kubetest.StartAPIServer(t, kubetest.StartEtcd(t), kubetest.WithName("clusterid"))
	dyn, err := dynamic.NewForConfig(cluster.Config)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := t.Context()

	// No CRD: the resource is missing, which is not an error.
	id, err := clusterid.Apply(ctx, dyn, "east", logger)
	require.NoError(t, err)
	require.Equal(t, clusterid.Identity{Cluster: "east", Source: clusterid.FromFlag}, id)
	_, err = clusterid.Apply(ctx, dyn, "", logger)
	require.ErrorContains(t, err, "no cluster id")

	kubetest.InstallCRDs(t, cluster.Config)
	set := func(name, value string) {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": aboutv1alpha1.SchemeGroupVersion.String(), "kind": "ClusterProperty",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"value": value},
		}}
		_, err := dyn.Resource(aboutv1alpha1.ClusterPropertiesResource).Create(ctx, obj, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	set(aboutv1alpha1.ClusterIDProperty, "east")
	set(aboutv1alpha1.ClusterSetProperty, "prod")

	id, err = clusterid.Apply(ctx, dyn, "", logger)
	require.NoError(t, err)
	require.Equal(t, clusterid.Identity{Cluster: "east", ClusterSet: "prod", Source: clusterid.FromProperty}, id)
	id, err = clusterid.Apply(ctx, dyn, "east", logger)
	require.NoError(t, err)
	require.Equal(t, clusterid.FromBoth, id.Source)
	_, err = clusterid.Apply(ctx, dyn, "west", logger)
	require.ErrorContains(t, err, `--cluster-name "west" disagrees with the ClusterProperty cluster.clusterset.k8s.io, which says "east"`)

	// The CRD enforces the upstream schema: an empty value is refused.
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": aboutv1alpha1.SchemeGroupVersion.String(), "kind": "ClusterProperty",
		"metadata": map[string]any{"name": "empty.example.com"}, "spec": map[string]any{"value": ""},
	}}
	_, err = dyn.Resource(aboutv1alpha1.ClusterPropertiesResource).Create(ctx, obj, metav1.CreateOptions{})
	require.ErrorContains(t, err, "spec.value")
}
