package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	policyv1alpha1 "github.com/plexusnet/plexus/api/policy/v1alpha1"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// testExportPolicy: the clusterset policy refuses an export of this
// cluster with Valid=False ExportNotPermitted naming the rule, and the
// export leaves the exported-only stream; a policy that lets the cluster
// export brings it back, and so does deleting the policy. The API server
// refuses a policy with a bad entry, naming it.
func testExportPolicy(ctx context.Context, t *testing.T, e *env) {
	const ns = "policy-export"
	svc := "namespaces/" + ns + "/services/web"
	e.namespace(t, ctx, ns)
	dyn, err := dynamic.NewForConfig(e.cluster.Config)
	require.NoError(t, err)
	exports := e.mcs.MulticlusterV1beta1().ServiceExports(ns)
	valid := func(reason, msg string) {
		t.Helper()
		require.Eventually(t, func() bool {
			se, err := exports.Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false
			}
			c := meta.FindStatusCondition(se.Status.Conditions, "Valid")
			return c != nil && c.Reason == reason && (msg == "" || strings.Contains(c.Message, msg))
		}, 10*time.Second, 20*time.Millisecond, "ServiceExport web is not Valid with reason %s", reason)
	}

	w := e.watch(t, &membershipv1.WatchServicesRequest{Namespace: ns, ExportedOnly: true})
	require.Equal(t, snapStart, w.next(t, evTimeout).GetType())
	end := w.next(t, evTimeout)
	require.Equal(t, snapEnd, end.GetType())

	e.service(t, ctx, ns, "web", map[string]string{"app": "web"}, "http")
	_, err = exports.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	up := expectUpsert(t, w, svc, end.GetRevision())
	valid("Valid", "")

	t.Run("bad entries are refused by the API server", func(t *testing.T) {
		err := kubetest.ApplyPolicy(ctx, e.cluster.Config, kubetest.Rule{"namespace": "Bad_Name"})
		require.ErrorContains(t, err, "spec.rules[0].namespace")
		err = kubetest.ApplyPolicy(ctx, e.cluster.Config, kubetest.Rule{"namespace": ns, "exportFrom": []any{"east", "not a cluster"}})
		require.ErrorContains(t, err, "spec.rules[0].exportFrom[1]")
		other := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": policyv1alpha1.SchemeGroupVersion.String(), "kind": "ClusterSetPolicy",
			"metadata": map[string]any{"name": "second"}, "spec": map[string]any{},
		}}
		_, err = dyn.Resource(policyv1alpha1.ClusterSetPoliciesResource).Create(ctx, other, metav1.CreateOptions{})
		require.ErrorContains(t, err, "the clusterset policy is named clusterset")
	})

	// The refusal: only another cluster may export the namespace (the
	// rule for another namespace does not apply).
	require.NoError(t, kubetest.ApplyPolicy(ctx, e.cluster.Config,
		kubetest.Rule{"namespace": "elsewhere", "exportFrom": []any{}},
		kubetest.Rule{"namespace": "policy-*", "exportFrom": []any{"another-cluster"}}))
	valid("ExportNotPermitted", `spec.rules[1] (namespace "policy-*")`)
	del := w.next(t, evTimeout)
	require.Equal(t, deleteEv, del.GetType(), "a refused export leaves the exported-only view")
	require.Equal(t, svc, del.GetEndpoints().GetService())
	require.Greater(t, del.GetRevision(), up.GetRevision())
	se, err := exports.Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	ready := meta.FindStatusCondition(se.Status.Conditions, "Ready")
	require.Equal(t, metav1.ConditionFalse, ready.Status)

	// Allowed again by a closer rule that lists this cluster.
	require.NoError(t, kubetest.ApplyPolicy(ctx, e.cluster.Config,
		kubetest.Rule{"namespace": "policy-*", "exportFrom": []any{"another-cluster"}},
		kubetest.Rule{"namespace": ns, "exportFrom": []any{clusterName}}))
	valid("Valid", "")
	back := expectUpsert(t, w, svc, del.GetRevision())

	// Refused by an empty list, then allowed by deleting the policy: the
	// default is every cluster.
	require.NoError(t, kubetest.ApplyPolicy(ctx, e.cluster.Config, kubetest.Rule{"namespace": ns, "exportFrom": []any{}}))
	valid("ExportNotPermitted", "lets no cluster export namespace "+ns)
	del = w.next(t, evTimeout)
	require.Equal(t, deleteEv, del.GetType())
	require.Greater(t, del.GetRevision(), back.GetRevision())
	require.NoError(t, kubetest.DeletePolicy(ctx, e.cluster.Config))
	valid("Valid", "")
	expectUpsert(t, w, svc, del.GetRevision())
}
