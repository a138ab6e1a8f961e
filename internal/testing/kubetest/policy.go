package kubetest

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	policyv1alpha1 "github.com/plexusnet/plexus/api/policy/v1alpha1"
)

// Rule is one namespace rule of a ClusterSetPolicy, as its JSON has it
// (namespace, exportFrom, importTo): a list left out is every cluster, an
// empty one none.
type Rule map[string]any

// ApplyPolicy creates the cluster's ClusterSetPolicy with rules, or
// replaces the one there; the API server's refusal is returned as it is.
func ApplyPolicy(ctx context.Context, cfg *rest.Config, rules ...Rule) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	items := make([]any, len(rules))
	for i, r := range rules {
		items[i] = map[string]any(r)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": policyv1alpha1.SchemeGroupVersion.String(), "kind": "ClusterSetPolicy",
		"metadata": map[string]any{"name": policyv1alpha1.PolicyName},
		"spec":     map[string]any{"rules": items},
	}}
	res := dyn.Resource(policyv1alpha1.ClusterSetPoliciesResource)
	cur, err := res.Get(ctx, policyv1alpha1.PolicyName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = res.Create(ctx, u, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	u.SetResourceVersion(cur.GetResourceVersion())
	_, err = res.Update(ctx, u, metav1.UpdateOptions{})
	return err
}

// DeletePolicy deletes the cluster's ClusterSetPolicy, if any.
func DeletePolicy(ctx context.Context, cfg *rest.Config) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	err = dyn.Resource(policyv1alpha1.ClusterSetPoliciesResource).Delete(ctx, policyv1alpha1.PolicyName, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
