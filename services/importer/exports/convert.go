package exports

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/endpointrules"
	"github.com/plexusnet/plexus/services/importer/materialize"
	"github.com/plexusnet/plexus/services/importer/mcs"
	islices "github.com/plexusnet/plexus/services/importer/slices"
)

// ErrAddressType means an endpoint group has no usable address type.
var ErrAddressType = errors.New("endpoint group address type must be IPv4 or IPv6")

// Protocol converts a membership protocol; unset means TCP.
func Protocol(p membershipv1.Protocol) corev1.Protocol {
	switch p {
	case membershipv1.Protocol_PROTOCOL_UDP:
		return corev1.ProtocolUDP
	case membershipv1.Protocol_PROTOCOL_SCTP:
		return corev1.ProtocolSCTP
	}
	return corev1.ProtocolTCP
}

// ProtocolOf converts a Kubernetes protocol back.
func ProtocolOf(p corev1.Protocol) membershipv1.Protocol {
	switch p {
	case corev1.ProtocolUDP:
		return membershipv1.Protocol_PROTOCOL_UDP
	case corev1.ProtocolSCTP:
		return membershipv1.Protocol_PROTOCOL_SCTP
	}
	return membershipv1.Protocol_PROTOCOL_TCP
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// groups converts an endpoint set into the packer's groups. Empty groups
// are left out; groups of the same address type and port set are merged, so
// a source that splits them differently does not fail the packer.
func groups(eps *membershipv1.ServiceEndpoints) ([]islices.Group, error) {
	out := make([]islices.Group, 0, len(eps.GetGroups()))
	index := map[string]int{}
	for gi, g := range eps.GetGroups() {
		if len(g.GetEndpoints()) == 0 {
			continue
		}
		var at discovery.AddressType
		switch g.GetAddressType() {
		case membershipv1.AddressType_ADDRESS_TYPE_IPV4:
			at = discovery.AddressTypeIPv4
		case membershipv1.AddressType_ADDRESS_TYPE_IPV6:
			at = discovery.AddressTypeIPv6
		default:
			return nil, fmt.Errorf("group %d: %s: %w", gi, g.GetAddressType(), ErrAddressType)
		}
		ports := make([]discovery.EndpointPort, 0, len(g.GetPorts()))
		keys := make([]string, 0, len(g.GetPorts()))
		for _, p := range g.GetPorts() {
			name, num, proto := p.GetName(), p.GetPort(), Protocol(p.GetProtocol())
			ports = append(ports, discovery.EndpointPort{Name: &name, Port: &num, Protocol: &proto, AppProtocol: optional(p.GetAppProtocol())})
			keys = append(keys, fmt.Sprintf("%s/%d/%s/%s", name, num, proto, p.GetAppProtocol()))
		}
		slices.Sort(keys)
		gk := string(at) + "|" + strings.Join(keys, ",")
		i, ok := index[gk]
		if !ok {
			i = len(out)
			index[gk] = i
			out = append(out, islices.Group{AddressType: at, Ports: ports})
		}
		for _, ep := range g.GetEndpoints() {
			out[i].Endpoints = append(out[i].Endpoints, endpoint(ep, at == discovery.AddressTypeIPv6))
		}
	}
	return out, nil
}

// endpoint converts one endpoint; its addresses are canonicalised, since an
// endpoint is identified by their text.
func endpoint(ep *membershipv1.Endpoint, v6 bool) discovery.Endpoint {
	c := ep.GetConditions()
	ready, serving, terminating := c.GetReady(), c.GetServing(), c.GetTerminating()
	addrs := make([]string, len(ep.GetAddresses()))
	for i, a := range ep.GetAddresses() {
		addrs[i] = endpointrules.Canonical(a, v6)
	}
	out := discovery.Endpoint{
		Addresses:  addrs,
		Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
		Hostname:   optional(ep.GetHostname()),
		NodeName:   optional(ep.GetNodeName()),
		Zone:       optional(ep.GetZone()),
	}
	if zones := ep.GetHints().GetForZones(); len(zones) > 0 {
		out.Hints = &discovery.EndpointHints{}
		for _, z := range zones {
			out.Hints.ForZones = append(out.Hints.ForZones, discovery.ForZone{Name: z})
		}
	}
	if ref := ep.GetTargetRef(); ref != nil {
		out.TargetRef = &corev1.ObjectReference{Kind: ref.GetKind(), Namespace: ref.GetNamespace(), Name: ref.GetName(), UID: types.UID(ref.GetUid())}
	}
	return out
}

// Core converts one cluster's export for the importer's core (package
// materialize): its properties for the merge and its endpoints for the
// packer, addresses canonicalised.
func (e Export) Core() materialize.Export {
	out := e.Summary()
	out.Groups, out.Unusable = groups(e.Endpoints)
	return out
}

// Summary is Core without the endpoints themselves: what a status read
// needs, without converting every endpoint on each read.
func (e Export) Summary() materialize.Export {
	n, ready := 0, 0
	for _, g := range e.Endpoints.GetGroups() {
		n += len(g.GetEndpoints())
		for _, ep := range g.GetEndpoints() {
			if ep.GetConditions().GetReady() {
				ready++
			}
		}
	}
	return materialize.Export{Cluster: e.Cluster, Properties: mcsExport(e), Endpoints: n, Ready: ready, Ranges: e.Ranges}
}

// mcsExport converts one cluster's export for the merge.
func mcsExport(e Export) mcs.Export {
	info := e.Endpoints.GetExport()
	out := mcs.Export{Cluster: e.Cluster, Type: mcsv1beta1.ClusterSetIP, SessionAffinity: corev1.ServiceAffinityNone,
		InternalTrafficPolicy: info.GetInternalTrafficPolicy(), TrafficDistribution: info.GetTrafficDistribution(),
		Labels: info.GetExportedLabels(), Annotations: info.GetExportedAnnotations()}
	if t := info.GetExportCreateTime(); t != nil {
		out.Created = t.AsTime()
	}
	for _, f := range info.GetIpFamilies() {
		switch f {
		case membershipv1.AddressType_ADDRESS_TYPE_IPV4:
			out.IPFamilies = append(out.IPFamilies, corev1.IPv4Protocol)
		case membershipv1.AddressType_ADDRESS_TYPE_IPV6:
			out.IPFamilies = append(out.IPFamilies, corev1.IPv6Protocol)
		}
	}
	if info.GetType() == membershipv1.ServiceType_SERVICE_TYPE_HEADLESS {
		out.Type = mcsv1beta1.Headless
	}
	if info.GetSessionAffinity() == membershipv1.SessionAffinity_SESSION_AFFINITY_CLIENT_IP {
		out.SessionAffinity = corev1.ServiceAffinityClientIP
		if d := info.GetSessionAffinityTimeout(); d != nil {
			secs := int32(min(d.AsDuration()/time.Second, 1<<31-1))
			out.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &secs}}
		}
	}
	for _, p := range e.Endpoints.GetPorts() {
		out.Ports = append(out.Ports, mcsv1beta1.ServicePort{Name: p.GetName(), Protocol: Protocol(p.GetProtocol()), Port: p.GetPort(), AppProtocol: optional(p.GetAppProtocol())})
	}
	return out
}
