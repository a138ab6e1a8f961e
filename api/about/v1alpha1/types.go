package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Well-known ClusterProperty names (KEP-2149).
const (
	// ClusterIDProperty names the property whose value is the cluster's
	// id in its clusterset.
	ClusterIDProperty = "cluster.clusterset.k8s.io"
	// ClusterSetProperty names the property whose value is the name of the
	// clusterset the cluster belongs to.
	ClusterSetProperty = "clusterset.k8s.io"
)

// ClusterProperty is one named property of the cluster it is stored in.
//
// about.k8s.io is a protected group: the API server installs its CRD only
// with the approval annotation, which names the KEP that approved it.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes/enhancements/tree/master/keps/sig-multicluster/2149-clusterid"
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Value",type=string,JSONPath=`.spec.value`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterProperty struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec holds the property's value.
	// +required
	Spec ClusterPropertySpec `json:"spec"`

	// Status is reported by whoever manages the property.
	// +optional
	Status ClusterPropertyStatus `json:"status,omitempty"`
}

// ClusterPropertySpec is the value of a ClusterProperty.
type ClusterPropertySpec struct {
	// Value is the property's value.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128000
	// +required
	Value string `json:"value"`
}

// ClusterPropertyStatus is the observed state of a ClusterProperty.
type ClusterPropertyStatus struct {
	// Conditions are the property's conditions.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ClusterPropertyList is a list of ClusterProperties.
//
// +kubebuilder:object:root=true
type ClusterPropertyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterProperty `json:"items"`
}
