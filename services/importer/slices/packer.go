package slices

import (
	"errors"
	"fmt"
	"sort"

	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexusnet/plexus/internal/endpointrules"
)

// ManagedBy is the endpointslice.kubernetes.io/managed-by value of every
// slice the importer writes.
const ManagedBy = "importer.plexus.dev"

// DefaultMaxEndpointsPerSlice is the slice capacity when no option sets one;
// it is the Kubernetes EndpointSlice controller's default.
const DefaultMaxEndpointsPerSlice = 100

// maxEndpointsLimit is the API server's validation limit for one slice.
const maxEndpointsLimit = 1000

// Errors returned by New and Plan. Plan wraps them with the offending group
// or endpoint.
var (
	ErrInvalidMaxEndpoints = errors.New("max endpoints per slice must be between 1 and 1000")
	ErrNoGenerateName      = errors.New("template has no generateName")
	ErrInvalidAddressType  = errors.New("address type must be IPv4, IPv6 or FQDN")
	ErrDuplicateGroup      = errors.New("two groups have the same address type and port set")
	ErrInvalidPorts        = errors.New("port set would be refused by the API server")
	ErrNoAddresses         = errors.New("endpoint has no addresses")
	ErrInvalidEndpoint     = errors.New("endpoint would be refused by the API server")
	ErrDuplicateEndpoint   = errors.New("endpoint appears twice in one group")
)

// Group is the desired endpoints of one address type and one port set. All
// groups passed to one Plan call belong to one service and one source
// cluster.
type Group struct {
	// AddressType is IPv4, IPv6 or FQDN; every address must belong to it.
	AddressType discovery.AddressType
	// Ports is the port set every endpoint of the group serves; the order
	// does not matter.
	Ports []discovery.EndpointPort
	// Endpoints are copied into the slices as they are.
	Endpoints []discovery.Endpoint
}

// Template is the metadata stamped on slices the plan creates. Its labels
// are also enforced on existing slices that are written.
type Template struct {
	// Namespace of the service.
	Namespace string
	// GenerateName is the name prefix the API server completes, since
	// stable slice names are not needed.
	GenerateName string
	// Labels identify the service, the source cluster and the manager.
	// Existing slices without the same managed-by value, or with another
	// value for any of these labels, are left alone; missing ones are
	// restored.
	Labels map[string]string
	// OwnerReferences of new slices. An existing slice that lacks one of
	// their uids belongs to an earlier owner and is deleted, never reused.
	OwnerReferences []metav1.OwnerReference
}

// Plan is the set of writes that turns the existing slices into slices
// holding exactly the desired endpoints. Apply creates and updates before
// deletes: a deleted slice's endpoints may have moved into another slice,
// and deleting first would drop them for a moment.
type Plan struct {
	// Create holds new slices, named by the API server from GenerateName.
	Create []*discovery.EndpointSlice
	// Update holds full replacements of existing slices, carrying their
	// name and resourceVersion.
	Update []*discovery.EndpointSlice
	// Delete holds the existing slices (as passed in) to delete.
	Delete []*discovery.EndpointSlice
	// Dropped are the desired endpoints left out of the plan because no
	// slice holding them could be written (the API server would refuse
	// them) or because they repeat another endpoint of their group. The
	// rest of the group is planned as if they had not been asked for.
	Dropped []Dropped
}

// Dropped is one desired endpoint a plan left out.
type Dropped struct {
	// Group and Endpoint are the indexes of the endpoint in the desired
	// groups passed to Plan.
	Group, Endpoint int
	// Addresses are the endpoint's addresses, as passed in.
	Addresses []string
	// Err says why: it wraps ErrNoAddresses, ErrInvalidEndpoint or
	// ErrDuplicateEndpoint.
	Err error
}

// Writes returns the number of API writes the plan needs.
func (p Plan) Writes() int { return len(p.Create) + len(p.Update) + len(p.Delete) }

// Empty reports whether the existing slices already hold the desired state.
func (p Plan) Empty() bool { return p.Writes() == 0 }

// Option configures a Packer.
type Option func(*Packer)

// WithMaxEndpointsPerSlice sets the slice capacity (1..1000).
func WithMaxEndpointsPerSlice(n int) Option {
	return func(p *Packer) { p.max = n }
}

// Packer computes plans. It holds configuration only, so one Packer may be
// used from any number of goroutines.
type Packer struct {
	max int
}

// New returns a Packer configured by opts.
func New(opts ...Option) (*Packer, error) {
	p := &Packer{max: DefaultMaxEndpointsPerSlice}
	for _, o := range opts {
		o(p)
	}
	if p.max < 1 || p.max > maxEndpointsLimit {
		return nil, fmt.Errorf("max endpoints per slice %d: %w", p.max, ErrInvalidMaxEndpoints)
	}
	return p, nil
}

