package app_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// TestClusterSetPolicy: the clusterset policy in the importer's cluster
// ("member") decides what it imports. A source the policy does not let
// export the namespace loses its slices, even though its membership
// streams the export (its copy of the policy may be older); a policy that
// leaves this cluster out of the namespace's import set removes the
// ServiceImport, the derived Service and every slice; putting the cluster
// back brings them back. Another namespace is untouched throughout.
func TestClusterSetPolicy(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	e.namespace(t, "shop")
	e.namespace(t, "blog")
	east, west := sourcetest.Start(t, "east"), sourcetest.Start(t, "west")
	east.Set(sourcetest.Endpoints("shop", "web", []string{"http=8080"}, "10.1.0.1", "10.1.0.2"))
	west.Set(sourcetest.Endpoints("shop", "web", []string{"http=8080"}, "10.2.0.1"))
	east.Set(sourcetest.Endpoints("blog", "web", []string{"http=8080"}, "10.1.1.1"))
	west.Set(sourcetest.Endpoints("blog", "web", []string{"http=8080"}, "10.2.1.1"))
	// A policy in place before the importer starts is followed from its
	// first reconcile: blog may be exported by east only, and west's
	// export of it is never imported.
	require.NoError(t, kubetest.ApplyPolicy(ctx, e.cluster.Config, kubetest.Rule{"namespace": "blog", "exportFrom": []any{"east"}}))
	im := e.startImporter(t, e.options(), east, west)

	sliceCounts := func(ns, want string) {
		t.Helper()
		require.Eventually(t, func() bool {
			return fmt.Sprint(endpointsIn(e.slicesOf(t, ns, "web"))) == want
		}, waitFor, tick, "slices of %s/web are not %s", ns, want)
	}
	sliceCounts("shop", "map[east:2 west:1]")
	sliceCounts("blog", "map[east:1]")

	t.Run("a source the policy does not let export loses its slices", func(t *testing.T) {
		require.NoError(t, kubetest.ApplyPolicy(ctx, e.cluster.Config,
			kubetest.Rule{"namespace": "blog", "exportFrom": []any{"east"}},
			kubetest.Rule{"namespace": "shop", "exportFrom": []any{"east"}}))
		sliceCounts("shop", "map[east:2]")
		require.Eventually(t, func() bool {
			si, err := e.serviceImport("shop", "web")
			return err == nil && len(si.Status.Clusters) == 1 && si.Status.Clusters[0].Cluster == "east"
		}, waitFor, tick, "the ServiceImport still names west")
		require.Positive(t, counter(t, im.registry, "plexus_importer_policy_refusals_total", map[string]string{"reason": "ExportNotPermitted"}))
	})

	t.Run("outside the import set nothing is imported", func(t *testing.T) {
		require.NoError(t, kubetest.ApplyPolicy(ctx, e.cluster.Config,
			kubetest.Rule{"namespace": "blog", "exportFrom": []any{"east"}},
			kubetest.Rule{"namespace": "sh*", "importTo": []any{"elsewhere"}}))
		e.gone(t, "shop", "web")
		_, err := e.serviceImport("blog", "web")
		require.NoError(t, err, "another namespace keeps its import")
		require.Positive(t, counter(t, im.registry, "plexus_importer_policy_refusals_total", map[string]string{"reason": "ImportNotPermitted"}))
	})

	t.Run("back in the import set, everything comes back", func(t *testing.T) {
		require.NoError(t, kubetest.ApplyPolicy(ctx, e.cluster.Config,
			kubetest.Rule{"namespace": "blog", "exportFrom": []any{"east"}},
			kubetest.Rule{"namespace": "sh*", "importTo": []any{"elsewhere", "member"}}))
		sliceCounts("shop", "map[east:2 west:1]")
		_, err := e.derived("shop", "web")
		require.NoError(t, err)
	})

	t.Run("a source that stops exporting is withdrawn as before", func(t *testing.T) {
		west.Delete("namespaces/shop/services/web")
		sliceCounts("shop", "map[east:2]")
	})

	t.Run("without a policy everything is imported", func(t *testing.T) {
		require.Equal(t, map[string]int{"east": 1}, endpointsIn(e.slicesOf(t, "blog", "web")), "west's export of blog was imported under the policy")
		require.NoError(t, kubetest.DeletePolicy(ctx, e.cluster.Config))
		sliceCounts("blog", "map[east:1 west:1]")
	})
}
