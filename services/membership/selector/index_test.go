package selector

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func keys(ns string, names ...string) []ServiceKey {
	var out []ServiceKey
	for _, n := range names {
		out = append(out, ServiceKey{Namespace: ns, Name: n})
	}
	return out
}

func TestSelect(t *testing.T) {
	idx := New()
	idx.SetService("a", "web", map[string]string{"app": "web"})
	idx.SetService("a", "web-canary", map[string]string{"app": "web", "track": "canary"})
	idx.SetService("a", "all-tiers", map[string]string{"app": "web", "tier": "", "track": "canary"})
	idx.SetService("a", "no-selector", map[string]string{})
	idx.SetService("a", "five-pairs", map[string]string{"app": "web", "track": "canary", "tier": "", "zone": "z1", "team": "t"})
	idx.SetService("a", "long", map[string]string{strings.Repeat("k", 200): strings.Repeat("v", 200)})
	idx.SetService("b", "web", map[string]string{"app": "web"})

	tests := []struct {
		name   string
		ns     string
		labels map[string]string
		want   []ServiceKey
	}{
		{name: "one pair", ns: "a", labels: map[string]string{"app": "web"}, want: keys("a", "web")},
		{name: "all pairs needed", ns: "a", labels: map[string]string{"app": "web", "track": "canary"}, want: keys("a", "web", "web-canary")},
		{name: "empty value is a value", ns: "a", labels: map[string]string{"app": "web", "track": "canary", "tier": ""}, want: keys("a", "all-tiers", "web", "web-canary")},
		{name: "more pairs than an anchor entry holds", ns: "a", labels: map[string]string{"app": "web", "track": "canary", "tier": "", "zone": "z1", "team": "t"}, want: keys("a", "all-tiers", "five-pairs", "web", "web-canary")},
		{name: "all but one of many pairs", ns: "a", labels: map[string]string{"app": "web", "track": "canary", "tier": "", "zone": "z1", "team": "u"}, want: keys("a", "all-tiers", "web", "web-canary")},
		{name: "long key and value", ns: "a", labels: map[string]string{"app": "web", strings.Repeat("k", 200): strings.Repeat("v", 200)}, want: keys("a", "long", "web")},
		{name: "value differs", ns: "a", labels: map[string]string{"app": "web", "track": "stable"}, want: keys("a", "web")},
		{name: "other namespace", ns: "b", labels: map[string]string{"app": "web", "track": "canary"}, want: keys("b", "web")},
		{name: "unknown namespace", ns: "c", labels: map[string]string{"app": "web"}},
		{name: "no labels", ns: "a"},
		{name: "unknown labels", ns: "a", labels: map[string]string{"x": "y"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, idx.Select(tc.ns, tc.labels))
		})
	}
}

func TestSetServiceReplacesSelector(t *testing.T) {
	idx := New()
	idx.SetService("ns", "s", map[string]string{"app": "a"})
	idx.SetService("ns", "t", map[string]string{"app": "a"})
	require.Equal(t, keys("ns", "s", "t"), idx.Select("ns", map[string]string{"app": "a"}))

	idx.SetService("ns", "s", map[string]string{"app": "b"})
	require.Equal(t, keys("ns", "t"), idx.Select("ns", map[string]string{"app": "a"}))
	require.Equal(t, keys("ns", "s"), idx.Select("ns", map[string]string{"app": "b"}))

	// Keeping one pair and adding another.
	idx.SetService("ns", "s", map[string]string{"app": "b", "tier": "x"})
	require.Nil(t, idx.Select("ns", map[string]string{"app": "b"}))
	require.Equal(t, keys("ns", "s"), idx.Select("ns", map[string]string{"app": "b", "tier": "x"}))

	// An empty selector selects nothing.
	idx.SetService("ns", "s", nil)
	require.Nil(t, idx.Select("ns", map[string]string{"app": "b", "tier": "x"}))
	require.Equal(t, Stats{Namespaces: 1, Services: 1, Pairs: 1}, idx.Stats())

	idx.DeleteService("ns", "t")
	idx.DeleteService("ns", "t")
	idx.DeleteService("nowhere", "t")
	require.Equal(t, Stats{}, idx.Stats())
}

