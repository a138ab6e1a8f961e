package endpoints

import (
	"cmp"
	"encoding/binary"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"
)

// Option configures Compute.
type Option func(*config)

type config struct {
	clusterName string
}

// WithClusterName stamps the endpoint set with the name of the cluster it
// comes from.
func WithClusterName(name string) Option {
	return func(c *config) { c.clusterName = name }
}

// noPort marks a Service port that a workload could not resolve.
const noPort = -1

// ResolvePort returns the port number a workload serves a Service port on.
// A numeric targetPort is taken as is, an unset one means the Service port,
// and a named one is the first workload port with that name and protocol;
// ok is false when there is none.
func ResolvePort(sp ServicePort, w *Workload) (port int32, ok bool) {
	if sp.TargetPort.Name == "" {
		if sp.TargetPort.Number == 0 {
			return sp.Port, true
		}
		return sp.TargetPort.Number, true
	}
	proto := sp.Protocol.orTCP()
	for _, cp := range w.Ports {
		if cp.Name == sp.TargetPort.Name && cp.Protocol.orTCP() == proto {
			return cp.Port, true
		}
	}
	return 0, false
}

// Compute returns the endpoint set of a Service given the workloads it
// selects. Workloads of other namespaces and terminal Pods are left out, as
// are addresses that do not parse. The result does not depend on the order of
// workloads.
func Compute(svc Service, workloads []Workload, opts ...Option) Set {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	set := Set{ClusterName: cfg.clusterName, Namespace: svc.Namespace, Service: svc.Name}

	var types []AddressType
	for _, at := range svc.AddressTypes {
		if (at == AddressTypeIPv4 || at == AddressTypeIPv6) && !slices.Contains(types, at) {
			types = append(types, at)
		}
	}
	if len(svc.AddressTypes) == 0 {
		types = []AddressType{AddressTypeIPv4, AddressTypeIPv6}
	}
	byKey := map[string]int{}
	resolved := make([]int32, len(svc.Ports))
	key := make([]byte, 0, 1+4*len(svc.Ports))
	for i := range workloads {
		w := &workloads[i]
		if w.Namespace != svc.Namespace || w.Terminal() {
			continue
		}
		for j, sp := range svc.Ports {
			if p, ok := ResolvePort(sp, w); ok {
				resolved[j] = p
			} else {
				resolved[j] = noPort
			}
		}
		v4, v6 := splitAddresses(w.Addresses)
		for ti, at := range types {
			addrs := v4
			if at == AddressTypeIPv6 {
				addrs = v6
			}
			if len(addrs) == 0 {
				continue
			}
			// The key names the group: the family and what each Service port
			// resolved to, which together fix the group's ports.
			key = append(key[:0], byte(ti))
			for _, p := range resolved {
				key = binary.BigEndian.AppendUint32(key, uint32(p))
			}
			g, ok := byKey[string(key)]
			if !ok {
				g = len(set.Groups)
				byKey[string(key)] = g
				set.Groups = append(set.Groups, Group{AddressType: at, Ports: groupPorts(svc.Ports, resolved)})
			}
			set.Groups[g].Endpoints = append(set.Groups[g].Endpoints, endpointOf(svc, w, addrs))
		}
	}
	for i := range set.Groups {
		slices.SortFunc(set.Groups[i].Endpoints, compareEndpoints)
	}
	slices.SortFunc(set.Groups, compareGroups)
	return set
}

// splitAddresses sorts addresses by family, in canonical form. An
// IPv4-mapped IPv6 address counts as IPv4, as it does for the EndpointSlice
// controller.
func splitAddresses(addrs []string) (v4, v6 []string) {
	var buf [64]byte
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Zone() != "" {
			continue
		}
		ip = ip.Unmap()
		// Addresses are nearly always canonical already; reusing them saves
		// an allocation per address.
		if b := ip.AppendTo(buf[:0]); string(b) != a {
			a = string(b)
		}
		if ip.Is4() {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
	}
	return v4, v6
}

