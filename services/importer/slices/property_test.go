package slices

import (
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// model is the desired state of one service from one cluster, changed at
// random, with the existing slices it has been reconciled into.
type model struct {
	rng     *rand.Rand
	max     int
	groups  []modelGroup
	cluster *cluster
	next    int // next unused pod number, so addresses never repeat
}

type modelGroup struct {
	at    discovery.AddressType
	ports []discovery.EndpointPort
	eps   map[int]discovery.Endpoint // by pod number
}

func newModel(seed uint64) *model {
	m := &model{
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		cluster: newCluster(),
	}
	m.max = []int{1, 3, 10, 100}[m.rng.IntN(4)]
	m.groups = []modelGroup{
		{at: discovery.AddressTypeIPv4, ports: httpPorts, eps: map[int]discovery.Endpoint{}},
		{at: discovery.AddressTypeIPv4, ports: []discovery.EndpointPort{port("http", 81), port("metrics", 9090)}, eps: map[int]discovery.Endpoint{}},
		{at: discovery.AddressTypeIPv6, ports: httpPorts, eps: map[int]discovery.Endpoint{}},
	}
	for range m.rng.IntN(4 * m.max) {
		m.add(&m.groups[m.rng.IntN(len(m.groups))])
	}
	return m
}

func (m *model) desired() []Group {
	out := make([]Group, 0, len(m.groups))
	for _, g := range m.groups {
		keys := make([]int, 0, len(g.eps))
		for k := range g.eps {
			keys = append(keys, k)
		}
		// Plan must not depend on input order: shuffle it.
		m.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		list := make([]discovery.Endpoint, 0, len(keys))
		for _, k := range keys {
			list = append(list, g.eps[k])
		}
		out = append(out, Group{AddressType: g.at, Ports: g.ports, Endpoints: list})
	}
	return out
}

func (m *model) address(g *modelGroup) string {
	m.next++
	if g.at == discovery.AddressTypeIPv6 {
		return ipv6(m.next)
	}
	return ipv4(m.next)
}

func (m *model) randomEndpoint(g *modelGroup, pod int) discovery.Endpoint {
	e := discovery.Endpoint{
		Addresses: []string{m.address(g)},
		Conditions: discovery.EndpointConditions{
			Ready: ptr(m.rng.IntN(4) > 0), Serving: ptr(m.rng.IntN(4) > 0), Terminating: ptr(m.rng.IntN(8) == 0),
		},
		NodeName:  ptr("node-" + strconv.Itoa(m.rng.IntN(5))),
		Zone:      ptr("zone-" + strconv.Itoa(m.rng.IntN(3))),
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "pod-" + strconv.Itoa(pod), UID: types.UID("uid-" + strconv.Itoa(m.next))},
	}
	if m.rng.IntN(3) == 0 {
		e.Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: *e.Zone}}}
	}
	if m.rng.IntN(5) == 0 {
		e.Hostname = ptr("host-" + strconv.Itoa(pod))
	}
	return e
}

func (m *model) add(g *modelGroup) {
	m.next++
	pod := m.next
	g.eps[pod] = m.randomEndpoint(g, pod)
}

