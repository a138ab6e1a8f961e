package cmd

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
)

func TestImportName(t *testing.T) {
	for _, tc := range []struct{ arg, ns, want string }{
		{"cart", "shop", "namespaces/shop/serviceimports/cart"},
		{"web/cart", "shop", "namespaces/web/serviceimports/cart"},
		{"namespaces/a/serviceimports/b", "shop", "namespaces/a/serviceimports/b"},
	} {
		require.Equal(t, tc.want, importName(tc.arg, tc.ns), tc.arg)
	}
}

func TestImportTable(t *testing.T) {
	im := &importerv1.ServiceImport{
		Name:  "namespaces/shop/serviceimports/cart",
		Ips:   []string{"10.112.0.16"},
		Type:  membershipv1.ServiceType_SERVICE_TYPE_CLUSTER_SET_IP,
		Ports: []*membershipv1.ServicePort{{Name: "http", Port: 80, Protocol: membershipv1.Protocol_PROTOCOL_TCP}},
		Clusters: []*importerv1.ClusterStatus{
			{Cluster: "a", Endpoints: 4, ReadyEndpoints: 3},
			{Cluster: "b", Endpoints: 1, ReadyEndpoints: 1, Stale: true},
		},
		Conditions: []*importerv1.Condition{
			{Type: "Ready", Status: importerv1.ConditionStatus_CONDITION_STATUS_TRUE},
			{Type: "Conflict", Status: importerv1.ConditionStatus_CONDITION_STATUS_FALSE, Reason: "NoConflict"},
		},
		EndpointSlices: 2,
	}
	var out bytes.Buffer
	require.NoError(t, render(&out, "table", im, importTable(im)))
	s := out.String()
	for _, want := range []string{"shop", "cart", "CLUSTER_SET_IP", "10.112.0.16", "http:80/TCP", "a,b(stale)", "4/5 ready", "Ready,!Conflict(NoConflict)"} {
		require.Contains(t, s, want)
	}
}
