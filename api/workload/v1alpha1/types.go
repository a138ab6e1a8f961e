package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultTTLSeconds is the heartbeat TTL the API server fills in when a
// workload does not set one.
const DefaultTTLSeconds = 30

// ConditionReady is the condition type that says whether the workload should
// receive traffic. A workload counts as ready only while this condition is
// True and its heartbeat has not expired (see IsReady).
const ConditionReady = "Ready"

// Reasons for the Ready condition.
const (
	// ReasonReported means the workload itself reported the readiness in
	// the condition's status.
	ReasonReported = "Reported"
	// ReasonHeartbeatExpired means no heartbeat arrived within the TTL.
	ReasonHeartbeatExpired = "HeartbeatExpired"
)

// ExternalWorkload is a workload outside Kubernetes (a VM, a bare-metal host)
// that Services select by its labels, like a Pod.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=extwl,categories=plexus
// +kubebuilder:printcolumn:name="Addresses",type=string,JSONPath=`.spec.workloadIPs`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.lastHeartbeatTime`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`,priority=1
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.node`,priority=1
// +kubebuilder:printcolumn:name="Zone",type=string,JSONPath=`.spec.zone`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ExternalWorkload struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the workload registered.
	// +required
	Spec ExternalWorkloadSpec `json:"spec"`

	// Status is what membership observed: readiness and heartbeats.
	// +optional
	Status ExternalWorkloadStatus `json:"status,omitempty"`
}

// ExternalWorkloadSpec describes where a workload can be reached.
//
// The addresses may be left out only while they are still being allocated
// from a pool: the allocation's owner is this object, so it has to exist
// (and have a uid) before its address can be allocated.
//
// +kubebuilder:validation:XValidation:rule="has(self.pool) || has(self.workloadIPs)",message="workloadIPs is required unless the address is allocated from a pool"
type ExternalWorkloadSpec struct {
	// WorkloadIPs are the workload's addresses, at most one per IP family,
	// in canonical form. The same rules as for EndpointSlice addresses
	// apply: no unspecified, loopback or link-local addresses.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:MaxLength=39
	// +kubebuilder:validation:items:XValidation:rule="isIP(self) && ip.isCanonical(self)",message="must be an IPv4 or IPv6 address in canonical form"
	// +kubebuilder:validation:items:XValidation:rule="!isIP(self) || !(ip(self).isUnspecified() || ip(self).isLoopback() || ip(self).isLinkLocalUnicast() || ip(self).isLinkLocalMulticast())",message="may not be an unspecified, loopback or link-local address"
	// +kubebuilder:validation:XValidation:rule="size(self) < 2 || !isIP(self[0]) || !isIP(self[1]) || ip(self[0]).family() != ip(self[1]).family()",message="at most one address per IP family"
	WorkloadIPs []string `json:"workloadIPs,omitempty"`

	// Ports the workload serves. Names are required and unique when there
	// is more than one port, as for a Service.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:XValidation:rule="size(self) <= 1 || self.all(p, has(p.name) && self.exists_one(q, has(q.name) && q.name == p.name))",message="ports must have unique names when there is more than one"
	Ports []WorkloadPort `json:"ports,omitempty"`

	// Zone is the topology zone the workload runs in; it becomes the
	// endpoint's zone.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`
	Zone string `json:"zone,omitempty"`

	// Node is the name of the machine the workload runs on; it becomes the
	// endpoint's nodeName.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Node string `json:"node,omitempty"`

	// Hostname becomes the endpoint's hostname (a DNS label).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Hostname string `json:"hostname,omitempty"`

	// Pool is the allocator pool the addresses come from, as a resource
	// name ("pools/{pool_id}"). Empty when the workload brought its own
	// addresses.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^pools/[^/]+$`
	Pool string `json:"pool,omitempty"`

	// TTLSeconds is how long after its last heartbeat the workload still
	// counts as alive.
	// +optional
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	TTLSeconds int32 `json:"ttlSeconds,omitempty"`
}

// WorkloadPort is one port the workload serves.
type WorkloadPort struct {
	// Name matches the Service port's targetPort name (a DNS label).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`

	// Port is the port number.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// Protocol is TCP, UDP or SCTP.
	// +optional
	// +kubebuilder:default=TCP
	// +kubebuilder:validation:Enum=TCP;UDP;SCTP
	Protocol corev1.Protocol `json:"protocol,omitempty"`
}

// ExternalWorkloadStatus is what membership observed about the workload.
type ExternalWorkloadStatus struct {
	// Conditions hold the Ready condition.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// LastHeartbeatTime is when the workload last proved it is alive.
	// Microsecond precision keeps a short TTL from rounding to a second.
	// +optional
	LastHeartbeatTime *metav1.MicroTime `json:"lastHeartbeatTime,omitempty"`

	// Allocation is the allocator resource name of the workload's address
	// ("pools/{pool_id}/allocations/{address}") when it came from a pool.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^pools/[^/]+/allocations/[^/]+$`
	Allocation string `json:"allocation,omitempty"`

	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ExternalWorkloadList is a list of ExternalWorkloads.
//
// +kubebuilder:object:root=true
type ExternalWorkloadList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the workloads.
	Items []ExternalWorkload `json:"items"`
}
