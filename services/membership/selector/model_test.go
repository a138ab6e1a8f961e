package selector

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// model is the obviously right, linear answer the Index must agree with.
type model struct {
	services  map[ServiceKey]map[string]string
	workloads map[WorkloadKey]map[string]string
}

func newModel() *model {
	return &model{services: map[ServiceKey]map[string]string{}, workloads: map[WorkloadKey]map[string]string{}}
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (m *model) Select(ns string, labels map[string]string) []ServiceKey {
	var out []ServiceKey
	for k, sel := range m.services {
		if k.Namespace == ns && selects(sel, labels) {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, compareServiceKeys)
	return out
}

func (m *model) Members(ns, name string) []WorkloadKey {
	sel := m.services[ServiceKey{Namespace: ns, Name: name}]
	var out []WorkloadKey
	for k, labels := range m.workloads {
		if k.Namespace == ns && selects(sel, labels) {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b WorkloadKey) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Kind, b.Kind))
	})
	return out
}

// chooser draws the small numbers that drive a random history.
type chooser interface {
	// choose returns a number in [0, n), and false once it has run dry.
	choose(n int) (int, bool)
}

type randChooser struct{ r *rand.Rand }

func (c randChooser) choose(n int) (int, bool) { return c.r.IntN(n), true }

type byteChooser struct{ data []byte }

func (c *byteChooser) choose(n int) (int, bool) {
	if len(c.data) == 0 {
		return 0, false
	}
	b := c.data[0]
	c.data = c.data[1:]
	return int(b) % n, true
}

// The universe is small on purpose, so that random histories keep hitting
// the same pairs, Services and workloads.
var (
	modelNamespaces = []string{"ns0", "ns1"}
	modelKinds      = []string{"Pod", "ExternalWorkload"}
	modelKeys       = []string{"app", "tier", "version", "track", "zone", "team"}
	modelValues     = []string{"a", "b", ""}
)

func drawLabels(c chooser, most int) (map[string]string, bool) {
	n, ok := c.choose(most + 1)
	if !ok {
		return nil, false
	}
	labels := map[string]string{}
	for range n {
		k, ok1 := c.choose(len(modelKeys))
		v, ok2 := c.choose(len(modelValues))
		if !ok1 || !ok2 {
			return nil, false
		}
		labels[modelKeys[k]] = modelValues[v]
	}
	return labels, true
}

// step applies one random change to both the index and the model, and
// reports false once the chooser has run dry.
func step(c chooser, idx *Index, m *model) bool {
	op, ok := c.choose(5)
	if !ok {
		return false
	}
	nsi, ok1 := c.choose(len(modelNamespaces))
	ni, ok2 := c.choose(8)
	if !ok1 || !ok2 {
		return false
	}
	ns := modelNamespaces[nsi]
	switch op {
	case 0, 1:
		sel, ok := drawLabels(c, 5)
		if !ok {
			return false
		}
		name := fmt.Sprintf("svc-%d", ni)
		idx.SetService(ns, name, sel)
		if len(sel) == 0 {
			delete(m.services, ServiceKey{Namespace: ns, Name: name})
		} else {
			m.services[ServiceKey{Namespace: ns, Name: name}] = sel
		}
	case 2:
		name := fmt.Sprintf("svc-%d", ni)
		idx.DeleteService(ns, name)
		delete(m.services, ServiceKey{Namespace: ns, Name: name})
	case 3:
		kind, ok := c.choose(len(modelKinds))
		labels, ok2 := drawLabels(c, 6)
		if !ok || !ok2 {
			return false
		}
		key := WorkloadKey{Namespace: ns, Kind: modelKinds[kind], Name: fmt.Sprintf("w-%d", ni)}
		idx.SetWorkload(key, labels)
		m.workloads[key] = labels
	case 4:
		kind, ok := c.choose(len(modelKinds))
		if !ok {
			return false
		}
		key := WorkloadKey{Namespace: ns, Kind: modelKinds[kind], Name: fmt.Sprintf("w-%d", ni)}
		idx.DeleteWorkload(key)
		delete(m.workloads, key)
	}
	return true
}

// agree checks every question the Index answers against the model.
func agree(t *testing.T, idx *Index, m *model, probes []map[string]string) {
	t.Helper()
	for k := range m.services {
		require.Equal(t, m.Members(k.Namespace, k.Name), idx.Members(k.Namespace, k.Name), "members of %v", k)
	}
	for k, labels := range m.workloads {
		want := m.Select(k.Namespace, labels)
		require.Equal(t, want, idx.ServicesFor(k), "services for %v", k)
		require.Equal(t, want, idx.Select(k.Namespace, labels), "select %v", labels)
	}
	for _, ns := range modelNamespaces {
		for _, labels := range probes {
			require.Equal(t, m.Select(ns, labels), idx.Select(ns, labels), "select %s %v", ns, labels)
		}
	}
	s := idx.Stats()
	require.Equal(t, len(m.services), s.Services)
	require.Equal(t, len(m.workloads), s.Workloads)
}

// probeLabels is every label set over two keys of the universe, which covers
// the selectors of up to two pairs exactly and larger ones partly.
func probeLabels() []map[string]string {
	var out []map[string]string
	for i, k1 := range modelKeys {
		for _, v1 := range modelValues {
			out = append(out, map[string]string{k1: v1})
			for _, k2 := range modelKeys[i+1:] {
				for _, v2 := range modelValues {
					out = append(out, map[string]string{k1: v1, k2: v2})
				}
			}
		}
	}
	return out
}

func TestIndexAgreesWithModel(t *testing.T) {
	probes := probeLabels()
	// Bounded by count and by time: a slow machine runs fewer seeds, never
	// fewer than one.
	deadline := time.Now().Add(10 * time.Second)
	for seed := range uint64(20) {
		if seed > 0 && time.Now().After(deadline) {
			t.Logf("stopped after %d seeds at the time bound", seed)
			break
		}
		c := randChooser{rand.New(rand.NewPCG(seed, 1))}
		idx, m := New(), newModel()
		for range 300 {
			step(c, idx, m)
			agree(t, idx, m, probes)
		}
		// Tear everything down: nothing may be left behind.
		for k := range m.services {
			idx.DeleteService(k.Namespace, k.Name)
		}
		for k := range m.workloads {
			idx.DeleteWorkload(k)
		}
		require.Equal(t, Stats{}, idx.Stats(), "seed %d", seed)
	}
}

func FuzzIndex(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 0, 0, 1, 1, 3, 0, 1, 0, 2, 0, 0, 1, 1})
	f.Add([]byte{3, 1, 2, 1, 3, 0, 0, 1, 1, 0, 1, 2, 1, 0, 0, 4, 1, 2, 1, 2, 1, 2})
	f.Add([]byte("the quick brown fox relabels the lazy dog"))
	probes := probeLabels()
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &byteChooser{data: data}
		idx, m := New(), newModel()
		for range 200 {
			if !step(c, idx, m) {
				break
			}
			agree(t, idx, m, probes)
		}
	})
}
