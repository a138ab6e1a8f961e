package slices

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestPlanRules(t *testing.T) {
	t.Parallel()
	s := func(name string, e []discovery.Endpoint) *discovery.EndpointSlice {
		return existingSlice(name, discovery.AddressTypeIPv4, httpPorts, e)
	}
	flipped := func(e []discovery.Endpoint, i int) []discovery.Endpoint {
		out := copyEndpoints(e)
		out[i] = withReady(out[i], false)
		return out
	}
	port8080 := []discovery.EndpointPort{port("http", 8080)}
	v6eps := []discovery.Endpoint{ep(0, ipv6(0)), ep(1, ipv6(1)), ep(2, ipv6(2))}

	tests := []struct {
		name     string
		max      int
		existing []*discovery.EndpointSlice
		desired  []Group
		creates  []int    // endpoints per created slice
		updates  []string // updated slice names
		deletes  []string // deleted slice names
		check    func(t *testing.T, p Plan)
	}{
		{
			name:    "nothing exists: full slices are created",
			desired: []Group{v4(eps(0, 250))},
			creates: []int{100, 100, 50},
		},
		{
			name:    "capacity is an option",
			max:     10,
			desired: []Group{v4(eps(0, 25))},
			creates: []int{10, 10, 5},
		},
		{
			name: "address families never share a slice",
			desired: []Group{v4(eps(0, 3)),
				{AddressType: discovery.AddressTypeIPv6, Ports: httpPorts, Endpoints: v6eps}},
			creates: []int{3, 3},
			check: func(t *testing.T, p Plan) {
				require.Equal(t, discovery.AddressTypeIPv4, p.Create[0].AddressType)
				require.Equal(t, discovery.AddressTypeIPv6, p.Create[1].AddressType)
			},
		},
		{
			name: "port sets never share a slice",
			desired: []Group{v4(eps(0, 3)),
				{AddressType: discovery.AddressTypeIPv4, Ports: port8080, Endpoints: eps(3, 5)}},
			creates: []int{3, 2},
		},
		{
			name: "unchanged content is not rewritten whatever its order",
			existing: []*discovery.EndpointSlice{
				existingSlice("a", discovery.AddressTypeIPv4,
					[]discovery.EndpointPort{port("metrics", 9090), port("http", 80)}, reversed(eps(0, 100))),
				existingSlice("b", discovery.AddressTypeIPv4,
					[]discovery.EndpointPort{port("http", 80), port("metrics", 9090)}, eps(100, 150)),
			},
			desired: []Group{{AddressType: discovery.AddressTypeIPv4,
				Ports: []discovery.EndpointPort{port("http", 80), port("metrics", 9090)}, Endpoints: eps(0, 150)}},
		},
		{
			name: "defaults and volatile fields do not count as changes",
			existing: []*discovery.EndpointSlice{existingSlice("a", discovery.AddressTypeIPv4,
				httpPorts, []discovery.Endpoint{hinted(ep(0, ipv4(0)), "7", "z1", "z2")})},
			desired: []Group{{AddressType: discovery.AddressTypeIPv4,
				Ports:     []discovery.EndpointPort{{Name: ptr("http"), Port: ptr(int32(80))}},
				Endpoints: []discovery.Endpoint{hinted(ep(0, ipv4(0)), "9", "z2", "z1")}}},
		},
		{
			name:     "a condition change rewrites only the slice holding it",
			existing: []*discovery.EndpointSlice{s("a", eps(0, 100)), s("b", eps(100, 150))},
			desired:  []Group{v4(flipped(eps(0, 150), 120))},
			updates:  []string{"b"},
		},
		{
			name:     "a removal rewrites only the slice holding it",
			existing: []*discovery.EndpointSlice{s("a", eps(0, 100)), s("b", eps(100, 150))},
			desired:  []Group{v4(eps(0, 10), eps(11, 150))},
			updates:  []string{"a"},
		},
		{
			name:     "a slice left empty is deleted",
			existing: []*discovery.EndpointSlice{s("a", eps(0, 100)), s("b", eps(100, 110))},
			desired:  []Group{v4(eps(0, 100))},
			deletes:  []string{"b"},
		},
		{
			name:     "everything withdrawn: every slice is deleted",
			existing: []*discovery.EndpointSlice{s("a", eps(0, 100)), s("b", eps(100, 110))},
			deletes:  []string{"a", "b"},
		},
		{
			name:     "a create plus a delete becomes an update",
			existing: []*discovery.EndpointSlice{s("a", eps(0, 100)), s("b", eps(100, 110))},
			desired:  []Group{v4(eps(0, 100), eps(200, 250))},
			updates:  []string{"b"},
			check: func(t *testing.T, p Plan) {
				require.Len(t, p.Update[0].Endpoints, 50)
			},
		},
		{
			name:     "an identity change lands in the slice it leaves",
			existing: []*discovery.EndpointSlice{s("a", eps(0, 100)), s("b", eps(100, 150))},
			desired:  []Group{v4(eps(0, 120), []discovery.Endpoint{ep(120, ipv4(5000))}, eps(121, 150))},
			updates:  []string{"b"},
		},
		{
			name:     "new endpoints go to the fullest slice with room",
			existing: []*discovery.EndpointSlice{s("a", eps(0, 50)), s("b", eps(50, 140)), s("c", eps(140, 210))},
			desired:  []Group{v4(eps(0, 215))},
			updates:  []string{"b"},
			check: func(t *testing.T, p Plan) {
				require.Len(t, p.Update[0].Endpoints, 95)
			},
		},
		{
			name:     "new endpoints go to the fullest slice that takes them all",
			existing: []*discovery.EndpointSlice{s("a", eps(0, 50)), s("b", eps(50, 140)), s("c", eps(140, 210))},
			desired:  []Group{v4(eps(0, 235))},
			updates:  []string{"c"},
		},
		{
			name:     "slices written anyway take new endpoints first",
			existing: []*discovery.EndpointSlice{s("a", eps(0, 50)), s("b", eps(50, 140))},
			desired:  []Group{v4(flipped(eps(0, 140), 3), eps(500, 505))},
			updates:  []string{"a"},
			check: func(t *testing.T, p Plan) {
				require.Len(t, p.Update[0].Endpoints, 55)
			},
		},
		{
			name:     "of the slices written anyway, the one with most room takes new endpoints",
			existing: []*discovery.EndpointSlice{s("a", eps(0, 50)), s("b", eps(50, 130))},
			desired:  []Group{v4(flipped(flipped(eps(0, 130), 3), 60), eps(500, 505))},
			updates:  []string{"a", "b"},
			check: func(t *testing.T, p Plan) {
				require.Equal(t, []int{55, 80}, sizes(p.Update))
			},
		},
		{
			name:     "a slice written anyway is emptied into the room of the others",
			existing: []*discovery.EndpointSlice{s("a", eps(0, 60)), s("b", eps(60, 90)), s("c", eps(90, 190))},
			desired:  []Group{v4(flipped(flipped(eps(0, 190), 3), 70))},
			updates:  []string{"a"},
			deletes:  []string{"b"},
			check: func(t *testing.T, p Plan) {
				require.Len(t, p.Update[0].Endpoints, 90)
			},
		},
		{
			name: "no slice is emptied when the plan creates one of its address type",
			existing: []*discovery.EndpointSlice{s("a", eps(0, 60)), s("b", eps(60, 90)),
				existingSlice("c", discovery.AddressTypeIPv4, port8080, eps(90, 190))},
			desired: []Group{v4(flipped(flipped(eps(0, 90), 3), 70)),
				{AddressType: discovery.AddressTypeIPv4, Ports: port8080, Endpoints: eps(90, 191)}},
			updates: []string{"a", "b"},
			creates: []int{1},
		},
		{
			name:     "more than any slice takes: full new slices",
			existing: []*discovery.EndpointSlice{s("a", eps(0, 90))},
			desired:  []Group{v4(eps(0, 90), eps(500, 650))},
			creates:  []int{100, 50},
		},
		{
			name:     "a port change rewrites slices in place",
			existing: []*discovery.EndpointSlice{s("a", eps(0, 100)), s("b", eps(100, 150))},
			desired:  []Group{{AddressType: discovery.AddressTypeIPv4, Ports: port8080, Endpoints: eps(0, 150)}},
			updates:  []string{"a", "b"},
			check: func(t *testing.T, p Plan) {
				for _, u := range p.Update {
					require.Equal(t, portsKey(port8080), portsKey(u.Ports))
				}
			},
		},
		{
			name: "an address type change cannot reuse a slice",
			existing: []*discovery.EndpointSlice{existingSlice("a", discovery.AddressTypeIPv4, httpPorts,
				eps(0, 3))},
			desired: []Group{{AddressType: discovery.AddressTypeIPv6, Ports: httpPorts, Endpoints: v6eps}},
			creates: []int{3},
			deletes: []string{"a"},
		},
		{
			name:     "a slice of another manager is never touched",
			existing: []*discovery.EndpointSlice{managedBy(s("theirs", eps(0, 3)), "endpointslice-controller.k8s.io")},
			desired:  []Group{v4(eps(0, 3))},
			creates:  []int{3},
		},
		{
			name:     "a slice without a manager is never touched",
			existing: []*discovery.EndpointSlice{withoutLabel(s("unmanaged", eps(0, 3)), discovery.LabelManagedBy)},
			desired:  []Group{v4(eps(0, 3))},
			creates:  []int{3},
		},
		{
			name:     "a slice of another source cluster is never touched",
			existing: []*discovery.EndpointSlice{withLabel(s("other-cluster", eps(0, 3)), "multicluster.kubernetes.io/source-cluster", "b")},
			desired:  []Group{v4(eps(0, 3))},
			creates:  []int{3},
		},
		{
			name:     "a slice of an earlier owner is deleted, not reused",
			existing: []*discovery.EndpointSlice{ownedByUID(s("old", eps(0, 3)), "previous-uid")},
			desired:  []Group{v4(eps(0, 3))},
			creates:  []int{3},
			deletes:  []string{"old"},
		},
		{
			name:     "an endpoint held twice stays in one slice",
			existing: []*discovery.EndpointSlice{s("a", eps(0, 10)), s("b", eps(5, 15))},
			desired:  []Group{v4(eps(0, 15))},
			updates:  []string{"b"},
			check: func(t *testing.T, p Plan) {
				require.Len(t, p.Update[0].Endpoints, 5)
			},
		},
		{
			name:     "a slice over a lowered capacity is split",
			max:      10,
			existing: []*discovery.EndpointSlice{s("a", eps(0, 25))},
			desired:  []Group{v4(eps(0, 25))},
			updates:  []string{"a"},
			creates:  []int{10, 5},
		},
		{
			name:     "missing labels are restored",
			existing: []*discovery.EndpointSlice{withoutLabel(s("a", eps(0, 3)), "multicluster.kubernetes.io/source-cluster")},
			desired:  []Group{v4(eps(0, 3))},
			updates:  []string{"a"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var opts []Option
			if tc.max != 0 {
				opts = append(opts, WithMaxEndpointsPerSlice(tc.max))
			}
			p, err := New(opts...)
			require.NoError(t, err)
			before := deepCopyAll(tc.existing)
			plan, err := p.Plan(testTemplate(), tc.desired, tc.existing)
			require.NoError(t, err)
			require.Equal(t, before, tc.existing, "Plan must not modify its input")

			require.Equal(t, tc.creates, nilIfEmpty(sizes(plan.Create)), "creates")
			require.Equal(t, tc.updates, nilIfEmptyS(names(plan.Update)), "updates")
			require.Equal(t, tc.deletes, nilIfEmptyS(names(plan.Delete)), "deletes")
			if tc.check != nil {
				tc.check(t, plan)
			}

			// Whatever the case, the plan must reach the desired state, and
			// that state must be a fixed point.
			c := newCluster(tc.existing...)
			c.apply(t, plan)
			var mine []*discovery.EndpointSlice
			for _, sl := range c.list() {
				if ours(sl.Labels, testTemplate().Labels) {
					mine = append(mine, sl)
				}
			}
			requireHolds(t, p.MaxEndpointsPerSlice(), tc.desired, mine)
			again, err := p.Plan(testTemplate(), tc.desired, c.list())
			require.NoError(t, err)
			require.True(t, again.Empty(), "second plan: %+v", again)
		})
	}
}

