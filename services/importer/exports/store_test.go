package exports

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// recorder collects notified keys.
type recorder struct {
	mu   sync.Mutex
	keys []Key
}

func (r *recorder) notify(ch Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, ch.Key)
}

func (r *recorder) take() []Key {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.keys
	r.keys = nil
	return out
}

func eps(ns, name, cluster string, addrs ...string) *membershipv1.ServiceEndpoints {
	g := &membershipv1.EndpointGroup{AddressType: membershipv1.AddressType_ADDRESS_TYPE_IPV4,
		Ports: []*membershipv1.EndpointPort{{Name: "http", Port: 8080}}}
	for _, a := range addrs {
		g.Endpoints = append(g.Endpoints, &membershipv1.Endpoint{Addresses: []string{a},
			Conditions: &membershipv1.EndpointConditions{Ready: true, Serving: true}})
	}
	return &membershipv1.ServiceEndpoints{
		Service: "namespaces/" + ns + "/services/" + name,
		Cluster: cluster,
		Ports:   []*membershipv1.ServicePort{{Name: "http", Port: 80}},
		Groups:  []*membershipv1.EndpointGroup{g},
		Export:  &membershipv1.ExportInfo{Exported: true, Type: membershipv1.ServiceType_SERVICE_TYPE_CLUSTER_SET_IP},
	}
}

func TestParseServiceName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want Key
		ok   bool
	}{
		{"namespaces/shop/services/cart", Key{"shop", "cart"}, true},
		{"namespaces/shop/services/Cart", Key{}, false},
		{"namespaces/shop/pods/cart", Key{}, false},
		{"namespaces/shop/services/1cart", Key{}, false},
		{"namespaces/Shop/services/cart", Key{}, false},
		{"namespaces//services/cart", Key{}, false},
		{"shop/cart", Key{}, false},
		{"namespaces/shop/services/cart/x", Key{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseServiceName(tc.name)
			if !tc.ok {
				require.ErrorIs(t, err, ErrInvalidName)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.name, got.ServiceName())
		})
	}
}

func TestUpsertNotifiesOnlyOnChange(t *testing.T) {
	var rec recorder
	now := t0
	s := New(rec.notify, WithClock(func() time.Time { return now }))
	key := Key{"shop", "cart"}

	k, changed, err := s.Upsert("east", OriginWatch, Update{Endpoints: eps("shop", "cart", "east", "10.0.0.1"), Revision: 3, ObserveTime: t0.Add(-time.Second)})
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, key, k)
	require.Equal(t, []Key{key}, rec.take())

	// The same set again (a resumed stream repeating itself) changes
	// nothing but the revision.
	now = t0.Add(time.Minute)
	_, changed, err = s.Upsert("east", OriginWatch, Update{Endpoints: eps("shop", "cart", "east", "10.0.0.1"), Revision: 4})
	require.NoError(t, err)
	require.False(t, changed)
	require.Empty(t, rec.take())
	svc, ok := s.Get(key)
	require.True(t, ok)
	e, ok := svc.Export("east")
	require.True(t, ok)
	require.EqualValues(t, 4, e.Revision)
	require.EqualValues(t, 1, e.Generation)
	require.Equal(t, t0.Add(-time.Second), e.ObserveTime)
	require.Equal(t, now, e.ReceiveTime)

	_, changed, err = s.Upsert("east", OriginWatch, Update{Endpoints: eps("shop", "cart", "east", "10.0.0.1", "10.0.0.2"), Revision: 5})
	require.NoError(t, err)
	require.True(t, changed)
	svc, _ = s.Get(key)
	require.EqualValues(t, 2, svc.Exports[0].Generation)
	require.Equal(t, now, svc.Exports[0].ObserveTime, "an unknown observation time is the receive time")
}

func TestUpsertRejectsBadInput(t *testing.T) {
	s := New(nil)
	_, _, err := s.Upsert("east", OriginWatch, Update{})
	require.ErrorIs(t, err, ErrNoEndpoints)
	_, _, err = s.Upsert("east", OriginWatch, Update{Endpoints: &membershipv1.ServiceEndpoints{Service: "bad"}})
	require.ErrorIs(t, err, ErrInvalidName)
}

func TestUnexportedUpsertWithdraws(t *testing.T) {
	var rec recorder
	s := New(rec.notify)
	_, _, err := s.Upsert("east", OriginWatch, Update{Endpoints: eps("shop", "cart", "east", "10.0.0.1")})
	require.NoError(t, err)
	rec.take()
	unexported := eps("shop", "cart", "east", "10.0.0.1")
	unexported.Export.Exported = false
	_, changed, err := s.Upsert("east", OriginWatch, Update{Endpoints: unexported})
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, []Key{{"shop", "cart"}}, rec.take())
	_, ok := s.Get(Key{"shop", "cart"})
	require.False(t, ok)
	require.Empty(t, s.Keys())
}

