package app_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// TestConflictOnLocalServiceExport: the importer of a cluster that exports
// a service itself (its own membership is one of its sources, as the MCS
// API has every cluster import) writes the import's Conflict condition on
// the cluster's ServiceExport, where the standard puts it, keeping the
// conditions membership writes; and clears it when the exports agree.
func TestConflictOnLocalServiceExport(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "vips", "10.96.100.0/24")
	e.namespace(t, "shop")
	exports := e.mcs.MulticlusterV1beta1().ServiceExports("shop")
	se, err := exports.Create(ctxFor(t), &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "cart", Namespace: "shop"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// What the cluster's membership would have written.
	meta.SetStatusCondition(&se.Status.Conditions, metav1.Condition{Type: "Valid", Status: metav1.ConditionTrue, Reason: "Valid", Message: "m"})
	_, err = exports.UpdateStatus(ctxFor(t), se, metav1.UpdateOptions{})
	require.NoError(t, err)

	// "member" is this cluster (the env's --cluster-name).
	local, west := sourcetest.Start(t, "member"), sourcetest.Start(t, "west")
	localEps := sourcetest.Endpoints("shop", "cart", []string{"http=80"}, "10.1.0.1")
	localEps.Export.ExportCreateTime = timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	westEps := sourcetest.Endpoints("shop", "cart", []string{"http=80"}, "10.2.0.1")
	westEps.Ports[0].Protocol = membershipv1.Protocol_PROTOCOL_UDP
	westEps.Export.ExportCreateTime = timestamppb.New(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC))
	local.Set(localEps)
	west.Set(westEps)
	e.startImporter(t, e.options("vips"), local, west)

	conflict := func(status metav1.ConditionStatus, reason string) {
		t.Helper()
		require.Eventually(t, func() bool {
			got, err := exports.Get(ctxFor(t), "cart", metav1.GetOptions{})
			if err != nil {
				return false
			}
			c := meta.FindStatusCondition(got.Status.Conditions, "Conflict")
			return c != nil && c.Status == status && c.Reason == reason &&
				meta.IsStatusConditionTrue(got.Status.Conditions, "Valid")
		}, waitFor, tick, "the local ServiceExport's Conflict is not %s %s", status, reason)
	}
	conflict(metav1.ConditionTrue, "PortConflict")

	westEps.Ports[0].Protocol = membershipv1.Protocol_PROTOCOL_TCP
	west.Set(westEps)
	conflict(metav1.ConditionFalse, "NoConflicts")

	// Different IP families: IPv6 traffic would reach only west.
	v4, v6 := membershipv1.AddressType_ADDRESS_TYPE_IPV4, membershipv1.AddressType_ADDRESS_TYPE_IPV6
	localEps.Export.IpFamilies = []membershipv1.AddressType{v4}
	westEps.Export.IpFamilies = []membershipv1.AddressType{v4, v6}
	local.Set(localEps)
	west.Set(westEps)
	conflict(metav1.ConditionTrue, "IPFamilyConflict")
	westEps.Export.IpFamilies = []membershipv1.AddressType{v4}
	west.Set(westEps)
	conflict(metav1.ConditionFalse, "NoConflicts")
}

// TestImportCarriesTrafficAndExportedMetadata: on a real kube-apiserver,
// the ServiceImport carries the exported labels and annotations and the
// traffic fields, the derived Service the traffic fields; a second cluster
// that disagrees raises the mcs-api conflict reasons, the oldest export
// winning.
func TestImportCarriesTrafficAndExportedMetadata(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "vips", "10.96.100.0/24")
	e.namespace(t, "shop")
	east, west := sourcetest.Start(t, "east"), sourcetest.Start(t, "west")
	eastEps := sourcetest.Endpoints("shop", "cart", []string{"http=80"}, "10.1.0.1")
	eastEps.Export.ExportCreateTime = timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	eastEps.Export.InternalTrafficPolicy, eastEps.Export.TrafficDistribution = "Local", "PreferClose"
	eastEps.Export.ExportedLabels = map[string]string{"dummy-label": "true"}
	eastEps.Export.ExportedAnnotations = map[string]string{"dummy-annotation": "true"}
	east.Set(eastEps)
	e.startImporter(t, e.options("vips"), east, west)

	var si *mcsv1beta1.ServiceImport
	require.Eventually(t, func() bool {
		var err error
		si, err = e.serviceImport("shop", "cart")
		return err == nil && si.Spec.InternalTrafficPolicy != nil && condition(si, "Ready") != nil
	}, waitFor, tick)
	require.Equal(t, "true", si.Labels["dummy-label"])
	require.Equal(t, "true", si.Annotations["dummy-annotation"])
	require.Equal(t, "PreferClose", *si.Spec.TrafficDistribution)
	svc, err := e.derived("shop", "cart")
	require.NoError(t, err)
	require.Equal(t, "Local", string(*svc.Spec.InternalTrafficPolicy))

	westEps := sourcetest.Endpoints("shop", "cart", []string{"http=80"}, "10.2.0.1")
	westEps.Export.ExportCreateTime = timestamppb.New(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC))
	westEps.Export.ExportedLabels = map[string]string{"dummy-label2": "true"}
	west.Set(westEps)
	require.Eventually(t, func() bool {
		si, err = e.serviceImport("shop", "cart")
		c := condition(si, "Conflict")
		return err == nil && c != nil && c.Status == metav1.ConditionTrue
	}, waitFor, tick)
	c := condition(si, "Conflict")
	require.Contains(t, c.Reason, "InternalTrafficPolicyConflict")
	require.Contains(t, c.Reason, "LabelsConflict")
	require.Contains(t, c.Reason, "AnnotationsConflict")
	require.Equal(t, "true", si.Labels["dummy-label"], "the oldest export's labels")
	require.NotContains(t, si.Labels, "dummy-label2")
}