// MaxEndpointsPerSlice returns the configured slice capacity.
func (p *Packer) MaxEndpointsPerSlice() int { return p.max }

type groupKey struct {
	addressType discovery.AddressType
	ports       string
}

func (k groupKey) less(o groupKey) bool {
	if k.addressType != o.addressType {
		return k.addressType < o.addressType
	}
	return k.ports < o.ports
}

// group is one desired Group, indexed by endpoint identity.
type group struct {
	key    groupKey
	ports  []discovery.EndpointPort
	want   map[string]*discovery.Endpoint
	placed map[string]bool
}

// slot is the working state of one existing or new slice.
type slot struct {
	orig      *discovery.EndpointSlice // nil for a slice to create
	key       groupKey
	ports     []discovery.EndpointPort // the port set to write, when newPorts
	newPorts  bool                     // reused for another port set (ports may be nil: no ports)
	endpoints []discovery.Endpoint
	changed   bool
}

// Plan returns the writes that make existing hold exactly the desired
// endpoints. existing are the slices of the same service and source cluster;
// they are not modified. The result is deterministic for a given input.
func (p *Packer) Plan(tmpl Template, desired []Group, existing []*discovery.EndpointSlice) (Plan, error) {
	if tmpl.GenerateName == "" {
		return Plan{}, ErrNoGenerateName
	}
	groups, order, dropped, err := indexGroups(desired)
	if err != nil {
		return Plan{}, err
	}

	sorted := make([]*discovery.EndpointSlice, 0, len(existing))
	for _, s := range existing {
		if s != nil {
			sorted = append(sorted, s)
		}
	}
	// Sorting by name makes the choice of which copy of a duplicated
	// endpoint to keep, and every tie below, independent of list order.
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })

	plan := Plan{Dropped: dropped}
	slots := make([]*slot, 0, len(sorted))
	for _, s := range sorted {
		if !ours(s.Labels, tmpl.Labels) {
			continue
		}
		if !ownedBy(s, tmpl.OwnerReferences) {
			plan.Delete = append(plan.Delete, s)
			continue
		}
		slots = append(slots, p.keep(s, groups, tmpl.Labels))
	}

	for _, g := range order {
		pending := g.pending()
		pending = p.fillChanged(g, slots, pending)
		pending = p.fillEmptied(g, slots, pending)
		for len(pending) > 0 {
			if sl := p.bestUnchanged(g, slots, len(pending)); sl != nil {
				pending = p.fill(g, sl, pending)
				continue
			}
			sl := &slot{key: g.key, ports: g.ports, newPorts: true, changed: true}
			slots = append(slots, sl)
			pending = p.fill(g, sl, pending)
		}
	}
	// Compaction deletes slices; next to a create of the same address type
	// that delete should have been an update, so it waits for a plan
	// without creates.
	creating := map[discovery.AddressType]bool{}
	for _, sl := range slots {
		if sl.orig == nil {
			creating[sl.key.addressType] = true
		}
	}
	for _, g := range order {
		if !creating[g.key.addressType] {
			p.compact(g, slots)
		}
	}

	for _, sl := range slots {
		switch {
		case sl.orig == nil:
			if len(sl.endpoints) > 0 {
				plan.Create = append(plan.Create, newSlice(tmpl, sl))
			}
		case len(sl.endpoints) == 0:
			plan.Delete = append(plan.Delete, sl.orig)
		case sl.changed:
			plan.Update = append(plan.Update, sl.build(tmpl.Labels))
		}
	}
	sort.Slice(plan.Delete, func(i, j int) bool { return plan.Delete[i].Name < plan.Delete[j].Name })
	return plan, nil
}

// keep keeps the endpoints of s that are still desired, in their order, and
// marks the slot changed when anything must be rewritten.
func (p *Packer) keep(s *discovery.EndpointSlice, groups map[groupKey]*group, labels map[string]string) *slot {
	sl := &slot{
		orig:      s,
		key:       groupKey{addressType: s.AddressType, ports: portsKey(s.Ports)},
		endpoints: make([]discovery.Endpoint, 0, len(s.Endpoints)),
		changed:   !labelsCover(s.Labels, labels),
	}
	g := groups[sl.key]
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		if g == nil {
			sl.changed = true
			continue
		}
		id := identity(ep)
		want := g.want[id]
		// A copy already kept elsewhere, or anything beyond the capacity
		// (left by a larger earlier setting), is dropped here and placed
		// again like a new endpoint.
		if want == nil || g.placed[id] || len(sl.endpoints) >= p.max {
			sl.changed = true
			continue
		}
		g.placed[id] = true
		if endpointEqual(ep, want) {
			sl.endpoints = append(sl.endpoints, *ep)
			continue
		}
		sl.endpoints = append(sl.endpoints, *want)
		sl.changed = true
	}
	return sl
}

