package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LabelClusterManager is the label a cluster manager puts on the profiles
// it creates; its value is the manager's name (spec.clusterManager.name).
const LabelClusterManager = "x-k8s.io/cluster-manager"

// Condition types of a ClusterProfile (KEP-4322).
const (
	// ConditionJoined says whether the cluster is under management.
	ConditionJoined = "Joined"
	// ConditionControlPlaneHealthy says whether its control plane is
	// healthy.
	ConditionControlPlaneHealthy = "ControlPlaneHealthy"
)

// Properties Plexus reads from a profile's status.
const (
	// PropertyMembershipAddress is the gRPC target of the member's
	// membership service (host:port, a comma-separated list of replicas,
	// or dns:///name:port).
	PropertyMembershipAddress = "membership.plexus.dev/address"
	// PropertyMembershipServerName is the TLS server name the membership's
	// certificate is verified against, when it is not the address's host.
	PropertyMembershipServerName = "membership.plexus.dev/tls-server-name"
	// PropertyMembershipRanges lists, comma-separated, the CIDRs the
	// member's endpoint addresses lie in; importers drop the member's
	// endpoints outside them. Absent: any address.
	PropertyMembershipRanges = "membership.plexus.dev/ranges"
)

// ClusterProfile represents one member cluster of a fleet.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Manager",type=string,JSONPath=`.spec.clusterManager.name`
// +kubebuilder:printcolumn:name="Joined",type=string,JSONPath=`.status.conditions[?(@.type=="Joined")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is set by the cluster manager that created the profile.
	// +required
	Spec ClusterProfileSpec `json:"spec"`

	// Status is what the cluster manager reports of the cluster.
	// +optional
	Status ClusterProfileStatus `json:"status,omitempty"`
}

// ClusterProfileSpec names the cluster and its manager.
type ClusterProfileSpec struct {
	// DisplayName is a human-readable name of the cluster.
	// +optional
	DisplayName string `json:"displayName,omitempty"`

	// ClusterManager is the manager that created the profile; it cannot
	// change.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="ClusterManager is immutable"
	ClusterManager ClusterManager `json:"clusterManager"`
}

// ClusterManager names a cluster manager.
type ClusterManager struct {
	// Name is the cluster manager's name.
	// +required
	Name string `json:"name"`
}

// ClusterProfileStatus is what the cluster manager reports.
type ClusterProfileStatus struct {
	// Conditions are the cluster's conditions (Joined,
	// ControlPlaneHealthy).
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Version is the cluster's Kubernetes version.
	// +optional
	Version ClusterVersion `json:"version,omitempty"`

	// Properties are name/value pairs that describe the cluster, such as
	// its ClusterProperties.
	// +optional
	// +listType=map
	// +listMapKey=name
	Properties []Property `json:"properties,omitempty"`
}

// ClusterVersion is the versions of a cluster.
type ClusterVersion struct {
	// Kubernetes is the version of the cluster's Kubernetes control plane.
	// +optional
	Kubernetes string `json:"kubernetes,omitempty"`
}

// Property is one name/value pair of a ClusterProfile's status.
type Property struct {
	// Name of the property; a ClusterProperty's name or a name of the
	// manager's own.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// Value of the property.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +required
	Value string `json:"value"`

	// LastObservedTime is when the value was last observed.
	// +optional
	LastObservedTime metav1.Time `json:"lastObservedTime,omitempty"`
}

// ClusterProfileList is a list of ClusterProfiles.
//
// +kubebuilder:object:root=true
type ClusterProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterProfile `json:"items"`
}

// Property returns the value of the named status property.
func (p *ClusterProfile) Property(name string) (string, bool) {
	for _, pr := range p.Status.Properties {
		if pr.Name == name {
			return pr.Value, true
		}
	}
	return "", false
}
