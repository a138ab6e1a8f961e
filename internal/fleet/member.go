package fleet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxMembers bounds the members one inventory may name: each is a stream
// and a connection held open.
const MaxMembers = 10000

// maxAddr bounds a member's address (a list of replicas at most).
const maxAddr = 1024

// MaxRanges bounds the address ranges one member declares.
const MaxRanges = 64

// Member is one member cluster: its id and where its membership serves.
type Member struct {
	// Name is the cluster's id in the clusterset.
	Name string `json:"name"`
	// Addr is the gRPC target of its membership service: host:port, a
	// comma-separated list of replicas, or a target with a scheme
	// (dns:///name:port).
	Addr string `json:"address"`
	// ServerName is the TLS server name the membership's certificate is
	// verified against; the address's host when empty.
	ServerName string `json:"tlsServerName,omitempty"`
	// Ranges are the CIDRs the cluster's endpoint addresses lie in (its
	// Pod CIDRs, the addresses of its external workloads): an importer
	// drops an endpoint of the cluster with an address outside them.
	// None: any address.
	Ranges []string `json:"ranges,omitempty"`
	// ClusterSet is the clusterset the member belongs to, when its entry
	// says (a sources file's clusterset, a ClusterProfile's
	// clusterset.k8s.io property): followers of another clusterset skip
	// it. Empty: any.
	ClusterSet string `json:"clusterset,omitempty"`
}

// Prefixes returns the member's ranges, parsed; those that do not parse
// (Validate refuses them) are left out.
func (m Member) Prefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, r := range m.Ranges {
		if p, err := netip.ParsePrefix(r); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// Equal reports whether m and o are the same member, address, TLS
// identity and ranges included.
func (m Member) Equal(o Member) bool {
	return m.Name == o.Name && m.Addr == o.Addr && m.ServerName == o.ServerName && slices.Equal(m.Ranges, o.Ranges) && m.ClusterSet == o.ClusterSet
}

// validateRanges checks a member's ranges: CIDRs, at most MaxRanges.
func validateRanges(ranges []string) error {
	if len(ranges) > MaxRanges {
		return fmt.Errorf("ranges: %d, at most %d", len(ranges), MaxRanges)
	}
	var errs []error
	for i, r := range ranges {
		p, err := netip.ParsePrefix(r)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("ranges[%d] %q: not a CIDR", i, clip(r)))
		case p.Masked() != p:
			errs = append(errs, fmt.Errorf("ranges[%d] %q: host bits set; did you mean %s?", i, clip(r), p.Masked()))
		}
	}
	return errors.Join(errs...)
}

// Validate reports what is wrong with m.
func (m Member) Validate() error {
	var errs []error
	if msgs := validation.IsDNS1123Label(m.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("name %q: %s", clip(m.Name), strings.Join(msgs, "; ")))
	}
	if err := ValidateAddr(m.Addr); err != nil {
		errs = append(errs, err)
	}
	if err := validateRanges(m.Ranges); err != nil {
		errs = append(errs, err)
	}
	if m.ServerName != "" {
		if msgs := validation.IsDNS1123Subdomain(m.ServerName); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("tlsServerName %q: %s", clip(m.ServerName), strings.Join(msgs, "; ")))
		}
	}
	if m.ClusterSet != "" {
		if msgs := validation.IsDNS1123Label(m.ClusterSet); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("clusterset %q: %s", clip(m.ClusterSet), strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}

// ValidateAddr checks a membership address: host:port, a comma-separated
// list of host:port, or a gRPC target with a scheme (dns:///host:port,
// unix:///path, passthrough:///host:port). A port is a number from 1 to
// 65535, and a URL of another protocol (http://host:port) is refused: the
// follower would dial it for ever.
func ValidateAddr(addr string) error {
	switch {
	case addr == "":
		return errors.New("address: empty")
	case len(addr) > maxAddr:
		return fmt.Errorf("address: %d bytes, at most %d", len(addr), maxAddr)
	case strings.ContainsFunc(addr, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Errorf("address %q: contains spaces or control characters", clip(addr))
	}
	if scheme, rest, ok := strings.Cut(addr, "://"); ok {
		switch scheme {
		case "unix", "unix-abstract":
			return nil
		case "dns", "passthrough":
			// dns://[authority]/host:port
			_, hostport, _ := strings.Cut(rest, "/")
			if err := checkHostPort(hostport); err != nil {
				return fmt.Errorf("address %q: %w", clip(addr), err)
			}
			return nil
		}
		return fmt.Errorf("address %q: %q is not a gRPC target scheme; give host:port, or dns:///host:port", clip(addr), clip(scheme))
	}
	for _, a := range strings.Split(addr, ",") {
		if err := checkHostPort(a); err != nil {
			return fmt.Errorf("address %q: %w", clip(addr), err)
		}
	}
	return nil
}

// checkHostPort checks one host:port.
func checkHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("%q: no host", clip(a))
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port must be a number from 1 to 65535", clip(a))
	}
	return nil
}

// clip cuts a value for a message.
func clip(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:most], len(s))
}

// check validates a whole set: every member valid, names unique, at most
// MaxMembers. The set comes back sorted by name.
func check(members []Member) ([]Member, error) {
	if len(members) > MaxMembers {
		return nil, fmt.Errorf("%d members, at most %d", len(members), MaxMembers)
	}
	var errs []error
	// Named as the set lists them, before sorting.
	for i, m := range members {
		if err := m.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("member %d (%q): %w", i, clip(m.Name), err))
		}
	}
	out := slices.Clone(members)
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	for i, m := range out {
		if i > 0 && out[i-1].Name == m.Name {
			errs = append(errs, fmt.Errorf("member %q named twice", clip(m.Name)))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// Diff is what changed between two sets.
type Diff struct {
	// Joined are the members new in the set.
	Joined []Member
	// Moved are the members whose address, TLS identity or ranges
	// changed: the new value, with the old one in the same position of Was.
	Moved, Was []Member
	// Left are the members no longer in the set.
	Left []Member
}

// Empty reports whether nothing changed.
func (d Diff) Empty() bool { return len(d.Joined)+len(d.Moved)+len(d.Left) == 0 }

// Compare returns what changed from old to next. Both are keyed by name.
func Compare(old map[string]Member, next []Member) Diff {
	var d Diff
	seen := make(map[string]bool, len(next))
	for _, m := range next {
		seen[m.Name] = true
		was, ok := old[m.Name]
		switch {
		case !ok:
			d.Joined = append(d.Joined, m)
		case !was.Equal(m):
			d.Moved, d.Was = append(d.Moved, m), append(d.Was, was)
		}
	}
	for name, m := range old {
		if !seen[name] {
			d.Left = append(d.Left, m)
		}
	}
	slices.SortFunc(d.Left, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return d
}
