package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PolicyName is the name of the one ClusterSetPolicy the services follow;
// the API server refuses any other name.
const PolicyName = "clusterset"

// Limits of a policy, enforced by the CustomResourceDefinition's schema and
// again by the parser (package internal/exportpolicy).
const (
	// MaxRules bounds the rules of a policy.
	MaxRules = 256
	// MaxClusters bounds the clusters one list of a rule names.
	MaxClusters = 256
)

// ClusterSetPolicy says which member clusters may export the services of
// which namespaces, and which member clusters import them. Without a
// policy, or for a namespace no rule matches, every cluster may export and
// every cluster imports.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=csp
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'clusterset'",message="the clusterset policy is named clusterset"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterSetPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec holds the rules.
	// +required
	Spec ClusterSetPolicySpec `json:"spec"`
}

// ClusterSetPolicySpec holds the rules of a ClusterSetPolicy.
type ClusterSetPolicySpec struct {
	// Rules are the namespace rules. The rule whose namespace matches most
	// closely decides: an exact name before a prefix, a longer prefix
	// before a shorter one, "*" last. Two rules may not name the same
	// namespace pattern.
	// +optional
	// +listType=map
	// +listMapKey=namespace
	// +kubebuilder:validation:MaxItems=256
	Rules []NamespaceRule `json:"rules,omitempty"`
}

// NamespaceRule says who may export and who imports the services of the
// namespaces it matches.
type NamespaceRule struct {
	// Namespace is a namespace name, a prefix ending in "*" ("team-*"
	// matches team-a and team-b), or "*" for every namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?|[a-z0-9][-a-z0-9]*\*)$`
	// +required
	Namespace string `json:"namespace"`
	// ExportFrom are the ids of the clusters that may export the
	// namespace's services, "*" for every cluster. Omitted: every
	// cluster; an empty list: none.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`
	ExportFrom *[]string `json:"exportFrom,omitempty"`
	// ImportTo are the ids of the clusters that import the namespace's
	// services, "*" for every cluster. Omitted: every cluster; an empty
	// list: none.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`
	ImportTo *[]string `json:"importTo,omitempty"`
}

// ClusterSetPolicyList is a list of ClusterSetPolicies.
//
// +kubebuilder:object:root=true
type ClusterSetPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterSetPolicy `json:"items"`
}
