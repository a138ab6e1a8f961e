package endpoints

// Protocol is the transport protocol of a port. The empty protocol means TCP,
// as it does in Kubernetes.
type Protocol string

// Protocols of Kubernetes Service and container ports.
const (
	ProtocolTCP  Protocol = "TCP"
	ProtocolUDP  Protocol = "UDP"
	ProtocolSCTP Protocol = "SCTP"
)

// orTCP applies the Kubernetes default protocol.
func (p Protocol) orTCP() Protocol {
	if p == "" {
		return ProtocolTCP
	}
	return p
}

// AddressType is the IP family of the addresses of an endpoint group, as in
// an EndpointSlice's addressType.
type AddressType string

// Address types of endpoint groups.
const (
	AddressTypeIPv4 AddressType = "IPv4"
	AddressTypeIPv6 AddressType = "IPv6"
)

// Kind is the type of object a workload is.
type Kind string

// Kinds of workloads a Service selects.
const (
	KindPod              Kind = "Pod"
	KindExternalWorkload Kind = "ExternalWorkload"
)

// Phase is a Pod's lifecycle phase. External workloads leave it empty.
type Phase string

// Pod phases.
const (
	PhasePending   Phase = "Pending"
	PhaseRunning   Phase = "Running"
	PhaseSucceeded Phase = "Succeeded"
	PhaseFailed    Phase = "Failed"
	PhaseUnknown   Phase = "Unknown"
)

// TargetPort is a Service port's targetPort: a port number, or the name of a
// workload port when Name is set. The zero value stands for an unset
// targetPort, which Kubernetes defaults to the Service port.
type TargetPort struct {
	Number int32
	Name   string
}

// TargetPortNumber returns a numeric targetPort.
func TargetPortNumber(n int32) TargetPort { return TargetPort{Number: n} }

// TargetPortName returns a named targetPort.
func TargetPortName(name string) TargetPort { return TargetPort{Name: name} }

// ServicePort is one port of a Service.
type ServicePort struct {
	Name        string
	Port        int32
	TargetPort  TargetPort
	Protocol    Protocol
	AppProtocol string
}

// Service holds what of a Service shapes its endpoints.
type Service struct {
	Namespace string
	Name      string
	Ports     []ServicePort
	// PublishNotReadyAddresses marks every endpoint ready, whatever its
	// workload's readiness.
	PublishNotReadyAddresses bool
	// AddressTypes are the Service's IP families (spec.ipFamilies); empty
	// means both, as the EndpointSlice controller assumes for a Service whose
	// families are not set. Other values are ignored.
	AddressTypes []AddressType
}

// ContainerPort is a port a workload declares. For a Pod these are the ports
// of its containers followed by those of its sidecars (init containers that
// restart always), in spec order, since a name is resolved to its first
// match.
type ContainerPort struct {
	Name     string
	Port     int32
	Protocol Protocol
}

// Workload holds what of a Pod or an ExternalWorkload shows in an endpoint.
type Workload struct {
	Kind      Kind
	Namespace string
	Name      string
	UID       string
	// Addresses are the workload's IPs (a Pod's status.podIPs), primary
	// first.
	Addresses []string
	Ports     []ContainerPort
	Phase     Phase
	// Ready is the workload's Ready condition.
	Ready bool
	// Terminating is set once the workload has a deletion timestamp.
	Terminating bool
	Zone        string
	NodeName    string
	Hostname    string
	Subdomain   string
}

// Terminal reports whether the workload is a Pod that has finished for good.
func (w *Workload) Terminal() bool {
	return w.Phase == PhaseSucceeded || w.Phase == PhaseFailed
}

// Conditions are the conditions of an endpoint.
type Conditions struct {
	Ready       bool
	Serving     bool
	Terminating bool
}

// TargetRef names the object behind an endpoint.
type TargetRef struct {
	Kind      Kind
	Namespace string
	Name      string
	UID       string
}

// Endpoint is one workload in an endpoint group.
type Endpoint struct {
	// Addresses are the workload's addresses of the group's family.
	Addresses  []string
	Conditions Conditions
	// Hostname is set only under the hostname and subdomain rule.
	Hostname  string
	NodeName  string
	Zone      string
	TargetRef TargetRef
}

// EndpointPort is a port every endpoint of a group serves.
type EndpointPort struct {
	Name        string
	Port        int32
	Protocol    Protocol
	AppProtocol string
}

// Group is a set of endpoints of one address family that resolved the
// Service's ports to the same port numbers; the EndpointSlice controller
// gives each such group slices of its own.
type Group struct {
	AddressType AddressType
	// Ports are in the order of the Service's ports; empty when the workloads
	// resolved none of them.
	Ports     []EndpointPort
	Endpoints []Endpoint
}

// Set is the endpoint set of one Service.
type Set struct {
	ClusterName string
	Namespace   string
	Service     string
	// Groups are sorted by address type, then by ports.
	Groups []Group
}