func TestPlanStampsTemplateAndPassesEndpointsThrough(t *testing.T) {
	t.Parallel()
	p, err := New()
	require.NoError(t, err)
	full := fullEndpoint()
	tmpl := testTemplate()
	plan, err := p.Plan(tmpl, []Group{v4([]discovery.Endpoint{full})}, nil)
	require.NoError(t, err)
	require.Len(t, plan.Create, 1)
	got := plan.Create[0]
	require.Equal(t, tmpl.GenerateName, got.GenerateName)
	require.Empty(t, got.Name)
	require.Equal(t, tmpl.Namespace, got.Namespace)
	require.Equal(t, tmpl.Labels, got.Labels)
	require.Equal(t, tmpl.OwnerReferences, got.OwnerReferences)
	require.Equal(t, httpPorts, got.Ports)
	require.Equal(t, []discovery.Endpoint{full}, got.Endpoints)

	// The output must not alias the input: the adapter may mutate it.
	*got.Endpoints[0].Zone = "elsewhere"
	require.Equal(t, "zone-a", *full.Zone)

	// An update carries the identity and resourceVersion of what it read,
	// and the changed endpoint as it was given.
	existing := existingSlice("web-abc", discovery.AddressTypeIPv4, httpPorts, []discovery.Endpoint{full})
	existing.ResourceVersion = "42"
	existing.UID = "slice-uid"
	changed := *full.DeepCopy()
	changed.Conditions.Serving = ptr(false)
	changed.Hints.ForNodes = append(changed.Hints.ForNodes, discovery.ForNode{Name: "node-9"})
	plan, err = p.Plan(tmpl, []Group{v4([]discovery.Endpoint{changed})}, []*discovery.EndpointSlice{existing})
	require.NoError(t, err)
	require.Len(t, plan.Update, 1)
	require.Equal(t, "web-abc", plan.Update[0].Name)
	require.Equal(t, "42", plan.Update[0].ResourceVersion)
	require.Equal(t, types.UID("slice-uid"), plan.Update[0].UID)
	require.Equal(t, []discovery.Endpoint{changed}, plan.Update[0].Endpoints)
}

