package kube

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/intstr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	"github.com/plexusnet/plexus/services/membership/endpoints"
)

// ZoneLabel is the node label a Pod's endpoint zone is read from, as the
// EndpointSlice controller does.
const ZoneLabel = corev1.LabelTopologyZone

// ServiceName returns the resource name of a Service,
// "namespaces/{namespace}/services/{service}".
func ServiceName(namespace, name string) string {
	return "namespaces/" + namespace + "/services/" + name
}

// PodWorkload returns what of a Pod shows in an endpoint. zone is the zone
// of the Pod's node ("" when unknown).
func PodWorkload(p *corev1.Pod, zone string) endpoints.Workload {
	w := endpoints.Workload{
		Kind:        endpoints.KindPod,
		Namespace:   p.Namespace,
		Name:        p.Name,
		UID:         string(p.UID),
		Phase:       endpoints.Phase(p.Status.Phase),
		Ready:       podReady(p),
		Terminating: p.DeletionTimestamp != nil,
		Zone:        zone,
		NodeName:    p.Spec.NodeName,
		Hostname:    p.Spec.Hostname,
		Subdomain:   p.Spec.Subdomain,
	}
	for _, ip := range p.Status.PodIPs {
		w.Addresses = append(w.Addresses, ip.IP)
	}
	if len(w.Addresses) == 0 && p.Status.PodIP != "" {
		w.Addresses = []string{p.Status.PodIP}
	}
	// A named targetPort resolves to the first match among the containers,
	// then the sidecars (init containers that keep running), as in
	// Kubernetes' FindPort.
	for _, c := range p.Spec.Containers {
		w.Ports = appendContainerPorts(w.Ports, c.Ports)
	}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			w.Ports = appendContainerPorts(w.Ports, c.Ports)
		}
	}
	return w
}