// fillChanged puts pending endpoints into non-empty slots of g that are
// written anyway, the one with the most room first. Which of them takes the
// endpoints costs nothing now; spreading the room keeps some in whichever
// slice the next change touches, so the next additions are free as well
// (measured in bench/slices: fullest-first here costs up to 3 % more writes
// under mixed churn).
func (p *Packer) fillChanged(g *group, slots []*slot, pending []string) []string {
	if len(pending) == 0 {
		return pending
	}
	var cands []*slot
	for _, sl := range slots {
		if sl.key == g.key && sl.changed && len(sl.endpoints) > 0 && len(sl.endpoints) < p.max {
			cands = append(cands, sl)
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return len(cands[i].endpoints) < len(cands[j].endpoints) })
	for _, sl := range cands {
		if len(pending) == 0 {
			break
		}
		pending = p.fill(g, sl, pending)
	}
	return pending
}

// fillEmptied reuses slots of g's address type that would otherwise be
// deleted; the address type cannot change on update, the port set can.
// Slots of g's own port set go first so the fewest port lists change.
func (p *Packer) fillEmptied(g *group, slots []*slot, pending []string) []string {
	if len(pending) == 0 {
		return pending
	}
	var cands []*slot
	for _, sl := range slots {
		if len(sl.endpoints) == 0 && sl.key.addressType == g.key.addressType {
			cands = append(cands, sl)
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		return cands[i].key == g.key && cands[j].key != g.key
	})
	for _, sl := range cands {
		if len(pending) == 0 {
			break
		}
		if sl.key != g.key {
			sl.key, sl.ports, sl.newPorts = g.key, g.ports, true
		}
		pending = p.fill(g, sl, pending)
	}
	return pending
}

// bestUnchanged returns the fullest unchanged slot of g that can take n more
// endpoints, or nil.
func (p *Packer) bestUnchanged(g *group, slots []*slot, n int) *slot {
	var best *slot
	for _, sl := range slots {
		if sl.key != g.key || sl.changed || len(sl.endpoints) == 0 || len(sl.endpoints)+n > p.max {
			continue
		}
		if best == nil || len(sl.endpoints) > len(best.endpoints) {
			best = sl
		}
	}
	return best
}

// compact empties the smallest slices of g that are being written into the
// room left in the other slices of g being written, as long as one fits
// whole. Both were to be written anyway, so the update of the emptied slice
// becomes its delete at no cost, and the service keeps fewer, fuller slices,
// which later random changes touch fewer of. Only whole slices move, and
// deletes are applied last, so no endpoint is ever missing in between.
func (p *Packer) compact(g *group, slots []*slot) {
	for {
		var written []*slot
		for _, sl := range slots {
			if sl.key == g.key && sl.changed && len(sl.endpoints) > 0 {
				written = append(written, sl)
			}
		}
		if len(written) < 2 {
			return
		}
		sort.SliceStable(written, func(i, j int) bool { return len(written[i].endpoints) < len(written[j].endpoints) })
		from, into := written[0], written[1:]
		room := 0
		for _, sl := range into {
			room += p.max - len(sl.endpoints)
		}
		if room < len(from.endpoints) {
			return
		}
		sort.SliceStable(into, func(i, j int) bool { return len(into[i].endpoints) > len(into[j].endpoints) })
		rest := from.endpoints
		for _, sl := range into {
			n := min(len(rest), p.max-len(sl.endpoints))
			sl.endpoints = append(sl.endpoints, rest[:n]...)
			rest = rest[n:]
		}
		from.endpoints = nil
	}
}

// fill moves pending endpoints into sl up to the capacity and returns the
// rest.
func (p *Packer) fill(g *group, sl *slot, pending []string) []string {
	n := min(len(pending), p.max-len(sl.endpoints))
	if n <= 0 {
		return pending
	}
	for _, id := range pending[:n] {
		sl.endpoints = append(sl.endpoints, *g.want[id])
		g.placed[id] = true
	}
	sl.changed = true
	return pending[n:]
}

