package kube

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/plexusnet/plexus/services/importer/exports"
)

func slice(name, uid, rv string) *discovery.EndpointSlice {
	return &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(uid), ResourceVersion: rv}}
}

// fakeCache is a fake informer cache for Stale.
type fakeCache map[ObjectKey]metav1.Object

func (c fakeCache) lookup(k ObjectKey) metav1.Object { return c[k] }

func (c fakeCache) put(s *discovery.EndpointSlice) {
	c[ObjectKey{Kind: KindEndpointSlice, Namespace: s.Namespace, Name: s.Name}] = s
}

func TestTrackerStale(t *testing.T) {
	cart := exports.Key{Namespace: "shop", Name: "cart"}
	web := exports.Key{Namespace: "shop", Name: "web"}
	for _, tc := range []struct {
		name  string
		write func(tr *Tracker)
		cache []*discovery.EndpointSlice
		stale bool
	}{
		{name: "nothing written", stale: false},
		{
			name:  "created, not in the cache yet",
			write: func(tr *Tracker) { tr.Wrote(cart, KindEndpointSlice, slice("a", "u1", "10")) },
			stale: true,
		},
		{
			name:  "created and cached",
			write: func(tr *Tracker) { tr.Wrote(cart, KindEndpointSlice, slice("a", "u1", "10")) },
			cache: []*discovery.EndpointSlice{slice("a", "u1", "10")},
		},
		{
			name:  "updated, cache has the older version",
			write: func(tr *Tracker) { tr.Wrote(cart, KindEndpointSlice, slice("a", "u1", "12")) },
			cache: []*discovery.EndpointSlice{slice("a", "u1", "11")},
			stale: true,
		},
		{
			name:  "updated, cache has a newer version by someone else",
			write: func(tr *Tracker) { tr.Wrote(cart, KindEndpointSlice, slice("a", "u1", "12")) },
			cache: []*discovery.EndpointSlice{slice("a", "u1", "15")},
		},
		{
			name:  "deleted, still cached",
			write: func(tr *Tracker) { tr.Deleted(cart, KindEndpointSlice, slice("a", "u1", "12")) },
			cache: []*discovery.EndpointSlice{slice("a", "u1", "12")},
			stale: true,
		},
		{
			name:  "deleted and gone",
			write: func(tr *Tracker) { tr.Deleted(cart, KindEndpointSlice, slice("a", "u1", "12")) },
		},
		{
			name:  "another service's write does not count",
			write: func(tr *Tracker) { tr.Wrote(web, KindEndpointSlice, slice("b", "u2", "10")) },
		},
		{
			name:  "replaced by another incarnation",
			write: func(tr *Tracker) { tr.Wrote(cart, KindEndpointSlice, slice("a", "u1", "12")) },
			cache: []*discovery.EndpointSlice{slice("a", "u9", "3")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(0)
			if tc.write != nil {
				tc.write(tr)
			}
			c := fakeCache{}
			for _, s := range tc.cache {
				c.put(s)
			}
			stale, _ := tr.Stale(cart, c.lookup)
			require.Equal(t, tc.stale, stale)
		})
	}
}

func TestTrackerCatchesUpThroughInformerEvents(t *testing.T) {
	cart := exports.Key{Namespace: "shop", Name: "cart"}
	tr := NewTracker(0)
	tr.Wrote(cart, KindEndpointSlice, slice("a", "u1", "10"))
	tr.Deleted(cart, KindEndpointSlice, slice("b", "u2", "7"))
	require.Equal(t, 2, tr.Len())
	tr.Observed(KindEndpointSlice, slice("a", "u1", "9")) // an older event
	require.Equal(t, 2, tr.Len())
	tr.Observed(KindEndpointSlice, slice("a", "u1", "10"))
	tr.Observed(KindEndpointSlice, slice("b", "u2", "7")) // the delete is not seen by an update
	require.Equal(t, 1, tr.Len())
	tr.Gone(KindEndpointSlice, slice("b", "u3", "7")) // another incarnation's deletion
	require.Equal(t, 1, tr.Len())
	tr.Gone(KindEndpointSlice, slice("b", "u2", "7"))
	require.Zero(t, tr.Len())
}

func TestTrackerGivesUpAfterMaxAge(t *testing.T) {
	cart := exports.Key{Namespace: "shop", Name: "cart"}
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	tr := NewTracker(time.Minute)
	tr.now = func() time.Time { return now }
	tr.Wrote(cart, KindEndpointSlice, slice("a", "u1", "10"))
	stale, k := tr.Stale(cart, fakeCache{}.lookup)
	require.True(t, stale)
	require.Equal(t, ObjectKey{Kind: KindEndpointSlice, Namespace: "shop", Name: "a"}, k)
	now = now.Add(2 * time.Minute)
	stale, _ = tr.Stale(cart, fakeCache{}.lookup)
	require.False(t, stale)
	require.Equal(t, 1, tr.Expired())
	require.Zero(t, tr.Len())
}
