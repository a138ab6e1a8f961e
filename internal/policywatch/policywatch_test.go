package policywatch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	policyv1alpha1 "github.com/plexusnet/plexus/api/policy/v1alpha1"
	"github.com/plexusnet/plexus/internal/exportpolicy"
	"github.com/plexusnet/plexus/internal/policywatch"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// start runs a Watcher over client until the test ends; changes receives
// a value after every change it reports.
func start(t *testing.T, client dynamic.Interface, reg prometheus.Registerer) (*policywatch.Watcher, chan struct{}) {
	t.Helper()
	w, err := policywatch.New(client, nil, reg)
	require.NoError(t, err)
	changes := make(chan struct{}, 16)
	w.OnChange(func() { changes <- struct{}{} })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, changes
}

func next(t *testing.T, changes chan struct{}) {
	t.Helper()
	select {
	case <-changes:
	case <-time.After(10 * time.Second):
		t.Fatal("no change reported")
	}
}

// TestWatcherFollowsThePolicy: against a real kube-apiserver, the watcher
// is synced only once it has read the cluster's policy, and follows its
// creation, changes and deletion.
func TestWatcherFollowsThePolicy(t *testing.T) {
	etcd := kubetest.StartEtcd(t)
	cluster := kubetest.StartAPIServer(t, etcd)
	kubetest.InstallCRDs(t, cluster.Config)
	ctx := t.Context()
	require.NoError(t, kubetest.ApplyPolicy(ctx, cluster.Config, kubetest.Rule{"namespace": "shop", "exportFrom": []any{"east"}}))
	client, err := dynamic.NewForConfig(cluster.Config)
	require.NoError(t, err)

	w, changes := start(t, client, nil)
	next(t, changes)
	require.Eventually(t, w.HasSynced, 10*time.Second, 10*time.Millisecond)
	require.False(t, w.Current().MayExport("shop", "west").Allowed, "the policy present at start is read before the watcher is synced")
	require.True(t, w.Current().MayExport("shop", "east").Allowed)

	require.NoError(t, kubetest.ApplyPolicy(ctx, cluster.Config, kubetest.Rule{"namespace": "shop", "exportFrom": []any{"west"}}))
	next(t, changes)
	require.True(t, w.Current().MayExport("shop", "west").Allowed)
	require.False(t, w.Current().MayExport("shop", "east").Allowed)

	require.NoError(t, kubetest.DeletePolicy(ctx, cluster.Config))
	next(t, changes)
	require.Nil(t, w.Current(), "no policy: everything is permitted")
	require.True(t, w.Current().MayExport("shop", "east").Allowed)
}

// TestInvalidPolicyRefusesEverything: a policy the API server's schema let
// through (an older CRD) but the parser refuses closes everything, names
// the entry and sets plexus_clusterset_policy_valid to 0. Only a fake
// client can hold such an object.
func TestInvalidPolicyRefusesEverything(t *testing.T) {
	bad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": policyv1alpha1.SchemeGroupVersion.String(), "kind": "ClusterSetPolicy",
		"metadata": map[string]any{"name": policyv1alpha1.PolicyName, "resourceVersion": "3"},
		"spec":     map[string]any{"rules": []any{map[string]any{"namespace": "shop"}, map[string]any{"namespace": "shop"}}},
	}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{policyv1alpha1.ClusterSetPoliciesResource: "ClusterSetPolicyList"}, bad)
	reg := prometheus.NewRegistry()
	w, changes := start(t, client, reg)
	next(t, changes)
	p := w.Current()
	require.True(t, errors.Is(p.Err(), exportpolicy.ErrInvalid))
	d := p.MayExport("other", "east")
	require.False(t, d.Allowed)
	require.Contains(t, d.Message, "spec.rules[1].namespace")
	require.False(t, p.MayImport("other", "east").Allowed)
	valid, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, valid, 1)
	require.Equal(t, 0.0, valid[0].GetMetric()[0].GetGauge().GetValue())
}
