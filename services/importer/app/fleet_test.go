package app_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	inventoryv1alpha1 "github.com/plexusnet/plexus/api/inventory/v1alpha1"
	"github.com/plexusnet/plexus/internal/fleet"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// sliceVersions returns the resourceVersion of every slice of shop/web
// that a cluster contributes, by slice name.
func (e *env) sliceVersions(t *testing.T, cluster string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, s := range e.slicesOf(t, "shop", "web") {
		if s.Labels["multicluster.kubernetes.io/source-cluster"] == cluster {
			out[s.Name] = s.ResourceVersion
		}
	}
	return out
}

// sources lists the importer's sources over gRPC, by cluster.
func (im *importer) sources(t *testing.T) map[string]*importerv1.Source {
	t.Helper()
	resp, err := im.api.ListSources(ctxFor(t), &importerv1.ListSourcesRequest{})
	require.NoError(t, err)
	out := map[string]*importerv1.Source{}
	for _, s := range resp.GetSources() {
		out[s.GetCluster()] = s
	}
	return out
}

// A fleet that changes under a running importer, through ClusterProfiles
// in an inventory namespace: clusters join (one object), a member's
// membership moves to another address, and a cluster leaves; nothing
// restarts, and no change touches another cluster's slices.
func TestFleetThroughClusterProfiles(t *testing.T) {
	e := newEnv(t)
	e.namespace(t, "shop")
	e.namespace(t, "fleet")
	dyn, err := dynamic.NewForConfig(e.cluster.Config)
	require.NoError(t, err)
	ctx := ctxFor(t)

	// east has two membership replicas serving one state: the fleet moves
	// it from one to the other.
	east := []*sourcetest.Source{sourcetest.Start(t, "east"), sourcetest.Start(t, "east")}
	for _, r := range east {
		r.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, "10.1.0.1"))
	}
	west := sourcetest.Start(t, "west")
	west.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, "10.2.0.1"))

	o := e.options()
	o.InventoryNamespace = "fleet"
	o.SourceGrace = 3e9
	im := e.startImporter(t, o)
	require.Empty(t, im.sources(t), "an empty inventory: no sources")

	// east joins with one object.
	_, err = fleet.Join(ctx, dyn, "fleet", fleet.Member{Name: "east", Addr: east[0].Addr()}, "")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "web"))) == "map[east:1]" }, waitFor, tick)

	// west joins through a profile a cluster manager wrote: a generated
	// name, the cluster's id in the cluster.clusterset.k8s.io property.
	profile := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": inventoryv1alpha1.SchemeGroupVersion.String(), "kind": "ClusterProfile",
		"metadata": map[string]any{"generateName": "mgr-", "namespace": "fleet", "labels": map[string]any{inventoryv1alpha1.LabelClusterManager: "mgr"}},
		"spec":     map[string]any{"displayName": "West", "clusterManager": map[string]any{"name": "mgr"}},
	}}
	res := dyn.Resource(inventoryv1alpha1.ClusterProfilesResource).Namespace("fleet")
	profile, err = res.Create(ctx, profile, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, unstructured.SetNestedSlice(profile.Object, []any{
		map[string]any{"name": "cluster.clusterset.k8s.io", "value": "west"},
		map[string]any{"name": inventoryv1alpha1.PropertyMembershipAddress, "value": west.Addr()},
	}, "status", "properties"))
	_, err = res.UpdateStatus(ctx, profile, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "web"))) == "map[east:1 west:1]"
	}, waitFor, tick)
	require.Eventually(t, func() bool {
		srcs := im.sources(t)
		return len(srcs) == 2 && srcs["east"].GetState() == importerv1.SourceState_SOURCE_STATE_CONNECTED &&
			srcs["west"].GetState() == importerv1.SourceState_SOURCE_STATE_CONNECTED && srcs["west"].GetSynced() &&
			srcs["west"].GetExportedServices() == 1 && srcs["west"].GetAddress() == west.Addr()
	}, waitFor, tick, "ListSources: %v", im.sources(t))

	// east's membership moves: the importer reconnects to the new address;
	// the same state arrives, so its slices are not rewritten.
	before := e.sliceVersions(t, "east")
	westBefore := e.sliceVersions(t, "west")
	_, err = fleet.Join(ctx, dyn, "fleet", fleet.Member{Name: "east", Addr: east[1].Addr()}, "")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return east[1].Watchers() == 1 && east[0].Watchers() == 0 }, waitFor, tick, "the importer follows east at its new address")
	require.Eventually(t, func() bool { return im.sources(t)["east"].GetAddress() == east[1].Addr() }, waitFor, tick)
	east[1].Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, "10.1.0.1", "10.1.0.2"))
	require.Eventually(t, func() bool {
		return fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "web"))) == "map[east:2 west:1]"
	}, waitFor, tick, "changes arrive from the new address")
	require.NotEqual(t, before, e.sliceVersions(t, "east"))
	require.Equal(t, westBefore, e.sliceVersions(t, "west"), "moving east wrote nothing of west's")

	// west leaves: its imports stay (stale) through the grace, then go;
	// east's slices are not touched.
	eastBefore := e.sliceVersions(t, "east")
	require.NoError(t, res.Delete(ctx, profile.GetName(), metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		return im.sources(t)["west"].GetState() == importerv1.SourceState_SOURCE_STATE_LEFT
	}, waitFor, tick)
	require.Equal(t, "map[east:2 west:1]", fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "web"))), "kept within the grace")
	require.Eventually(t, func() bool {
		return fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "web"))) == "map[east:2]"
	}, waitFor, tick, "withdrawn once the grace passed")
	require.Equal(t, eastBefore, e.sliceVersions(t, "east"), "west leaving wrote nothing of east's")
	require.Eventually(t, func() bool { _, ok := im.sources(t)["west"]; return !ok }, waitFor, tick)
	require.Zero(t, west.Watchers())
}

// The no-hub alternative: a sources file, edited as plexusctl clusters
// join/leave --sources-file does, followed by a running importer.
func TestFleetThroughSourcesFile(t *testing.T) {
	e := newEnv(t)
	e.namespace(t, "shop")
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(path, []byte("empty: true\nclusters: []\n"), 0o644))
	east := sourcetest.Start(t, "east")
	east.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, "10.1.0.1"))
	west := sourcetest.Start(t, "west")
	west.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, "10.2.0.1"))

	o := e.options()
	o.SourcesFile = path
	o.SourceGrace = 2e9
	e.startImporter(t, o)

	edit := func(f func([]fleet.Member) []fleet.Member) {
		require.NoError(t, fleet.EditFile(path, func(ms []fleet.Member) ([]fleet.Member, error) { return f(ms), nil }))
	}
	edit(func(ms []fleet.Member) []fleet.Member {
		return append(ms, fleet.Member{Name: "east", Addr: east.Addr()}, fleet.Member{Name: "west", Addr: west.Addr()})
	})
	require.Eventually(t, func() bool {
		return fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "web"))) == "map[east:1 west:1]"
	}, waitFor, tick)
	edit(func(ms []fleet.Member) []fleet.Member { return ms[:1] }) // west leaves
	require.Eventually(t, func() bool {
		return fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "web"))) == "map[east:1]"
	}, waitFor, tick)
	require.Eventually(t, func() bool { return west.Watchers() == 0 }, waitFor, tick)
}
