// Package v1alpha1 holds the About API's ClusterProperty (group
// about.k8s.io, version v1alpha1) of SIG-Multicluster's KEP-2149: how a
// cluster names itself and the clusterset it belongs to.
//
// Two well-known properties matter to Plexus: cluster.clusterset.k8s.io,
// the cluster's id in its clusterset (what every endpoint, slice label and
// allocation owner carries), and clusterset.k8s.io, the clusterset's name.
// The upstream module is not a dependency of Plexus, so these types are
// written here to the upstream schema (cluster-scoped, spec.value of 1 to
// 128,000 characters); the CustomResourceDefinition is generated from them
// by controller-gen (hack/generate-crds.sh) into deploy/crds.
//
// +kubebuilder:object:generate=true
// +groupName=about.k8s.io
package v1alpha1
