package selector

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAffected(t *testing.T) {
	idx := New()
	idx.SetService("shop", "web", map[string]string{"app": "web"})
	idx.SetService("shop", "web-v1", map[string]string{"app": "web", "version": "v1"})
	idx.SetService("shop", "web-v2", map[string]string{"app": "web", "version": "v2"})
	idx.SetService("shop", "api", map[string]string{"app": "api"})
	idx.SetService("shop", "headless", nil)
	idx.SetService("other", "web", map[string]string{"app": "web"})

	v1 := map[string]string{"app": "web", "version": "v1"}
	v2 := map[string]string{"app": "web", "version": "v2"}
	api := map[string]string{"app": "api", "version": "v1"}
	none := map[string]string{"team": "x"}

	svc := func(names ...string) []ServiceKey {
		var out []ServiceKey
		for _, n := range names {
			out = append(out, ServiceKey{Namespace: "shop", Name: n})
		}
		return out
	}
	wl := func(labels map[string]string, fp uint64) *Workload {
		return &Workload{Namespace: "shop", Labels: labels, Fingerprint: fp}
	}

	tests := []struct {
		name       string
		prev, next *Workload
		want       []ServiceKey
	}{
		{name: "add", next: wl(v1, 1), want: svc("web", "web-v1")},
		{name: "add selected by nothing", next: wl(none, 1)},
		{name: "delete", prev: wl(v2, 1), want: svc("web", "web-v2")},
		{name: "neither (resync)", prev: wl(v1, 1), next: wl(map[string]string{"version": "v1", "app": "web"}, 1)},
		{name: "labels only: symmetric difference", prev: wl(v1, 1), next: wl(v2, 1), want: svc("web-v1", "web-v2")},
		{name: "labels only: to another app", prev: wl(v1, 1), next: wl(api, 1), want: svc("api", "web", "web-v1")},
		{name: "labels only: unrelated label added", prev: wl(v1, 1), next: wl(map[string]string{"app": "web", "version": "v1", "x": "y"}, 1)},
		{name: "spec only: current selection", prev: wl(v1, 1), next: wl(v1, 2), want: svc("web", "web-v1")},
		{name: "spec and labels: union", prev: wl(v1, 1), next: wl(v2, 2), want: svc("web", "web-v1", "web-v2")},
		{name: "spec changed, selected by nothing", prev: wl(none, 1), next: wl(none, 2)},
		{name: "nil labels to selected", prev: wl(nil, 1), next: wl(api, 1), want: svc("api")},
		{name: "both nil"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Affected(idx, tc.prev, tc.next))
		})
	}
}

func TestAffectedIgnoredNamespace(t *testing.T) {
	idx := New(WithIgnoredNamespaces("kube-system"))
	idx.SetService("kube-system", "dns", map[string]string{"k8s-app": "kube-dns"})
	idx.SetService("default", "dns", map[string]string{"k8s-app": "kube-dns"})
	labels := map[string]string{"k8s-app": "kube-dns"}

	require.Nil(t, Affected(idx, nil, &Workload{Namespace: "kube-system", Labels: labels}))
	require.Equal(t, []ServiceKey{{Namespace: "default", Name: "dns"}},
		Affected(idx, nil, &Workload{Namespace: "default", Labels: labels}))

	// Not special-cased unless asked for.
	plain := New()
	plain.SetService("kube-system", "dns", map[string]string{"k8s-app": "kube-dns"})
	require.Equal(t, []ServiceKey{{Namespace: "kube-system", Name: "dns"}},
		Affected(plain, nil, &Workload{Namespace: "kube-system", Labels: labels}))
}

func TestSetOperations(t *testing.T) {
	k := func(names ...string) []ServiceKey {
		var out []ServiceKey
		for _, n := range names {
			out = append(out, ServiceKey{Namespace: "ns", Name: n})
		}
		return out
	}
	tests := []struct {
		name          string
		a, b          []ServiceKey
		union, symdif []ServiceKey
	}{
		{name: "empty"},
		{name: "left only", a: k("a", "c"), union: k("a", "c"), symdif: k("a", "c")},
		{name: "right only", b: k("b"), union: k("b"), symdif: k("b")},
		{name: "equal", a: k("a", "b"), b: k("a", "b"), union: k("a", "b")},
		{name: "interleaved", a: k("a", "c", "e"), b: k("b", "c", "d"), union: k("a", "b", "c", "d", "e"), symdif: k("a", "b", "d", "e")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.union, union(tc.a, tc.b))
			require.Equal(t, tc.symdif, symmetricDifference(tc.a, tc.b))
		})
	}
}