func TestPlanErrors(t *testing.T) {
	t.Parallel()
	_, err := New(WithMaxEndpointsPerSlice(0))
	require.ErrorIs(t, err, ErrInvalidMaxEndpoints)
	_, err = New(WithMaxEndpointsPerSlice(1001))
	require.ErrorIs(t, err, ErrInvalidMaxEndpoints)

	p, err := New()
	require.NoError(t, err)
	noName := testTemplate()
	noName.GenerateName = ""
	_, err = p.Plan(noName, []Group{v4(eps(0, 1))}, nil)
	require.ErrorIs(t, err, ErrNoGenerateName)

	withAddr := func(at discovery.AddressType, addrs ...string) []Group {
		e := ep(0, "")
		e.Addresses = addrs
		return []Group{{AddressType: at, Ports: httpPorts, Endpoints: []discovery.Endpoint{e}}}
	}
	tests := []struct {
		name    string
		desired []Group
		want    error
	}{
		{"deprecated IP address type", withAddr("IP", "10.0.0.1"), ErrInvalidAddressType},
		{"duplicate group", []Group{
			{AddressType: discovery.AddressTypeIPv4, Ports: []discovery.EndpointPort{port("a", 1), port("b", 2)}, Endpoints: eps(0, 1)},
			{AddressType: discovery.AddressTypeIPv4, Ports: []discovery.EndpointPort{port("b", 2), port("a", 1)}, Endpoints: eps(1, 2)},
		}, ErrDuplicateGroup},
		{"duplicate port name", []Group{{AddressType: discovery.AddressTypeIPv4,
			Ports: []discovery.EndpointPort{port("a", 1), port("a", 2)}, Endpoints: eps(0, 1)}}, ErrInvalidPorts},
		{"port name not a label", []Group{{AddressType: discovery.AddressTypeIPv4,
			Ports: []discovery.EndpointPort{port("Web_1", 1)}, Endpoints: eps(0, 1)}}, ErrInvalidPorts},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Plan(testTemplate(), tc.desired, nil)
			require.ErrorIs(t, err, tc.want)
		})
	}

	// FQDN endpoints are names, not addresses.
	_, err = p.Plan(testTemplate(), withAddr(discovery.AddressTypeFQDN, "web.example"), nil)
	require.NoError(t, err)
}

