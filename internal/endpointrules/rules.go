// Package endpointrules holds the rules the Kubernetes API server applies to
// an EndpointSlice's endpoints and ports, so that Plexus refuses or drops
// what the API server would refuse where the data enters, instead of finding
// out when a write fails half-way through a plan.
//
// The rules follow k8s.io/kubernetes/pkg/apis/discovery/validation (and the
// endpoint address rule of pkg/apis/core/validation) at the Kubernetes
// version the project pins; they are built from the apimachinery validation
// functions the API server itself calls. (Nothing yet checks that the two
// stay in step when the pinned version moves: a differential test against
// k8s.io/kubernetes's validation, in the bench module, would.)
//
// Addresses are also canonicalised: an IPv6 address written in upper case or
// with leading zeros is the same address as its canonical form, and an
// endpoint is identified by its text, so every entry point turns it into the
// canonical form before anything compares it.
package endpointrules

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Limits of one endpoint, as the API server enforces them.
const (
	MaxAddresses = 100
	MaxZoneHints = 8
	MaxNodeHints = 8
	// maxShown bounds the part of a refused value an error repeats.
	maxShown = 64
)

// ErrRefused is wrapped by every error of this package: the value would be
// refused by the API server.
var ErrRefused = errors.New("refused by the Kubernetes API server's EndpointSlice rules")

// Error says which field broke which rule.
type Error struct {
	// Field is the path of the field inside the endpoint or port, for
	// example "addresses[0]" or "hints.forZones".
	Field string
	// Value is the refused value, cut to a short prefix.
	Value string
	// Rule says what is wrong.
	Rule string
}

func (e *Error) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("%s: %s", e.Field, e.Rule)
	}
	return fmt.Sprintf("%s %q: %s", e.Field, e.Value, e.Rule)
}

// Unwrap makes every Error an ErrRefused.
func (e *Error) Unwrap() error { return ErrRefused }

func refuse(field, value, rule string) error {
	if len(value) > maxShown {
		value = value[:maxShown] + "..."
	}
	return &Error{Field: field, Value: value, Rule: rule}
}

// Address checks one address of an IPv4 (v6 false) or IPv6 endpoint and
// returns it in canonical form. Zones, IPv4-mapped IPv6 and IPv4 with
// leading zeros are refused (their meaning is ambiguous or local to one
// host); so are the unspecified, loopback, link-local and link-local
// multicast addresses, which the API server refuses in an endpoint.
func Address(field, s string, v6 bool) (string, error) {
	canon, rule := address(s, v6)
	if rule != "" {
		return "", refuse(field, s, rule)
	}
	return canon, nil
}

// address returns the canonical form of s, or why it is refused.
func address(s string, v6 bool) (string, string) {
	if strings.ContainsRune(s, '%') {
		return "", "must not carry an IPv6 zone"
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return "", "must be an IP address"
	}
	// The canonical text, without allocating when s already is it.
	var buf [64]byte
	canon := ip.AppendTo(buf[:0])
	switch {
	case ip.Is4In6():
		return "", "must not be an IPv4-mapped IPv6 address"
	case ip.Is4() && string(canon) != s:
		return "", "must be written without leading zeros"
	case ip.Is6() != v6:
		if v6 {
			return "", "must be an IPv6 address"
		}
		return "", "must be an IPv4 address"
	case ip.IsUnspecified():
		return "", "may not be unspecified"
	case ip.IsLoopback():
		return "", "may not be in the loopback range (127.0.0.0/8, ::1/128)"
	case ip.IsLinkLocalUnicast():
		return "", "may not be in the link-local range (169.254.0.0/16, fe80::/10)"
	case ip.IsLinkLocalMulticast():
		return "", "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"
	}
	if string(canon) == s {
		return s, ""
	}
	return string(canon), ""
}

func messages(field, value string, msgs []string) error {
	if len(msgs) == 0 {
		return nil
	}
	return refuse(field, value, strings.Join(msgs, "; "))
}

// Hostname checks an endpoint hostname: a DNS label (RFC 1123).
func Hostname(field, s string) error {
	return messages(field, s, validation.IsDNS1123Label(s))
}

// NodeName checks a node name: a DNS subdomain (RFC 1123).
func NodeName(field, s string) error {
	return messages(field, s, validation.IsDNS1123Subdomain(s))
}

// ZoneHints checks the zones of an endpoint's hints: at most MaxZoneHints,
// each a label value, none twice.
func ZoneHints(field string, zones []string) error {
	return hintNames(field, zones, MaxZoneHints, "zones", validation.IsValidLabelValue)
}

// hintNames checks the names of one kind of hint: at most most of them,
// each passing rule, none twice.
func hintNames(field string, names []string, most int, what string, rule func(string) []string) error {
	if len(names) > most {
		return refuse(field, "", fmt.Sprintf("at most %d %s, got %d", most, what, len(names)))
	}
	for i, n := range names {
		if msgs := rule(n); len(msgs) > 0 {
			return messages(fmt.Sprintf("%s[%d]", field, i), n, msgs)
		}
		for _, o := range names[:i] {
			if o == n {
				return refuse(fmt.Sprintf("%s[%d]", field, i), n, "appears twice")
			}
		}
	}
	return nil
}