// build returns the replacement object for a changed slot.
func (sl *slot) build(labels map[string]string) *discovery.EndpointSlice {
	out := &discovery.EndpointSlice{
		TypeMeta:    sl.orig.TypeMeta,
		ObjectMeta:  *sl.orig.ObjectMeta.DeepCopy(),
		AddressType: sl.orig.AddressType,
		Ports:       copyPorts(sl.orig.Ports),
		Endpoints:   copyEndpoints(sl.endpoints),
	}
	if sl.newPorts {
		out.Ports = copyPorts(sl.ports)
	}
	if len(labels) > 0 && out.Labels == nil {
		out.Labels = make(map[string]string, len(labels))
	}
	for k, v := range labels {
		out.Labels[k] = v
	}
	return out
}

func newSlice(tmpl Template, sl *slot) *discovery.EndpointSlice {
	var labels map[string]string
	if tmpl.Labels != nil {
		labels = make(map[string]string, len(tmpl.Labels))
		for k, v := range tmpl.Labels {
			labels[k] = v
		}
	}
	var owners []metav1.OwnerReference
	for i := range tmpl.OwnerReferences {
		owners = append(owners, *tmpl.OwnerReferences[i].DeepCopy())
	}
	return &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    tmpl.GenerateName,
			Namespace:       tmpl.Namespace,
			Labels:          labels,
			OwnerReferences: owners,
		},
		AddressType: sl.key.addressType,
		Ports:       copyPorts(sl.ports),
		Endpoints:   copyEndpoints(sl.endpoints),
	}
}

func (g *group) pending() []string {
	var out []string
	for id := range g.want {
		if !g.placed[id] {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func indexGroups(desired []Group) (map[groupKey]*group, []*group, []Dropped, error) {
	groups := make(map[groupKey]*group, len(desired))
	order := make([]*group, 0, len(desired))
	var dropped []Dropped
	var checker endpointrules.Checker
	for i := range desired {
		d := &desired[i]
		switch d.AddressType {
		case discovery.AddressTypeIPv4, discovery.AddressTypeIPv6, discovery.AddressTypeFQDN:
		default:
			return nil, nil, nil, fmt.Errorf("group %d: address type %q: %w", i, d.AddressType, ErrInvalidAddressType)
		}
		if err := endpointrules.Ports(d.Ports); err != nil {
			return nil, nil, nil, fmt.Errorf("group %d (%s): %w: %w", i, d.AddressType, ErrInvalidPorts, err)
		}
		key := groupKey{addressType: d.AddressType, ports: portsKey(d.Ports)}
		if _, dup := groups[key]; dup {
			return nil, nil, nil, fmt.Errorf("group %d (%s): %w", i, d.AddressType, ErrDuplicateGroup)
		}
		g := &group{
			key:    key,
			ports:  d.Ports,
			want:   make(map[string]*discovery.Endpoint, len(d.Endpoints)),
			placed: make(map[string]bool, len(d.Endpoints)),
		}
		for j := range d.Endpoints {
			ep := &d.Endpoints[j]
			err := validateEndpoint(&checker, d.AddressType, ep)
			if err == nil {
				if _, dup := g.want[identity(ep)]; dup {
					err = ErrDuplicateEndpoint
				}
			}
			if err != nil {
				dropped = append(dropped, Dropped{Group: i, Endpoint: j, Addresses: ep.Addresses, Err: err})
				continue
			}
			g.want[identity(ep)] = ep
		}
		groups[key] = g
		order = append(order, g)
	}
	sort.Slice(order, func(i, j int) bool { return order[i].key.less(order[j].key) })
	return groups, order, dropped, nil
}

// ownedBy reports whether s carries every owner uid of the template.
func ownedBy(s *discovery.EndpointSlice, owners []metav1.OwnerReference) bool {
	for _, want := range owners {
		if want.UID == "" {
			continue
		}
		found := false
		for _, have := range s.OwnerReferences {
			if have.UID == want.UID {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// ours reports whether a slice with labels have may be written under the
// template labels want: it must carry the same manager, and no label of the
// template with another value (another service or source cluster). A
// missing template label is restored on write instead.
func ours(have, want map[string]string) bool {
	if m, ok := want[discovery.LabelManagedBy]; ok {
		if got, ok := have[discovery.LabelManagedBy]; !ok || got != m {
			return false
		}
	}
	for k, v := range want {
		if got, ok := have[k]; ok && got != v {
			return false
		}
	}
	return true
}

func labelsCover(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func copyPorts(ports []discovery.EndpointPort) []discovery.EndpointPort {
	if ports == nil {
		return nil
	}
	out := make([]discovery.EndpointPort, len(ports))
	for i := range ports {
		ports[i].DeepCopyInto(&out[i])
	}
	return out
}

func copyEndpoints(eps []discovery.Endpoint) []discovery.Endpoint {
	out := make([]discovery.Endpoint, len(eps))
	for i := range eps {
		eps[i].DeepCopyInto(&out[i])
	}
	return out
}
