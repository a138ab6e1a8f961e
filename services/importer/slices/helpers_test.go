package slices

import (
	"fmt"
	"sort"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const ownerUID = types.UID("derived-svc-uid")

func testTemplate() Template {
	return Template{
		Namespace:    "ns",
		GenerateName: "web-",
		Labels: map[string]string{
			discovery.LabelServiceName:                  "web",
			"multicluster.kubernetes.io/service-name":   "web",
			"multicluster.kubernetes.io/source-cluster": "a",
			discovery.LabelManagedBy:                    ManagedBy,
		},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Service", Name: "web", UID: ownerUID,
		}},
	}
}

func port(name string, num int32) discovery.EndpointPort {
	proto := corev1.ProtocolTCP
	return discovery.EndpointPort{Name: &name, Port: &num, Protocol: &proto}
}

var httpPorts = []discovery.EndpointPort{port("http", 80)}

// ipv4 returns the i-th address of 10.0.0.0/8 (i < 2^24).
func ipv4(i int) string {
	return fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff)
}

func ipv6(i int) string {
	return fmt.Sprintf("fd00::%x", i+1)
}

// ep returns a ready endpoint of pod i at addr.
func ep(i int, addr string) discovery.Endpoint {
	ready, serving, terminating := true, true, false
	node := "node-" + strconv.Itoa(i%7)
	zone := "zone-" + strconv.Itoa(i%3)
	return discovery.Endpoint{
		Addresses:  []string{addr},
		Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
		NodeName:   &node,
		Zone:       &zone,
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "pod-" + strconv.Itoa(i), UID: types.UID("uid-" + strconv.Itoa(i))},
	}
}

// eps returns ready endpoints for pods from..to-1 at IPv4 addresses.
func eps(from, to int) []discovery.Endpoint {
	out := make([]discovery.Endpoint, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, ep(i, ipv4(i)))
	}
	return out
}

func withReady(e discovery.Endpoint, ready bool) discovery.Endpoint {
	e = *e.DeepCopy()
	e.Conditions.Ready = &ready
	return e
}

func v4(endpoints ...[]discovery.Endpoint) Group {
	var all []discovery.Endpoint
	for _, e := range endpoints {
		all = append(all, e...)
	}
	return Group{AddressType: discovery.AddressTypeIPv4, Ports: httpPorts, Endpoints: all}
}

// existingSlice returns a slice as the API server would hold it after the
// importer wrote it.
func existingSlice(name string, at discovery.AddressType, ports []discovery.EndpointPort, endpoints []discovery.Endpoint) *discovery.EndpointSlice {
	tmpl := testTemplate()
	return &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       tmpl.Namespace,
			Labels:          tmpl.Labels,
			OwnerReferences: tmpl.OwnerReferences,
			ResourceVersion: "1",
		},
		AddressType: at,
		Ports:       copyPorts(ports),
		Endpoints:   copyEndpoints(endpoints),
	}
}

// cluster applies plans like an API server: it names created slices, checks
// and bumps resourceVersions, and refuses writes to unknown slices.
type cluster struct {
	slices map[string]*discovery.EndpointSlice
	next   int
}

func newCluster(initial ...*discovery.EndpointSlice) *cluster {
	c := &cluster{slices: map[string]*discovery.EndpointSlice{}}
	for _, s := range initial {
		c.slices[s.Name] = s.DeepCopy()
	}
	return c
}

func (c *cluster) list() []*discovery.EndpointSlice {
	out := make([]*discovery.EndpointSlice, 0, len(c.slices))
	for _, s := range c.slices {
		out = append(out, s.DeepCopy())
	}
	// A list in random-looking order shows Plan does not depend on it.
	sort.Slice(out, func(i, j int) bool { return out[i].ResourceVersion+out[i].Name > out[j].ResourceVersion+out[j].Name })
	return out
}

