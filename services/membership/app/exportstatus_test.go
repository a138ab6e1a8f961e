package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
)

// testExportStatus: the exporting cluster's membership writes the Valid and
// Ready conditions of each ServiceExport (KEP-1645), and an ExternalName
// Service is not exported: Valid=False InvalidServiceType, and nothing in
// the exported-only stream. Before, nothing wrote ServiceExport status and
// an ExternalName Service was exported as ClusterSetIP.
func testExportStatus(ctx context.Context, t *testing.T, e *env) {
	const ns = "exportstatus"
	e.namespace(t, ctx, ns)
	exports := e.mcs.MulticlusterV1beta1().ServiceExports(ns)
	export := func(name string) {
		_, err := exports.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	conditions := func(name string, want map[string]string) {
		t.Helper()
		require.Eventually(t, func() bool {
			se, err := exports.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false
			}
			for typ, reason := range want {
				c := meta.FindStatusCondition(se.Status.Conditions, typ)
				if c == nil || c.Reason != reason || c.ObservedGeneration != se.Generation {
					return false
				}
			}
			return true
		}, 10*time.Second, 20*time.Millisecond, "ServiceExport %s does not carry %v", name, want)
	}

	w := e.watch(t, &membershipv1.WatchServicesRequest{Namespace: ns, ExportedOnly: true})
	require.Equal(t, snapStart, w.next(t, evTimeout).GetType())
	require.Equal(t, snapEnd, w.next(t, evTimeout).GetType())

	e.service(t, ctx, ns, "web", map[string]string{"app": "web"}, "http")
	export("web")
	conditions("web", map[string]string{"Valid": "Valid", "Ready": "Exported"})
	require.Equal(t, "namespaces/"+ns+"/services/web", w.next(t, evTimeout).GetEndpoints().GetService())

	_, err := e.kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "external", Namespace: ns},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	export("external")
	conditions("external", map[string]string{"Valid": "InvalidServiceType", "Ready": "Failed"})

	export("nothing")
	conditions("nothing", map[string]string{"Valid": "NoService", "Ready": "Failed"})
	// Neither is in the exported-only stream: the next event is that of
	// a Service exported after them.
	e.service(t, ctx, ns, "marker", map[string]string{"app": "marker"}, "http")
	export("marker")
	require.Equal(t, "namespaces/"+ns+"/services/marker", w.next(t, evTimeout).GetEndpoints().GetService())

	se, err := exports.Get(ctx, "external", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, metav1.ConditionFalse, meta.FindStatusCondition(se.Status.Conditions, "Valid").Status)
}
