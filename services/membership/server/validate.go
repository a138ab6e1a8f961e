package server

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/labels"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/netparse"
	"github.com/plexusnet/plexus/services/membership/endpoints"
	"github.com/plexusnet/plexus/services/membership/registry"
)

// Limits of a registration, the same as the CRD's.
const (
	maxPorts      = 100
	maxAddresses  = 2
	maxTTL        = 24 * time.Hour
	maxPoolLength = 256
	// maxLabels and maxLabelBytes bound a workload's labels: every
	// heartbeat rewrites the object and every List returns them, so a few
	// workloads with huge label sets would slow every client down or push
	// a List past the default 4 MiB message limit. Kubernetes bounds each
	// key and value; these bound the set.
	maxLabels     = 64
	maxLabelBytes = 16 << 10
	// maxEcho bounds the part of a client's text repeated in a field path.
	maxEcho = 128
)

// bounded cuts s to a short prefix for an error message.
func bounded(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	return s[:maxEcho] + "..."
}

// violations collects field violations.
type violations []apierr.FieldViolation

func (v *violations) add(field, format string, args ...any) {
	*v = append(*v, apierr.FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

// addAll adds the messages of a Kubernetes validation function, if any.
func (v *violations) addAll(field string, msgs []string) {
	if len(msgs) > 0 {
		v.add(field, "%s", strings.Join(msgs, "; "))
	}
}

func (v violations) err() error {
	if len(v) == 0 {
		return nil
	}
	return apierr.InvalidField(ReasonInvalidArgument, v...)
}

// WorkloadName returns the resource name of an external workload,
// "namespaces/{namespace}/workloads/{workload}".
func WorkloadName(namespace, name string) string {
	return "namespaces/" + namespace + "/workloads/" + name
}

// parseName splits "namespaces/{namespace}/{collection}/{name}" and checks
// the namespace is a DNS label and the name a DNS subdomain, as Kubernetes
// requires of both.
func parseName(v *violations, field, name string, collections ...string) (collection, namespace, object string) {
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != "namespaces" || !slices.Contains(collections, parts[2]) {
		v.add(field, "must look like namespaces/{namespace}/%s/{name}, got %q", strings.Join(collections, "|"), name)
		return "", "", ""
	}
	before := len(*v)
	v.addAll(field, prefixed("namespace", content.IsDNS1123Label(parts[1])))
	v.addAll(field, prefixed("name", content.IsDNS1123Subdomain(parts[3])))
	if len(*v) > before {
		return "", "", ""
	}
	return parts[2], parts[1], parts[3]
}

func prefixed(what string, msgs []string) []string {
	for i, m := range msgs {
		msgs[i] = what + ": " + m
	}
	return msgs
}

// parseWorkloadName parses an external workload's resource name.
func parseWorkloadName(field, name string) (namespace, object string, err error) {
	var v violations
	_, namespace, object = parseName(&v, field, name, "workloads")
	return namespace, object, v.err()
}

// parseMemberName parses the resource name of a Pod or an external
// workload.
func parseMemberName(field, name string) (kind endpoints.Kind, namespace, object string, err error) {
	var v violations
	collection, namespace, object := parseName(&v, field, name, "pods", "workloads")
	if err := v.err(); err != nil {
		return "", "", "", err
	}
	if collection == "pods" {
		return endpoints.KindPod, namespace, object, nil
	}
	return endpoints.KindExternalWorkload, namespace, object, nil
}

// parseServiceName parses a Service's resource name.
func parseServiceName(field, name string) (namespace, object string, err error) {
	var v violations
	_, namespace, object = parseName(&v, field, name, "services")
	return namespace, object, v.err()
}

// checkNamespace checks an optional namespace filter.
func checkNamespace(v *violations, field, ns string) {
	if ns != "" {
		v.addAll(field, content.IsDNS1123Label(ns))
	}
}

// registration validates a workload to register and returns it in the
// registry's terms, with canonical addresses and default protocols. Every
// problem is reported at once.
func registration(w *membershipv1.Workload) (registry.Registration, error) {
	var v violations
	if w == nil {
		v.add("workload", "is required")
		return registry.Registration{}, v.err()
	}
	var reg registry.Registration
	_, reg.Namespace, reg.Name = parseName(&v, "workload.name", w.GetName(), "workloads")

	labelBytes := 0
	for k, val := range w.GetLabels() {
		labelBytes += len(k) + len(val)
	}
	if n := len(w.GetLabels()); n > maxLabels || labelBytes > maxLabelBytes {
		v.add("workload.labels", "at most %d labels of %d bytes in all, got %d of %d bytes", maxLabels, maxLabelBytes, n, labelBytes)
		return registry.Registration{}, v.err()
	}
	for k, val := range w.GetLabels() {
		field := "workload.labels[" + bounded(k) + "]"
		v.addAll(field, prefixed("key", content.IsLabelKey(k)))
		v.addAll(field, prefixed("value", content.IsLabelValue(val)))
	}
	reg.Labels = w.GetLabels()

	reg.Addresses = addresses(&v, w.GetAddresses())
	switch pool := w.GetAddressPool(); {
	case pool == "" && len(w.GetAddresses()) == 0:
		v.add("workload.addresses", "at least one address is required unless address_pool is set")
	case pool != "" && len(w.GetAddresses()) > 0:
		v.add("workload.address_pool", "must be empty when addresses are given: the address is either brought or allocated")
	case pool != "":
		id, ok := strings.CutPrefix(pool, "pools/")
		if !ok || id == "" || strings.Contains(id, "/") || len(pool) > maxPoolLength {
			v.add("workload.address_pool", "must look like pools/{pool_id}, got %q", pool)
		}
		reg.Pool = pool
	}

	reg.Ports = ports(&v, w.GetPorts())
	if z := w.GetZone(); z != "" {
		v.addAll("workload.zone", content.IsLabelValue(z))
	}
	if n := w.GetNode(); n != "" {
		v.addAll("workload.node", content.IsDNS1123Subdomain(n))
	}
	if h := w.GetHostname(); h != "" {
		v.addAll("workload.hostname", content.IsDNS1123Label(h))
	}
	reg.Zone, reg.Node, reg.Hostname = w.GetZone(), w.GetNode(), w.GetHostname()
	reg.Ready = w.GetReady()

	if t := w.GetTtl(); t != nil {
		d := t.AsDuration()
		switch {
		case !t.IsValid() || d < time.Second || d > maxTTL:
			v.add("workload.ttl", "must be from 1s to %s, got %s", maxTTL, d)
		case d%time.Second != 0:
			v.add("workload.ttl", "must be a whole number of seconds, got %s", d)
		default:
			reg.TTL = d
		}
	}
	return reg, v.err()
}

// addresses checks a workload's addresses with the strict parser and the
// rules of EndpointSlice addresses, and returns them in canonical form.
func addresses(v *violations, in []string) []string {
	if len(in) > maxAddresses {
		v.add("workload.addresses", "at most %d addresses (one per IP family), got %d", maxAddresses, len(in))
		return nil
	}
	var out []string
	families := map[bool]int{}
	for i, a := range in {
		field := "workload.addresses[" + strconv.Itoa(i) + "]"
		ip, err := netparse.ParseAddr(a)
		if err != nil {
			v.add(field, "%v", err)
			continue
		}
		switch {
		case ip.IsUnspecified(), ip.IsLoopback(), ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
			v.add(field, "%s is an unspecified, loopback or link-local address, which cannot be an endpoint", ip)
			continue
		}
		if j, dup := families[ip.Is4()]; dup {
			v.add(field, "a second address of the same IP family as addresses[%d]", j)
			continue
		}
		families[ip.Is4()] = i
		out = append(out, ip.String())
	}
	return out
}

// ports checks a workload's ports as the CRD and Services do: numbers from 1
// to 65535, names that are DNS labels, unique and required when there is
// more than one port.
func ports(v *violations, in []*membershipv1.WorkloadPort) []workloadv1alpha1.WorkloadPort {
	if len(in) > maxPorts {
		v.add("workload.ports", "at most %d ports, got %d", maxPorts, len(in))
		return nil
	}
	out := make([]workloadv1alpha1.WorkloadPort, 0, len(in))
	names := map[string]int{}
	for i, p := range in {
		field := "workload.ports[" + strconv.Itoa(i) + "]"
		if p.GetPort() < 1 || p.GetPort() > 65535 {
			v.add(field+".port", "must be from 1 to 65535, got %d", p.GetPort())
		}
		switch name := p.GetName(); {
		case name == "" && len(in) > 1:
			v.add(field+".name", "is required when there is more than one port")
		case name != "":
			v.addAll(field+".name", content.IsDNS1123Label(name))
			if j, dup := names[name]; dup {
				v.add(field+".name", "%q is already the name of ports[%d]", name, j)
			}
			names[name] = i
		}
		proto, ok := protocols[p.GetProtocol()]
		if !ok {
			v.add(field+".protocol", "unknown protocol %d", p.GetProtocol())
		}
		out = append(out, workloadv1alpha1.WorkloadPort{Name: p.GetName(), Port: p.GetPort(), Protocol: proto})
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

var protocols = map[membershipv1.Protocol]corev1.Protocol{
	membershipv1.Protocol_PROTOCOL_UNSPECIFIED: "TCP",
	membershipv1.Protocol_PROTOCOL_TCP:         "TCP",
	membershipv1.Protocol_PROTOCOL_UDP:         "UDP",
	membershipv1.Protocol_PROTOCOL_SCTP:        "SCTP",
}

// listQuery is what a ListWorkloads page token is bound to, so a token is
// not replayed against another query.
type listQuery struct {
	Namespace string `json:"n,omitempty"`
	Selector  string `json:"s,omitempty"`
	Continue  string `json:"c"`
}

func checkSelector(v *violations, field, sel string) string {
	if sel == "" {
		return ""
	}
	s, err := labels.Parse(sel)
	if err != nil {
		v.add(field, "%v", err)
		return ""
	}
	return s.String()
}