func TestReplaceWithdrawsWhatTheSnapshotLacks(t *testing.T) {
	var rec recorder
	s := New(rec.notify)
	s.AddSource("east")
	for _, name := range []string{"a", "b", "c"} {
		_, _, err := s.Upsert("east", OriginWatch, Update{Endpoints: eps("shop", name, "east", "10.0.0.1")})
		require.NoError(t, err)
	}
	// Another cluster's export of b and a pushed export of east's own
	// name are not east's watch contributions: the snapshot leaves them.
	_, _, err := s.Upsert("west", OriginWatch, Update{Endpoints: eps("shop", "b", "west", "10.1.0.1")})
	require.NoError(t, err)
	rec.take()
	st, _ := s.Source("east")
	require.False(t, st.Synced)

	n, err := s.Replace("east", OriginWatch, []Update{
		{Endpoints: eps("shop", "a", "east", "10.0.0.1")},              // unchanged
		{Endpoints: eps("shop", "c", "east", "10.0.0.9")},              // changed
		{Endpoints: eps("shop", "d", "east", "10.0.0.1")},              // new
		{Endpoints: &membershipv1.ServiceEndpoints{Service: "broken"}}, // skipped
	})
	require.ErrorIs(t, err, ErrInvalidName)
	require.Equal(t, 3, n)
	require.ElementsMatch(t, []Key{{"shop", "b"}, {"shop", "c"}, {"shop", "d"}}, rec.take())
	require.Equal(t, []Key{{"shop", "a"}, {"shop", "b"}, {"shop", "c"}, {"shop", "d"}}, s.Keys())
	b, ok := s.Get(Key{"shop", "b"})
	require.True(t, ok)
	require.Len(t, b.Exports, 1)
	require.Equal(t, "west", b.Exports[0].Cluster)
	st, _ = s.Source("east")
	require.True(t, st.Synced)

	// An empty snapshot withdraws everything the source exported.
	n, err = s.Replace("east", OriginWatch, nil)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, []Key{{"shop", "b"}}, s.Keys())
	require.Equal(t, []string{"west"}, s.Clusters(OriginWatch))
}

// TestChangesCarryObservationAndTrace: every change reaches notify with
// its cluster, observation time and trace context; a withdrawal too, and
// the service is gone once its last export is.
func TestChangesCarryObservationAndTrace(t *testing.T) {
	var got []Change
	now := t0.Add(time.Hour)
	s := New(func(ch Change) { got = append(got, ch) }, WithClock(func() time.Time { return now }))
	key := Key{"shop", "cart"}
	tc := map[string]string{"traceparent": "a"}
	_, _, err := s.Upsert("east", OriginWatch, Update{Endpoints: eps("shop", "cart", "east", "10.0.0.1"), ObserveTime: t0, TraceContext: tc})
	require.NoError(t, err)
	_, _, err = s.Upsert("east", OriginWatch, Update{Endpoints: eps("shop", "cart", "east", "10.0.0.1"), ObserveTime: t0.Add(time.Second)})
	require.NoError(t, err)
	_, err = s.Replace("west", OriginWatch, []Update{{Endpoints: eps("shop", "cart", "west", "10.1.0.1")}})
	require.NoError(t, err)
	require.True(t, s.Withdraw("east", key, t0.Add(2*time.Second), nil))
	_, err = s.Replace("west", OriginWatch, nil)
	require.NoError(t, err)
	require.Equal(t, []Change{
		{Key: key, Cluster: "east", Observed: t0, TraceContext: tc},
		{Key: key, Cluster: "west", Observed: now},
		{Key: key, Cluster: "east", Observed: t0.Add(2 * time.Second)},
		{Key: key, Cluster: "west", Observed: now},
	}, got, "an unchanged endpoint set is no change")
	_, ok := s.Get(key)
	require.False(t, ok)
	require.Empty(t, s.Keys())
	require.False(t, s.Withdraw("west", key, time.Time{}, nil), "nothing left to withdraw")
}

func TestSourceState(t *testing.T) {
	s := New(nil)
	s.AddSource("east")
	require.True(t, s.IsSource("east"))
	require.False(t, s.IsSource("west"))
	s.SetConnected("east", true, t0)
	s.Heard("east", t0.Add(time.Second))
	s.Heard("east", t0) // older: ignored
	st, ok := s.Source("east")
	require.True(t, ok)
	require.Equal(t, SourceState{Connected: true, LastHeard: t0.Add(time.Second)}, st)
	s.SetConnected("east", false, t0.Add(2*time.Second))
	require.Equal(t, map[string]SourceState{"east": {Connected: false, LastHeard: t0.Add(2 * time.Second)}}, s.Sources())
	s.SetConnected("west", true, t0) // not a source: ignored
	_, ok = s.Source("west")
	require.False(t, ok)
}

// TestForgetDropsOnlyThatOrigin: forgetting pushes leaves the watched
// exports and notifies nothing.
func TestForgetDropsOnlyThatOrigin(t *testing.T) {
	var rec recorder
	s := New(rec.notify)
	cart, shop := Key{"shop", "cart"}, Key{"shop", "shop"}
	_, _, err := s.Upsert("east", OriginWatch, Update{Endpoints: eps("shop", "cart", "east", "10.0.0.1")})
	require.NoError(t, err)
	_, _, err = s.Upsert("vm", OriginPush, Update{Endpoints: eps("shop", "cart", "vm", "10.0.0.2")})
	require.NoError(t, err)
	_, _, err = s.Upsert("vm", OriginPush, Update{Endpoints: eps("shop", "shop", "vm", "10.0.0.3")})
	require.NoError(t, err)
	rec.take()

	require.Equal(t, 2, s.Forget(OriginPush))
	require.Empty(t, rec.take(), "nothing to reconcile: the term that would act on it has ended")
	svc, ok := s.Get(cart)
	require.True(t, ok)
	require.Len(t, svc.Exports, 1)
	require.Equal(t, "east", svc.Exports[0].Cluster)
	_, ok = s.Get(shop)
	require.False(t, ok)
	require.Equal(t, []Key{cart}, s.Keys())
	require.Empty(t, s.Clusters(OriginPush))
	require.Zero(t, s.Forget(OriginPush))
}