func TestMembersAndServicesFor(t *testing.T) {
	idx := New()
	idx.SetService("ns", "web", map[string]string{"app": "web"})
	idx.SetService("ns", "web-v2", map[string]string{"app": "web", "version": "v2"})

	pod1 := WorkloadKey{Namespace: "ns", Kind: "Pod", Name: "w1"}
	ext1 := WorkloadKey{Namespace: "ns", Kind: "ExternalWorkload", Name: "w1"}
	pod2 := WorkloadKey{Namespace: "ns", Kind: "Pod", Name: "w2"}
	idx.SetWorkload(pod1, map[string]string{"app": "web", "version": "v1"})
	idx.SetWorkload(ext1, map[string]string{"app": "web", "version": "v2"})
	idx.SetWorkload(pod2, map[string]string{"app": "db"})

	require.Equal(t, []WorkloadKey{ext1, pod1}, idx.Members("ns", "web"))
	require.Equal(t, []WorkloadKey{ext1}, idx.Members("ns", "web-v2"))
	require.Nil(t, idx.Members("ns", "missing"))
	require.Nil(t, idx.Members("other", "web"))
	require.Equal(t, keys("ns", "web"), idx.ServicesFor(pod1))
	require.Equal(t, keys("ns", "web", "web-v2"), idx.ServicesFor(ext1))
	require.Nil(t, idx.ServicesFor(pod2))
	require.Nil(t, idx.ServicesFor(WorkloadKey{Namespace: "ns", Kind: "Pod", Name: "missing"}))

	// Relabel, keeping one pair.
	idx.SetWorkload(pod1, map[string]string{"app": "web", "version": "v2"})
	require.Equal(t, []WorkloadKey{ext1, pod1}, idx.Members("ns", "web-v2"))
	idx.SetWorkload(pod2, map[string]string{"app": "web"})
	require.Equal(t, []WorkloadKey{ext1, pod1, pod2}, idx.Members("ns", "web"))

	idx.DeleteWorkload(ext1)
	idx.DeleteWorkload(ext1)
	require.Equal(t, []WorkloadKey{pod1, pod2}, idx.Members("ns", "web"))
	require.Equal(t, []WorkloadKey{pod1}, idx.Members("ns", "web-v2"))

	idx.SetWorkload(pod1, nil)
	require.Equal(t, []WorkloadKey{pod2}, idx.Members("ns", "web"))
	require.Equal(t, Stats{Namespaces: 1, Services: 2, Workloads: 2, Pairs: 2}, idx.Stats())

	idx.DeleteWorkload(pod1)
	idx.DeleteWorkload(pod2)
	idx.DeleteService("ns", "web")
	idx.DeleteService("ns", "web-v2")
	require.Equal(t, Stats{}, idx.Stats())
}

func TestIgnoredNamespaces(t *testing.T) {
	idx := New(WithIgnoredNamespaces("kube-system", "kube-public"))
	require.True(t, idx.Ignored("kube-system"))
	require.False(t, idx.Ignored("default"))

	idx.SetService("kube-system", "dns", map[string]string{"k8s-app": "dns"})
	idx.SetWorkload(WorkloadKey{Namespace: "kube-system", Kind: "Pod", Name: "dns-1"}, map[string]string{"k8s-app": "dns"})
	require.Nil(t, idx.Select("kube-system", map[string]string{"k8s-app": "dns"}))
	require.Nil(t, idx.Members("kube-system", "dns"))
	require.Equal(t, Stats{}, idx.Stats())
}

// TestAnchorsStayBalanced checks that Services sharing a common pair are not
// all filed under it, which would make every lookup of a workload with that
// pair visit all of them.
func TestAnchorsStayBalanced(t *testing.T) {
	idx := New()
	for i := range 100 {
		idx.SetService("ns", "svc-"+string(rune('a'+i%26))+string(rune('a'+i/26)),
			map[string]string{"env": "prod", "app": "app-" + string(rune('a'+i%26)) + string(rune('a'+i/26))})
	}
	idx.mu.RLock()
	defer idx.mu.RUnlock()
	p := idx.namespaces["ns"].pairs[string(pairKey(nil, "env", "prod"))]
	require.LessOrEqual(t, len(idx.pairs[p].anchored), 1)
}

// TestConcurrentUse runs readers against writers; run with -race it checks
// that lookups and updates share the index safely.
func TestConcurrentUse(t *testing.T) {
	idx := New()
	f := newFleet(200, 7)
	f.loadServices(idx)
	done := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				key, labels := f.workload(i % 500)
				idx.Select(key.Namespace, labels)
				idx.ServicesFor(key)
				idx.Members(f.namespace, f.services[i%len(f.services)].name)
			}
		})
	}
	for i := range 2000 {
		key, labels := f.workload(i % 500)
		if i%7 == 0 {
			idx.DeleteWorkload(key)
		} else {
			idx.SetWorkload(key, labels)
		}
		s := f.services[i%len(f.services)]
		if i%5 == 0 {
			idx.SetService(f.namespace, s.name, map[string]string{"app": "elsewhere"})
		}
		idx.SetService(f.namespace, s.name, s.selector)
	}
	close(done)
	readers.Wait()
	require.Equal(t, 200, idx.Stats().Services)
}