func (c *cluster) apply(t testing.TB, p Plan) {
	t.Helper()
	for _, s := range p.Delete {
		_, ok := c.slices[s.Name]
		require.Truef(t, ok, "delete of unknown slice %s", s.Name)
		delete(c.slices, s.Name)
	}
	for _, s := range p.Update {
		old, ok := c.slices[s.Name]
		require.Truef(t, ok, "update of unknown slice %s", s.Name)
		require.Equal(t, old.ResourceVersion, s.ResourceVersion, "update must carry the resourceVersion it read")
		require.Equal(t, old.AddressType, s.AddressType, "address type is immutable")
		s = s.DeepCopy()
		c.next++
		s.ResourceVersion = strconv.Itoa(c.next + 1)
		c.slices[s.Name] = s
	}
	for _, s := range p.Create {
		require.Empty(t, s.Name)
		require.NotEmpty(t, s.GenerateName)
		s = s.DeepCopy()
		c.next++
		s.Name = s.GenerateName + strconv.Itoa(c.next)
		s.ResourceVersion = strconv.Itoa(c.next + 1)
		c.slices[s.Name] = s
	}
}

// requireHolds checks the slices hold exactly the desired endpoints, each
// slice within one group and within max, and no empty slices.
func requireHolds(t testing.TB, max int, desired []Group, got []*discovery.EndpointSlice) {
	t.Helper()
	want := map[groupKey]map[string]*discovery.Endpoint{}
	for i := range desired {
		g := &desired[i]
		k := groupKey{addressType: g.AddressType, ports: portsKey(g.Ports)}
		want[k] = map[string]*discovery.Endpoint{}
		for j := range g.Endpoints {
			want[k][identity(&g.Endpoints[j])] = &g.Endpoints[j]
		}
	}
	seen := map[groupKey]map[string]bool{}
	for _, s := range got {
		require.NotEmptyf(t, s.Endpoints, "slice %s is empty", s.Name)
		require.LessOrEqualf(t, len(s.Endpoints), max, "slice %s over capacity", s.Name)
		k := groupKey{addressType: s.AddressType, ports: portsKey(s.Ports)}
		w, ok := want[k]
		require.Truef(t, ok, "slice %s has an undesired address type or port set", s.Name)
		if seen[k] == nil {
			seen[k] = map[string]bool{}
		}
		for i := range s.Endpoints {
			e := &s.Endpoints[i]
			id := identity(e)
			d, ok := w[id]
			require.Truef(t, ok, "slice %s holds undesired endpoint %v", s.Name, e.Addresses)
			require.Falsef(t, seen[k][id], "endpoint %v is in two slices", e.Addresses)
			seen[k][id] = true
			require.Truef(t, endpointEqual(e, d), "endpoint %v differs from desired", e.Addresses)
		}
	}
	for k, w := range want {
		require.Lenf(t, seen[k], len(w), "group %v: endpoints missing", k.addressType)
	}
}

// sameContent reports whether two slices are semantically equal, ignoring
// the order of endpoints and ports.
func sameContent(a, b *discovery.EndpointSlice) bool {
	if a.AddressType != b.AddressType || portsKey(a.Ports) != portsKey(b.Ports) || len(a.Endpoints) != len(b.Endpoints) {
		return false
	}
	if !labelsCover(a.Labels, b.Labels) || !labelsCover(b.Labels, a.Labels) {
		return false
	}
	byID := map[string]*discovery.Endpoint{}
	for i := range a.Endpoints {
		byID[identity(&a.Endpoints[i])] = &a.Endpoints[i]
	}
	for i := range b.Endpoints {
		e, ok := byID[identity(&b.Endpoints[i])]
		if !ok || !endpointEqual(e, &b.Endpoints[i]) {
			return false
		}
	}
	return true
}

func names(ss []*discovery.EndpointSlice) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name
	}
	return out
}

func sizes(ss []*discovery.EndpointSlice) []int {
	out := make([]int, len(ss))
	for i, s := range ss {
		out[i] = len(s.Endpoints)
	}
	return out
}