func (m *model) pick(g *modelGroup) (int, bool) {
	if len(g.eps) == 0 {
		return 0, false
	}
	keys := make([]int, 0, len(g.eps))
	for k := range g.eps {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys[m.rng.IntN(len(keys))], true
}

// changeOne changes exactly one endpoint of one group: adds, removes, or
// modifies it (conditions, placement, hints, or its identity: address or
// hostname). It reports false when it changed nothing.
func (m *model) changeOne() bool {
	g := &m.groups[m.rng.IntN(len(m.groups))]
	pod, ok := m.pick(g)
	op := m.rng.IntN(7)
	if !ok || op == 0 {
		m.add(g)
		return true
	}
	old := g.eps[pod]
	e := *old.DeepCopy()
	switch op {
	case 1:
		delete(g.eps, pod)
		return true
	case 2:
		e.Conditions.Ready = ptr(!*e.Conditions.Ready)
	case 3:
		e.Conditions.Terminating = ptr(!*e.Conditions.Terminating)
		e.Conditions.Serving = ptr(false)
	case 4:
		e.Zone = ptr(*e.Zone + "x")
		e.NodeName = nil
		e.Hints = &discovery.EndpointHints{ForNodes: []discovery.ForNode{{Name: "node-z"}}}
	case 5:
		e.Addresses = []string{m.address(g)}
	case 6:
		e.Hostname = ptr("renamed-" + strconv.Itoa(m.next))
		m.next++
	}
	g.eps[pod] = e
	return true
}

// churn applies a batch of random changes and sometimes a new capacity.
func (m *model) churn() {
	for range m.rng.IntN(3 * m.max) {
		m.changeOne()
	}
	if m.rng.IntN(10) == 0 {
		m.max = []int{1, 3, 10, 100}[m.rng.IntN(4)]
	}
	if m.rng.IntN(20) == 0 {
		// A port change moves a whole group into another port set. Steps of
		// three keep the two IPv4 groups (80 and 81 mod 3) apart.
		g := &m.groups[m.rng.IntN(len(m.groups))]
		p := *g.ports[0].Port + 3
		g.ports = []discovery.EndpointPort{port(*g.ports[0].Name, p)}
	}
}

// step reconciles once and checks every property of the plan. single says
// the desired state differs from the existing slices in one endpoint.
func (m *model) step(t testing.TB, single bool) {
	t.Helper()
	p, err := New(WithMaxEndpointsPerSlice(m.max))
	require.NoError(t, err)
	existing := m.cluster.list()
	desired := m.desired()
	plan, err := p.Plan(testTemplate(), desired, existing)
	require.NoError(t, err)

	// Determinism: the same state in another order gives the same plan.
	shuffled := m.cluster.list()
	m.rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	plan2, err := p.Plan(testTemplate(), m.desired(), shuffled)
	require.NoError(t, err)
	require.Equal(t, plan, plan2, "plan depends on input order")

	byName := map[string]*discovery.EndpointSlice{}
	for _, s := range existing {
		byName[s.Name] = s
	}
	for _, u := range plan.Update {
		require.Falsef(t, sameContent(byName[u.Name], u), "slice %s rewritten without a change", u.Name)
	}
	deleted := map[discovery.AddressType]bool{}
	for _, d := range plan.Delete {
		deleted[d.AddressType] = true
	}
	for _, c := range plan.Create {
		require.Falsef(t, deleted[c.AddressType], "create and delete of %s slices should have been one update", c.AddressType)
	}
	if single {
		require.Equalf(t, 1, plan.Writes(), "one endpoint change must write one slice: %d creates %d updates %d deletes",
			len(plan.Create), len(plan.Update), len(plan.Delete))
	}

	m.cluster.apply(t, plan)
	requireHolds(t, m.max, desired, m.cluster.list())
	again, err := p.Plan(testTemplate(), desired, m.cluster.list())
	require.NoError(t, err)
	require.Truef(t, again.Empty(), "not a fixed point: %d writes", again.Writes())
}

func runModel(t testing.TB, seed uint64, steps int) {
	m := newModel(seed)
	m.step(t, false)
	for range steps {
		if m.rng.IntN(2) == 0 {
			m.churn()
			m.step(t, false)
			continue
		}
		m.step(t, m.changeOne())
	}
}

func TestPlanProperties(t *testing.T) {
	t.Parallel()
	deadline := time.Now().Add(10 * time.Second)
	for seed := uint64(1); seed <= 60 && time.Now().Before(deadline); seed++ {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			runModel(t, seed, 40)
		})
	}
}

// FuzzPlan explores further seeds: go test -fuzz FuzzPlan -fuzztime 30s.
func FuzzPlan(f *testing.F) {
	for _, s := range []uint64{0, 7, 1 << 40} {
		f.Add(s, uint8(10))
	}
	f.Fuzz(func(t *testing.T, seed uint64, steps uint8) {
		runModel(t, seed, int(steps%50))
	})
}