// TestPlanDropsBadEndpoints: an endpoint the API server would refuse, or a
// second copy of one, is left out with its reason, and the rest of its group
// is planned; before, one such endpoint failed the whole plan, which froze
// every slice of its cluster.
func TestPlanDropsBadEndpoints(t *testing.T) {
	t.Parallel()
	p, err := New()
	require.NoError(t, err)
	bad := func(at discovery.AddressType, edit func(*discovery.Endpoint)) Group {
		e := ep(999, "10.9.9.9")
		if at == discovery.AddressTypeIPv6 {
			e.Addresses = []string{"fd00::999"}
		}
		edit(&e)
		g := Group{AddressType: at, Ports: httpPorts, Endpoints: eps(0, 3)}
		if at == discovery.AddressTypeIPv6 {
			g.Endpoints = []discovery.Endpoint{ep(0, ipv6(0)), ep(1, ipv6(1)), ep(2, ipv6(2))}
		}
		g.Endpoints = append(g.Endpoints[:1], append([]discovery.Endpoint{e}, g.Endpoints[1:]...)...)
		return g
	}
	addr := func(a ...string) func(*discovery.Endpoint) { return func(e *discovery.Endpoint) { e.Addresses = a } }
	host := "Bad_Host"
	node := "Node One"
	tests := []struct {
		name  string
		group Group
		want  error
	}{
		{"no addresses", bad(discovery.AddressTypeIPv4, addr()), ErrNoAddresses},
		{"IPv6 in an IPv4 group", bad(discovery.AddressTypeIPv4, addr("fd00::1")), ErrInvalidEndpoint},
		{"IPv4 in an IPv6 group", bad(discovery.AddressTypeIPv6, addr("10.0.0.1")), ErrInvalidEndpoint},
		{"leading zero", bad(discovery.AddressTypeIPv4, addr("10.0.0.01")), ErrInvalidEndpoint},
		{"zone", bad(discovery.AddressTypeIPv6, addr("fd00::1%eth0")), ErrInvalidEndpoint},
		{"IPv4-mapped IPv6", bad(discovery.AddressTypeIPv6, addr("::ffff:10.0.0.1")), ErrInvalidEndpoint},
		{"upper-case IPv6", bad(discovery.AddressTypeIPv6, addr("FD00::1")), ErrInvalidEndpoint},
		{"not an address", bad(discovery.AddressTypeIPv4, addr("web.example")), ErrInvalidEndpoint},
		{"loopback", bad(discovery.AddressTypeIPv4, addr("127.0.0.1")), ErrInvalidEndpoint},
		{"link-local", bad(discovery.AddressTypeIPv4, addr("169.254.1.1")), ErrInvalidEndpoint},
		{"unspecified", bad(discovery.AddressTypeIPv6, addr("::")), ErrInvalidEndpoint},
		{"hostname", bad(discovery.AddressTypeIPv4, func(e *discovery.Endpoint) { e.Hostname = &host }), ErrInvalidEndpoint},
		{"node name", bad(discovery.AddressTypeIPv4, func(e *discovery.Endpoint) { e.NodeName = &node }), ErrInvalidEndpoint},
		{"nine zone hints", bad(discovery.AddressTypeIPv4, func(e *discovery.Endpoint) {
			e.Hints = &discovery.EndpointHints{}
			for i := range 9 {
				e.Hints.ForZones = append(e.Hints.ForZones, discovery.ForZone{Name: fmt.Sprint("z", i)})
			}
		}), ErrInvalidEndpoint},
		{"duplicate endpoint", bad(discovery.AddressTypeIPv4, func(e *discovery.Endpoint) { *e = ep(2, ipv4(2)) }), ErrDuplicateEndpoint},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := p.Plan(testTemplate(), []Group{tc.group}, nil)
			require.NoError(t, err)
			require.Len(t, plan.Dropped, 1)
			require.ErrorIs(t, plan.Dropped[0].Err, tc.want)
			require.Equal(t, 0, plan.Dropped[0].Group)
			at := 1 // where bad puts it; a duplicate is the later copy
			if tc.want == ErrDuplicateEndpoint {
				at = 3
			}
			require.Equal(t, at, plan.Dropped[0].Endpoint)
			require.Len(t, plan.Create, 1)
			require.Len(t, plan.Create[0].Endpoints, 3, "the valid endpoints are planned")
		})
	}
}