func appendContainerPorts(out []endpoints.ContainerPort, ports []corev1.ContainerPort) []endpoints.ContainerPort {
	for _, cp := range ports {
		out = append(out, endpoints.ContainerPort{Name: cp.Name, Port: cp.ContainerPort, Protocol: endpoints.Protocol(cp.Protocol)})
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ExternalWorkload returns what of an ExternalWorkload shows in an endpoint.
// Readiness is the Ready condition as stored, not recomputed from the
// heartbeat: the heartbeat sweeper turns it False when the TTL passes, and
// that write is what makes the change visible to every replica at once.
func ExternalWorkload(ew *workloadv1alpha1.ExternalWorkload) endpoints.Workload {
	w := endpoints.Workload{
		Kind:        endpoints.KindExternalWorkload,
		Namespace:   ew.Namespace,
		Name:        ew.Name,
		UID:         string(ew.UID),
		Addresses:   ew.Spec.WorkloadIPs,
		Ready:       meta.IsStatusConditionTrue(ew.Status.Conditions, workloadv1alpha1.ConditionReady),
		Terminating: ew.DeletionTimestamp != nil,
		Zone:        ew.Spec.Zone,
		NodeName:    ew.Spec.Node,
		Hostname:    ew.Spec.Hostname,
	}
	for _, p := range ew.Spec.Ports {
		w.Ports = append(w.Ports, endpoints.ContainerPort{Name: p.Name, Port: p.Port, Protocol: endpoints.Protocol(p.Protocol)})
	}
	return w
}

// familyTypes are the address types of a Service's IP families, in order.
func familyTypes(s *corev1.Service) []endpoints.AddressType {
	var out []endpoints.AddressType
	for _, f := range s.Spec.IPFamilies {
		switch f {
		case corev1.IPv4Protocol:
			out = append(out, endpoints.AddressTypeIPv4)
		case corev1.IPv6Protocol:
			out = append(out, endpoints.AddressTypeIPv6)
		}
	}
	return out
}

// ServiceModel returns what of a Service shapes its endpoints.
func ServiceModel(s *corev1.Service) endpoints.Service {
	m := endpoints.Service{
		Namespace:                s.Namespace,
		Name:                     s.Name,
		PublishNotReadyAddresses: s.Spec.PublishNotReadyAddresses,
	}
	m.AddressTypes = familyTypes(s)
	for _, p := range s.Spec.Ports {
		sp := endpoints.ServicePort{Name: p.Name, Port: p.Port, Protocol: endpoints.Protocol(p.Protocol)}
		if p.AppProtocol != nil {
			sp.AppProtocol = *p.AppProtocol
		}
		switch {
		case p.TargetPort.Type == intstr.String && p.TargetPort.StrVal != "":
			sp.TargetPort = endpoints.TargetPortName(p.TargetPort.StrVal)
		case p.TargetPort.Type == intstr.Int:
			sp.TargetPort = endpoints.TargetPortNumber(p.TargetPort.IntVal)
		}
		m.Ports = append(m.Ports, sp)
	}
	return m
}

// ServiceEndpoints renders an endpoint set as the API sends it. export is
// the Service's ServiceExport, nil when it has none.
func ServiceEndpoints(svc *corev1.Service, set *endpoints.Set, export *mcsv1beta1.ServiceExport) *membershipv1.ServiceEndpoints {
	out := &membershipv1.ServiceEndpoints{
		Service: ServiceName(svc.Namespace, svc.Name),
		Cluster: set.ClusterName,
		Uid:     string(svc.UID),
		Export:  exportInfo(svc, export),
	}
	for _, p := range svc.Spec.Ports {
		sp := &membershipv1.ServicePort{Name: p.Name, Port: p.Port, Protocol: protocol(endpoints.Protocol(p.Protocol))}
		if p.AppProtocol != nil {
			sp.AppProtocol = *p.AppProtocol
		}
		out.Ports = append(out.Ports, sp)
	}
	for _, g := range set.Groups {
		pg := &membershipv1.EndpointGroup{AddressType: addressType(g.AddressType)}
		for _, p := range g.Ports {
			pg.Ports = append(pg.Ports, &membershipv1.EndpointPort{
				Name: p.Name, Port: p.Port, Protocol: protocol(p.Protocol), AppProtocol: p.AppProtocol,
			})
		}
		for _, e := range g.Endpoints {
			pg.Endpoints = append(pg.Endpoints, &membershipv1.Endpoint{
				Addresses: e.Addresses,
				Conditions: &membershipv1.EndpointConditions{
					Ready: e.Conditions.Ready, Serving: e.Conditions.Serving, Terminating: e.Conditions.Terminating,
				},
				Hostname: e.Hostname,
				NodeName: e.NodeName,
				Zone:     e.Zone,
				TargetRef: &membershipv1.ObjectReference{
					Kind: string(e.TargetRef.Kind), Namespace: e.TargetRef.Namespace,
					Name: e.TargetRef.Name, Uid: e.TargetRef.UID,
				},
			})
		}
		out.Groups = append(out.Groups, pg)
	}
	return out
}

func exportInfo(svc *corev1.Service, export *mcsv1beta1.ServiceExport) *membershipv1.ExportInfo {
	info := &membershipv1.ExportInfo{
		Type:            membershipv1.ServiceType_SERVICE_TYPE_CLUSTER_SET_IP,
		SessionAffinity: membershipv1.SessionAffinity_SESSION_AFFINITY_NONE,
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		info.Type = membershipv1.ServiceType_SERVICE_TYPE_HEADLESS
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		info.SessionAffinity = membershipv1.SessionAffinity_SESSION_AFFINITY_CLIENT_IP
		timeout := int32(corev1.DefaultClientIPServiceAffinitySeconds)
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			timeout = *c.ClientIP.TimeoutSeconds
		}
		info.SessionAffinityTimeout = durationpb.New(time.Duration(timeout) * time.Second)
	}
	if p := svc.Spec.InternalTrafficPolicy; p != nil {
		info.InternalTrafficPolicy = string(*p)
	}
	if d := svc.Spec.TrafficDistribution; d != nil {
		info.TrafficDistribution = *d
	}
	for _, t := range familyTypes(svc) {
		info.IpFamilies = append(info.IpFamilies, addressType(t))
	}
	if export != nil {
		info.Exported = true
		info.ExportCreateTime = timestamppb.New(export.CreationTimestamp.Time)
		info.ExportedLabels = export.Spec.ExportedLabels
		info.ExportedAnnotations = export.Spec.ExportedAnnotations
	}
	return info
}

func protocol(p endpoints.Protocol) membershipv1.Protocol {
	switch p {
	case endpoints.ProtocolUDP:
		return membershipv1.Protocol_PROTOCOL_UDP
	case endpoints.ProtocolSCTP:
		return membershipv1.Protocol_PROTOCOL_SCTP
	default:
		return membershipv1.Protocol_PROTOCOL_TCP
	}
}

func addressType(t endpoints.AddressType) membershipv1.AddressType {
	switch t {
	case endpoints.AddressTypeIPv4:
		return membershipv1.AddressType_ADDRESS_TYPE_IPV4
	case endpoints.AddressTypeIPv6:
		return membershipv1.AddressType_ADDRESS_TYPE_IPV6
	default:
		return membershipv1.AddressType_ADDRESS_TYPE_UNSPECIFIED
	}
}