// PortName checks a port name: empty, or a DNS label (RFC 1123).
func PortName(field, s string) error {
	if s == "" {
		return nil
	}
	return messages(field, s, validation.IsDNS1123Label(s))
}

// AppProtocol checks a port's application protocol: empty, or a qualified
// name (an IANA service name or a domain-prefixed name).
func AppProtocol(field, s string) error {
	if s == "" {
		return nil
	}
	return messages(field, s, validation.IsQualifiedName(s))
}

// Port checks one port of a slice: its name, number (nil: every port, as
// a slice allows) and application protocol.
func Port(field, name string, number *int32, appProtocol string) error {
	if err := PortName(field+".name", name); err != nil {
		return err
	}
	if number != nil {
		if err := messages(field+".port", fmt.Sprint(*number), validation.IsValidPortNum(int(*number))); err != nil {
			return err
		}
	}
	return AppProtocol(field+".appProtocol", appProtocol)
}

// PortNames checks that no two ports of one slice share a name (an unnamed
// port counts as the name "").
func PortNames(field string, names []string) error {
	for i, n := range names {
		for _, o := range names[:i] {
			if o == n {
				return refuse(fmt.Sprintf("%s[%d].name", field, i), n, "two ports have this name")
			}
		}
	}
	return nil
}

// Checker checks endpoints without changing them; it remembers the verdict
// on every node and zone name it checked, since a service's endpoints share
// a few of them and the name rules are regular expressions. A Checker is
// not safe for concurrent use.
type Checker struct {
	names map[nameKey][]string
}

type nameKey struct {
	kind byte // 'n' node name (of the endpoint or a hint), 'z' zone hint
	name string
}

// memo returns the refusals of name under rule, checking it once.
func (c *Checker) memo(kind byte, name string, rule func(string) []string) []string {
	k := nameKey{kind, name}
	if msgs, ok := c.names[k]; ok {
		return msgs
	}
	if c.names == nil {
		c.names = map[nameKey][]string{}
	}
	msgs := rule(name)
	c.names[k] = msgs
	return msgs
}

// Endpoint checks one endpoint of a slice of the given address type, as
// the API server would; an IP address not in canonical form is refused too,
// since an endpoint is identified by the text of its addresses.
func (c *Checker) Endpoint(at discovery.AddressType, ep *discovery.Endpoint) error {
	if n := len(ep.Addresses); n == 0 || n > MaxAddresses {
		return refuse("addresses", "", fmt.Sprintf("between 1 and %d addresses, got %d", MaxAddresses, n))
	}
	for i, a := range ep.Addresses {
		switch at {
		case discovery.AddressTypeIPv4, discovery.AddressTypeIPv6:
			canon, rule := address(a, at == discovery.AddressTypeIPv6)
			if rule == "" && canon != a {
				rule = "must be written in canonical form (" + canon + ")"
			}
			if rule != "" {
				return refuse(fmt.Sprintf("addresses[%d]", i), a, rule)
			}
		case discovery.AddressTypeFQDN:
			if errs := validation.IsFullyQualifiedDomainName(nil, a); len(errs) > 0 {
				return refuse(fmt.Sprintf("addresses[%d]", i), a, errs.ToAggregate().Error())
			}
		default:
			return refuse("addressType", string(at), "must be IPv4, IPv6 or FQDN")
		}
	}
	if ep.Hostname != nil {
		if err := Hostname("hostname", *ep.Hostname); err != nil {
			return err
		}
	}
	if ep.NodeName != nil {
		if err := messages("nodeName", *ep.NodeName, c.memo('n', *ep.NodeName, validation.IsDNS1123Subdomain)); err != nil {
			return err
		}
	}
	if h := ep.Hints; h != nil {
		if err := c.hints(h); err != nil {
			return err
		}
	}
	return nil
}

func (c *Checker) hints(h *discovery.EndpointHints) error {
	zones := make([]string, len(h.ForZones))
	for i, z := range h.ForZones {
		zones[i] = z.Name
	}
	zone := func(n string) []string { return c.memo('z', n, validation.IsValidLabelValue) }
	if err := hintNames("hints.forZones", zones, MaxZoneHints, "zones", zone); err != nil {
		return err
	}
	nodes := make([]string, len(h.ForNodes))
	for i, n := range h.ForNodes {
		nodes[i] = n.Name
	}
	node := func(n string) []string { return c.memo('n', n, validation.IsDNS1123Subdomain) }
	return hintNames("hints.forNodes", nodes, MaxNodeHints, "nodes", node)
}

// Ports checks the ports of one slice: each port, and no name twice.
func Ports(ports []discovery.EndpointPort) error {
	names := make([]string, len(ports))
	for i, p := range ports {
		name, app := deref(p.Name), deref(p.AppProtocol)
		if err := Port(fmt.Sprintf("ports[%d]", i), name, p.Port, app); err != nil {
			return err
		}
		names[i] = name
	}
	return PortNames("ports", names)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Canonical returns the canonical text of an IP address of an IPv4 (v6
// false) or IPv6 endpoint, or s unchanged when it is not one (Endpoint then
// says why). Entry points call it so that "FD00::1" and "fd00::1" are one
// endpoint.
func Canonical(s string, v6 bool) string {
	if c, rule := address(s, v6); rule == "" {
		return c
	}
	return s
}