// TestPlanPortsNilConverges: a group with no ports (nil) that reuses an
// emptied slice of another port set writes the slice without ports, so the
// next plan has nothing to do. Before, the reused slice kept its old ports
// and every later plan rewrote it.
func TestPlanPortsNilConverges(t *testing.T) {
	t.Parallel()
	p, err := New()
	require.NoError(t, err)
	c := newCluster(existingSlice("web-1", discovery.AddressTypeIPv4, httpPorts, eps(0, 5)))
	desired := []Group{{AddressType: discovery.AddressTypeIPv4, Ports: nil, Endpoints: eps(10, 15)}}
	plan, err := p.Plan(testTemplate(), desired, c.list())
	require.NoError(t, err)
	require.Len(t, plan.Update, 1, "the emptied slice is reused")
	require.Empty(t, plan.Update[0].Ports)
	c.apply(t, plan)
	requireHolds(t, p.MaxEndpointsPerSlice(), desired, c.list())
	again, err := p.Plan(testTemplate(), desired, c.list())
	require.NoError(t, err)
	require.True(t, again.Empty(), "converged: %d writes", again.Writes())
}

func TestEndpointEqual(t *testing.T) {
	t.Parallel()
	base := fullEndpoint()
	tests := []struct {
		name   string
		mutate func(e *discovery.Endpoint)
		equal  bool
	}{
		{"identical", func(*discovery.Endpoint) {}, true},
		{"hints reordered", func(e *discovery.Endpoint) {
			e.Hints.ForZones[0], e.Hints.ForZones[1] = e.Hints.ForZones[1], e.Hints.ForZones[0]
		}, true},
		{"hints removed", func(e *discovery.Endpoint) { e.Hints = &discovery.EndpointHints{} }, false},
		{"target resourceVersion", func(e *discovery.Endpoint) { e.TargetRef.ResourceVersion = "99" }, true},
		{"address order", func(e *discovery.Endpoint) { e.Addresses = append(e.Addresses[1:], e.Addresses[0]) }, false},
		{"ready", func(e *discovery.Endpoint) { e.Conditions.Ready = ptr(false) }, false},
		{"ready unset", func(e *discovery.Endpoint) { e.Conditions.Ready = nil }, false},
		{"serving", func(e *discovery.Endpoint) { e.Conditions.Serving = ptr(false) }, false},
		{"terminating", func(e *discovery.Endpoint) { e.Conditions.Terminating = ptr(true) }, false},
		{"hostname", func(e *discovery.Endpoint) { e.Hostname = ptr("other") }, false},
		{"node", func(e *discovery.Endpoint) { e.NodeName = nil }, false},
		{"zone", func(e *discovery.Endpoint) { e.Zone = ptr("zone-b") }, false},
		{"zone hint", func(e *discovery.Endpoint) { e.Hints.ForZones[0].Name = "zone-c" }, false},
		{"node hint", func(e *discovery.Endpoint) { e.Hints.ForNodes = nil }, false},
		{"target uid", func(e *discovery.Endpoint) { e.TargetRef.UID = "other" }, false},
		{"deprecated topology", func(e *discovery.Endpoint) { e.DeprecatedTopology["k"] = "w" }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := *base.DeepCopy()
			tc.mutate(&e)
			require.Equal(t, tc.equal, endpointEqual(&base, &e))
			require.Equal(t, tc.equal, endpointEqual(&e, &base))
		})
	}

	// No hints are no hints, however they are written.
	a, b := *base.DeepCopy(), *base.DeepCopy()
	a.Hints, b.Hints = nil, &discovery.EndpointHints{ForZones: []discovery.ForZone{}}
	require.True(t, endpointEqual(&a, &b))
}