func groupPorts(ports []ServicePort, resolved []int32) []EndpointPort {
	var out []EndpointPort
	for i, sp := range ports {
		if resolved[i] == noPort {
			continue
		}
		out = append(out, EndpointPort{
			Name:        sp.Name,
			Port:        resolved[i],
			Protocol:    sp.Protocol.orTCP(),
			AppProtocol: sp.AppProtocol,
		})
	}
	return out
}

func endpointOf(svc Service, w *Workload, addrs []string) Endpoint {
	serving := w.Ready
	terminating := w.Terminating
	ep := Endpoint{
		Addresses: addrs,
		Conditions: Conditions{
			// A terminating endpoint is never ready, so that clients that
			// only look at ready stop sending to it, unless the Service asks
			// for every address.
			Ready:       svc.PublishNotReadyAddresses || (serving && !terminating),
			Serving:     serving,
			Terminating: terminating,
		},
		NodeName:  w.NodeName,
		Zone:      w.Zone,
		TargetRef: TargetRef{Kind: w.Kind, Namespace: w.Namespace, Name: w.Name, UID: w.UID},
	}
	if w.Hostname != "" && w.Subdomain == svc.Name {
		ep.Hostname = w.Hostname
	}
	return ep
}

func compareEndpoints(a, b Endpoint) int {
	return cmp.Or(
		strings.Compare(string(a.TargetRef.Kind), string(b.TargetRef.Kind)),
		strings.Compare(a.TargetRef.Name, b.TargetRef.Name),
		strings.Compare(a.TargetRef.UID, b.TargetRef.UID),
		slices.Compare(a.Addresses, b.Addresses),
	)
}

func compareGroups(a, b Group) int {
	if c := strings.Compare(string(a.AddressType), string(b.AddressType)); c != 0 {
		return c
	}
	return slices.CompareFunc(a.Ports, b.Ports, func(p, q EndpointPort) int {
		return cmp.Or(
			strings.Compare(p.Name, q.Name),
			cmp.Compare(p.Port, q.Port),
			strings.Compare(string(p.Protocol), string(q.Protocol)),
			strings.Compare(p.AppProtocol, q.AppProtocol),
		)
	})
}

// Fingerprint summarises everything of the workload that Compute reads, its
// name and namespace aside, so that a workload update with an unchanged
// fingerprint cannot change any endpoint; it feeds the update rule of the
// selector package.
func (w *Workload) Fingerprint() uint64 {
	h := fnv.New64a()
	var buf []byte
	str := func(s string) {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	flag := func(b bool) {
		if b {
			buf = append(buf, 1)
		} else {
			buf = append(buf, 0)
		}
	}
	str(string(w.Kind))
	str(w.UID)
	buf = binary.AppendUvarint(buf, uint64(len(w.Addresses)))
	for _, a := range w.Addresses {
		str(a)
	}
	buf = binary.AppendUvarint(buf, uint64(len(w.Ports)))
	for _, p := range w.Ports {
		str(p.Name)
		buf = binary.BigEndian.AppendUint32(buf, uint32(p.Port))
		str(string(p.Protocol.orTCP()))
	}
	flag(w.Terminal())
	flag(w.Ready)
	flag(w.Terminating)
	str(w.Zone)
	str(w.NodeName)
	str(w.Hostname)
	str(w.Subdomain)
	_, _ = h.Write(buf)
	return h.Sum64()
}

// Equal reports whether two endpoint sets are the same, so that a caller can
// tell a real change from a recomputation that found nothing new.
func (s *Set) Equal(o *Set) bool {
	return s.ClusterName == o.ClusterName && s.Namespace == o.Namespace && s.Service == o.Service &&
		slices.EqualFunc(s.Groups, o.Groups, func(a, b Group) bool {
			return a.AddressType == b.AddressType &&
				slices.Equal(a.Ports, b.Ports) &&
				slices.EqualFunc(a.Endpoints, b.Endpoints, func(p, q Endpoint) bool {
					return slices.Equal(p.Addresses, q.Addresses) && p.Conditions == q.Conditions &&
						p.Hostname == q.Hostname && p.NodeName == q.NodeName && p.Zone == q.Zone &&
						p.TargetRef == q.TargetRef
				})
		})
}
