package slices

import (
	"testing"

	"github.com/stretchr/testify/require"
	discovery "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

func TestImportTemplate(t *testing.T) {
	t.Parallel()
	require.Equal(t, mcsv1beta1.LabelServiceName, LabelServiceImport)
	require.Equal(t, mcsv1beta1.LabelSourceCluster, LabelSourceCluster)
	tmpl := ImportTemplate("ns", "web-imported", "svc-uid", "web", "east")
	require.Equal(t, "ns", tmpl.Namespace)
	require.Equal(t, "web-imported-east-", tmpl.GenerateName)
	require.Equal(t, map[string]string{
		"kubernetes.io/service-name":                "web-imported",
		"multicluster.kubernetes.io/service-name":   "web",
		"multicluster.kubernetes.io/source-cluster": "east",
		"endpointslice.kubernetes.io/managed-by":    "importer.plexus.dev",
	}, tmpl.Labels)
	require.Len(t, tmpl.OwnerReferences, 1)
	owner := tmpl.OwnerReferences[0]
	require.Equal(t, "Service", owner.Kind)
	require.Equal(t, "web-imported", owner.Name)
	require.EqualValues(t, "svc-uid", owner.UID)
	require.True(t, *owner.Controller)

	// Slices of the same service from another cluster are not this
	// template's to touch.
	p, err := New()
	require.NoError(t, err)
	other := ImportTemplate("ns", "web-imported", "svc-uid", "web", "west")
	west, err := p.Plan(other, []Group{v4(eps(0, 3))}, nil)
	require.NoError(t, err)
	c := newCluster()
	c.apply(t, west)
	plan, err := p.Plan(tmpl, []Group{v4(eps(10, 12))}, c.list())
	require.NoError(t, err)
	require.Empty(t, plan.Delete)
	require.Empty(t, plan.Update)
	require.Len(t, plan.Create, 1)
	require.Equal(t, discovery.AddressTypeIPv4, plan.Create[0].AddressType)
}
