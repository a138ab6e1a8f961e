package controller

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	membershipv1 "github.com/plexusnet/plexus/clients/go/plexus/membership/v1"
	"github.com/plexusnet/plexus/services/importer/exports"
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
			out[i].Endpoints = append(out[i].Endpoints, endpoint(ep))
		}
	}
	return out, nil
}

func endpoint(ep *membershipv1.Endpoint) discovery.Endpoint {
	c := ep.GetConditions()
	ready, serving, terminating := c.GetReady(), c.GetServing(), c.GetTerminating()
	out := discovery.Endpoint{
		Addresses:  slices.Clone(ep.GetAddresses()),
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

// mcsExport converts one cluster's export for the merge.
func mcsExport(e exports.Export) mcs.Export {
	info := e.Endpoints.GetExport()
	out := mcs.Export{Cluster: e.Cluster, Type: mcsv1beta1.ClusterSetIP, SessionAffinity: corev1.ServiceAffinityNone}
	if t := info.GetExportCreateTime(); t != nil {
		out.Created = t.AsTime()
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

// merge merges the exports of a service. An export the merge refuses on its
// own is left out and reported, so one broken cluster does not take the
// service away from the others.
func merge(svc exports.Service) (mcs.Result, map[string]error, error) {
	all := make([]mcs.Export, len(svc.Exports))
	for i, e := range svc.Exports {
		all[i] = mcsExport(e)
	}
	r, err := mcs.Merge(all)
	if err == nil {
		return r, nil, nil
	}
	bad := map[string]error{}
	var good []mcs.Export
	for _, e := range all {
		if _, err := mcs.Merge([]mcs.Export{e}); err != nil {
			bad[e.Cluster] = err
			continue
		}
		good = append(good, e)
	}
	if len(good) == 0 {
		return mcs.Result{}, bad, fmt.Errorf("no valid export: %w", err)
	}
	r, err = mcs.Merge(good)
	return r, bad, err
}

// servicePorts returns the derived Service's ports: the merged ports with
// the target port spelled out, as the API server would default it.
func servicePorts(ports []mcsv1beta1.ServicePort) []corev1.ServicePort {
	out := make([]corev1.ServicePort, 0, len(ports))
	for _, p := range ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		out = append(out, corev1.ServicePort{Name: p.Name, Protocol: proto, Port: p.Port, AppProtocol: p.AppProtocol, TargetPort: intstr.FromInt32(p.Port)})
	}
	return out
}

// portsKey is equal for two Service port lists that mean the same.
func portsKey(ports []corev1.ServicePort) string {
	keys := make([]string, len(ports))
	for i, p := range ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		app := ""
		if p.AppProtocol != nil {
			app = *p.AppProtocol
		}
		keys[i] = p.Name + "/" + string(proto) + "/" + strconv.Itoa(int(p.Port)) + "/" + app
	}
	slices.Sort(keys)
	return strings.Join(keys, ",")
}

// families returns the IP families of addrs, in order.
func families(addrs []string) []corev1.IPFamily {
	out := make([]corev1.IPFamily, 0, len(addrs))
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(a); err == nil && ip.Is6() {
			out = append(out, corev1.IPv6Protocol)
		} else {
			out = append(out, corev1.IPv4Protocol)
		}
	}
	return out
}

// sortVIPs puts IPv4 first, as Kubernetes lists a dual-stack Service's IPs
// in its primary family's order and IPv4 is the common primary.
func sortVIPs(addrs []string) []string {
	out := slices.Clone(addrs)
	slices.SortStableFunc(out, func(a, b string) int {
		fa, fb := families([]string{a})[0], families([]string{b})[0]
		switch {
		case fa == fb:
			return 0
		case fa == corev1.IPv4Protocol:
			return -1
		}
		return 1
	})
	return out
}

// counts returns the endpoints and ready endpoints of an endpoint set.
func counts(eps *membershipv1.ServiceEndpoints) (total, ready int) {
	for _, g := range eps.GetGroups() {
		for _, ep := range g.GetEndpoints() {
			total++
			if ep.GetConditions().GetReady() {
				ready++
			}
		}
	}
	return total, ready
}