// TestEndpointFieldsCovered fails when the API grows a field that
// endpointEqual would silently ignore; extend endpointEqual, then this list.
func TestEndpointFieldsCovered(t *testing.T) {
	t.Parallel()
	fields := func(v any) []string {
		var out []string
		rt := reflect.TypeOf(v)
		for i := 0; i < rt.NumField(); i++ {
			out = append(out, rt.Field(i).Name)
		}
		return out
	}
	require.Equal(t, []string{"Addresses", "Conditions", "Hostname", "TargetRef", "DeprecatedTopology", "NodeName", "Zone", "Hints"},
		fields(discovery.Endpoint{}))
	require.Equal(t, []string{"Ready", "Serving", "Terminating"}, fields(discovery.EndpointConditions{}))
	require.Equal(t, []string{"ForZones", "ForNodes"}, fields(discovery.EndpointHints{}))
}

func fullEndpoint() discovery.Endpoint {
	return discovery.Endpoint{
		Addresses: []string{"10.1.0.1", "10.1.0.2"},
		Conditions: discovery.EndpointConditions{
			Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false),
		},
		Hostname: ptr("web-0"),
		TargetRef: &corev1.ObjectReference{
			Kind: "ExternalWorkload", Namespace: "ns", Name: "vm-1", UID: "vm-uid", APIVersion: "workload.plexus.dev/v1alpha1", ResourceVersion: "7",
		},
		DeprecatedTopology: map[string]string{"k": "v"},
		NodeName:           ptr("node-1"),
		Zone:               ptr("zone-a"),
		Hints: &discovery.EndpointHints{
			ForZones: []discovery.ForZone{{Name: "zone-a"}, {Name: "zone-b"}},
			ForNodes: []discovery.ForNode{{Name: "node-1"}},
		},
	}
}

