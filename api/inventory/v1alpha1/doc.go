// Package v1alpha1 holds the Cluster Inventory API's ClusterProfile (group
// multicluster.x-k8s.io, version v1alpha1) of SIG-Multicluster's KEP-4322:
// one object per member cluster, kept in an inventory (hub) cluster, that
// controllers list to find the clusters of a fleet.
//
// Plexus reads a member's membership address from the profile's status
// properties (PropertyMembershipAddress, and PropertyMembershipServerName
// for its TLS identity, PropertyMembershipRanges for the addresses its
// endpoints may have); the member's id is the cluster.clusterset.k8s.io
// property when the profile carries it, else the profile's name. The
// upstream module is not a dependency of Plexus, so these types are written
// here to the upstream schema; the CustomResourceDefinition is generated
// from them by controller-gen (hack/generate-crds.sh) into deploy/crds.
//
// +kubebuilder:object:generate=true
// +groupName=multicluster.x-k8s.io
package v1alpha1
