package slices

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/plexusnet/plexus/internal/endpointrules"
)

// identity returns the key under which an endpoint is tracked across plans.
// Addresses are sorted because their order is content (consumers use the
// first), not identity.
func identity(ep *discovery.Endpoint) string {
	addrs := ep.Addresses
	if !sort.StringsAreSorted(addrs) {
		addrs = make([]string, len(ep.Addresses))
		copy(addrs, ep.Addresses)
		sort.Strings(addrs)
	}
	n := 4
	for _, a := range addrs {
		n += len(a) + 1
	}
	if ep.Hostname != nil {
		n += len(*ep.Hostname)
	}
	if ref := ep.TargetRef; ref != nil {
		n += len(ref.Kind) + len(ref.Namespace) + len(ref.Name) + 2
	}
	var b strings.Builder
	b.Grow(n)
	for _, a := range addrs {
		b.WriteString(a)
		b.WriteByte(0)
	}
	b.WriteByte(1)
	if ep.Hostname != nil {
		b.WriteString(*ep.Hostname)
	}
	b.WriteByte(1)
	if ref := ep.TargetRef; ref != nil {
		b.WriteString(ref.Kind)
		b.WriteByte(0)
		b.WriteString(ref.Namespace)
		b.WriteByte(0)
		b.WriteString(ref.Name)
	}
	return b.String()
}

// portsKey returns a key that is equal for two port lists exactly when they
// describe the same port set. Unset protocol means TCP and unset name or
// application protocol mean empty, as the API server reads them; otherwise a
// slice read back after defaulting would never match what was asked for.
func portsKey(ports []discovery.EndpointPort) string {
	keys := make([]string, len(ports))
	for i := range ports {
		p := &ports[i]
		proto := string(corev1.ProtocolTCP)
		if p.Protocol != nil {
			proto = string(*p.Protocol)
		}
		num := "*"
		if p.Port != nil {
			num = strconv.Itoa(int(*p.Port))
		}
		keys[i] = deref(p.Name) + "\x00" + proto + "\x00" + num + "\x00" + deref(p.AppProtocol)
	}
	sort.Strings(keys)
	return strings.Join(keys, "\x01")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// endpointEqual reports whether two endpoints carry the same content. Hints
// are sets, so their order is ignored; the target reference's
// resourceVersion is ignored because it changes on every update of the
// target without changing what the endpoint means. TestEndpointFieldsCovered
// fails when discovery.Endpoint grows a field this function does not know.
func endpointEqual(a, b *discovery.Endpoint) bool {
	if len(a.Addresses) != len(b.Addresses) {
		return false
	}
	for i := range a.Addresses {
		if a.Addresses[i] != b.Addresses[i] {
			return false
		}
	}
	return boolPtrEqual(a.Conditions.Ready, b.Conditions.Ready) &&
		boolPtrEqual(a.Conditions.Serving, b.Conditions.Serving) &&
		boolPtrEqual(a.Conditions.Terminating, b.Conditions.Terminating) &&
		stringPtrEqual(a.Hostname, b.Hostname) &&
		stringPtrEqual(a.NodeName, b.NodeName) &&
		stringPtrEqual(a.Zone, b.Zone) &&
		targetRefEqual(a.TargetRef, b.TargetRef) &&
		hintsEqual(a.Hints, b.Hints) &&
		stringMapEqual(a.DeprecatedTopology, b.DeprecatedTopology)
}

func boolPtrEqual(a, b *bool) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func stringPtrEqual(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func targetRefEqual(a, b *corev1.ObjectReference) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.ResourceVersion, y.ResourceVersion = "", ""
	return x == y
}

func hintsEqual(a, b *discovery.EndpointHints) bool {
	var az, bz, an, bn []string
	if a != nil {
		az, an = zoneNames(a.ForZones), nodeNames(a.ForNodes)
	}
	if b != nil {
		bz, bn = zoneNames(b.ForZones), nodeNames(b.ForNodes)
	}
	return sortedEqual(az, bz) && sortedEqual(an, bn)
}

func zoneNames(zs []discovery.ForZone) []string {
	out := make([]string, len(zs))
	for i, z := range zs {
		out[i] = z.Name
	}
	sort.Strings(out)
	return out
}

func nodeNames(ns []discovery.ForNode) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Name
	}
	sort.Strings(out)
	return out
}

func sortedEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func stringMapEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// validateEndpoint checks what would otherwise mix address families in a
// slice or be refused by the API server only after the plan was half
// applied. Addresses must already be canonical: an endpoint is identified by
// the text of its addresses, so "FD00::1" and "fd00::1" would be two.
func validateEndpoint(c *endpointrules.Checker, at discovery.AddressType, ep *discovery.Endpoint) error {
	if len(ep.Addresses) == 0 {
		return ErrNoAddresses
	}
	if err := c.Endpoint(at, ep); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEndpoint, err)
	}
	return nil
}
