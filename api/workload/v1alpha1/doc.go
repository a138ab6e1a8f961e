// Package v1alpha1 holds the ExternalWorkload API (group workload.plexus.dev,
// version v1alpha1).
//
// An ExternalWorkload is a workload that runs outside Kubernetes (a VM, a
// bare-metal host) and backs Services the same way a Pod does: Services
// select it through its labels, and its addresses and ports become endpoints.
// Membership stores every gRPC registration as one of these objects, so the
// Kubernetes API is the only state membership replicas share. Heartbeats
// land in the status subresource; a workload whose last heartbeat is older
// than its TTL is not ready.
//
// The CustomResourceDefinition is generated from these types with
// controller-gen (hack/generate-crds.sh) into deploy/crds.
//
// +kubebuilder:object:generate=true
// +groupName=workload.plexus.dev
package v1alpha1