func hinted(e discovery.Endpoint, rv string, zones ...string) discovery.Endpoint {
	e.TargetRef.ResourceVersion = rv
	e.Hints = &discovery.EndpointHints{}
	for _, z := range zones {
		e.Hints.ForZones = append(e.Hints.ForZones, discovery.ForZone{Name: z})
	}
	return e
}

func reversed(e []discovery.Endpoint) []discovery.Endpoint {
	out := make([]discovery.Endpoint, len(e))
	for i := range e {
		out[len(e)-1-i] = e[i]
	}
	return out
}

func managedBy(s *discovery.EndpointSlice, manager string) *discovery.EndpointSlice {
	s.Labels = map[string]string{discovery.LabelServiceName: "web", discovery.LabelManagedBy: manager}
	return s
}

func ownedByUID(s *discovery.EndpointSlice, uid types.UID) *discovery.EndpointSlice {
	s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: uid}}
	return s
}

func withLabel(s *discovery.EndpointSlice, key, value string) *discovery.EndpointSlice {
	labels := map[string]string{key: value}
	for k, v := range s.Labels {
		if k != key {
			labels[k] = v
		}
	}
	s.Labels = labels
	return s
}

func withoutLabel(s *discovery.EndpointSlice, key string) *discovery.EndpointSlice {
	labels := map[string]string{}
	for k, v := range s.Labels {
		if k != key {
			labels[k] = v
		}
	}
	s.Labels = labels
	return s
}

func deepCopyAll(ss []*discovery.EndpointSlice) []*discovery.EndpointSlice {
	if ss == nil {
		return nil
	}
	out := make([]*discovery.EndpointSlice, len(ss))
	for i, s := range ss {
		out[i] = s.DeepCopy()
	}
	return out
}

func nilIfEmpty(v []int) []int {
	if len(v) == 0 {
		return nil
	}
	return v
}

func nilIfEmptyS(v []string) []string {
	if len(v) == 0 {
		return nil
	}
	return v
}

func ptr[T any](v T) *T { return &v }
