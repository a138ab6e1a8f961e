package etcd_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/internal/storetest"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/etcd"
	"github.com/plexusnet/plexus/services/allocator/store/internal/record"
)

// maxTxnOps lets the suite's bulk commit (500 allocations in one txn)
// through; etcd's default of 128 is documented in the package.
const maxTxnOps = "--max-txn-ops=4096"

var prefixes atomic.Int64

// freshPrefix gives every test an empty key space of its own on a shared
// etcd.
func freshPrefix() string { return fmt.Sprintf("/test-%d/", prefixes.Add(1)) }

func open(t *testing.T, e *kubetest.Etcd, prefix string) *etcd.Store {
	return openWith(t, e, etcd.Config{Prefix: prefix})
}

func openWith(t *testing.T, e *kubetest.Etcd, cfg etcd.Config) *etcd.Store {
	t.Helper()
	cfg.Endpoints = e.Endpoints()
	s, err := etcd.Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestConformance runs the suite with watches that share the store's etcd
// watch, with a history small enough that the suite's slow watcher is cut
// off, and with watches that each have an etcd watch of their own.
func TestConformance(t *testing.T) {
	e := kubetest.StartEtcd(t, maxTxnOps)
	for _, c := range []struct {
		name    string
		history int
		opts    []storetest.Option
	}{
		{"SharedWatch", 256, []storetest.Option{storetest.WithHistory(256)}},
		{"OwnWatches", -1, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			open := func(t *testing.T, prefix string) *etcd.Store {
				return openWith(t, e, etcd.Config{Prefix: prefix, History: c.history})
			}
			storetest.Run(t, func(t *testing.T) store.Store {
				return open(t, freshPrefix())
			}, append(c.opts, storetest.WithReopen(func(t *testing.T, s store.Store) store.Store {
				require.NoError(t, s.Close())
				return open(t, s.(*etcd.Store).Prefix())
			}), storetest.WithSharedRevisions(), storetest.WithPastRevisions(), storetest.WithRequestRetention(2*time.Second, func(t *testing.T) store.Store {
				// An etcd of its own: the deletes of its expiring leases
				// would take revisions of the shared one while later
				// tests count them.
				s := openWith(t, kubetest.StartEtcd(t, maxTxnOps), etcd.Config{Prefix: freshPrefix(), History: c.history})
				etcd.SetRequestRetention(s, 2*time.Second)
				return s
			}))...)
		})
	}
}

// TestPrefixesAreIndependent: two installations on one etcd see nothing
// of each other, and a pool deletion in one leaves the other's pool of
// the same name alone.
func TestPrefixesAreIndependent(t *testing.T) {
	e := kubetest.StartEtcd(t)
	a, b := open(t, e, "/site-a"), open(t, e, "/site-a-b/")
	require.Equal(t, "/site-a/", a.Prefix())
	ctx := t.Context()
	pool := &store.Pool{ID: "p", CIDRs: []string{"10.0.0.0/24"}}
	alloc := &store.Allocation{Pool: "p", Address: netip.MustParseAddr("10.0.0.1"), Owner: decide.Owner{Kind: "Pod", Name: "x"}}
	for _, s := range []*etcd.Store{a, b} {
		_, err := s.Commit(ctx, store.Txn{
			Conds: []store.Cond{{Kind: store.CondPoolAbsent, Pool: "p"}, {Kind: store.CondAllocationAbsent, Pool: "p", Address: alloc.Address}},
			Ops:   []store.Op{{Kind: store.OpPutPool, Pool: pool}, {Kind: store.OpPutAllocation, Allocation: alloc}},
		})
		require.NoError(t, err)
	}
	ch, err := storetest.Watch(ctx, b, 0)
	require.NoError(t, err)
	_, err = a.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpDeletePool, PoolID: "p"}}})
	require.NoError(t, err)

	snapA, err := a.Snapshot(ctx)
	require.NoError(t, err)
	require.Empty(t, snapA.Pools)
	require.Empty(t, snapA.Allocations)
	snapB, err := b.Snapshot(ctx)
	require.NoError(t, err)
	require.Len(t, snapB.Pools, 1)
	require.Len(t, snapB.Allocations, 1)

	// b's watcher gets b's two events and nothing of a's deletion.
	for _, want := range []store.EventType{store.EventPutPool, store.EventPutAllocation} {
		select {
		case ev := <-ch:
			require.NoError(t, ev.Err)
			require.Equal(t, want, ev.Type)
		case <-time.After(5 * time.Second):
			require.FailNow(t, "no event")
		}
	}
	select {
	case ev := <-ch:
		require.FailNow(t, "event of another prefix", "%+v", ev)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestKeyLayout pins the documented layout, which operators rely on when
// they look at etcd directly.
func TestKeyLayout(t *testing.T) {
	e := kubetest.StartEtcd(t)
	s := open(t, e, "/plexus/")
	ctx := t.Context()
	a := &store.Allocation{Pool: "p", Address: netip.MustParseAddr("10.0.0.1"), Owner: decide.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: "x", UID: "u"}}
	rev, err := s.Commit(ctx, store.Txn{Ops: []store.Op{
		{Kind: store.OpPutPool, Pool: &store.Pool{ID: "p", CIDRs: []string{"10.0.0.0/24"}}},
		{Kind: store.OpPutAllocation, Allocation: a},
		{Kind: store.OpPutQuarantine, Quarantine: &store.Quarantine{Pool: "p", Address: netip.MustParseAddr("2001:db8::1"), Until: time.Unix(0, 0)}},
		{Kind: store.OpPutRequest, Request: &store.Request{ID: "r1", Allocations: []string{"p/10.0.0.1"}}},
	}})
	require.NoError(t, err)

	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints()})
	require.NoError(t, err)
	defer cli.Close()
	resp, err := cli.Get(ctx, "/plexus/", clientv3.WithPrefix())
	require.NoError(t, err)
	var got []string
	for _, kv := range resp.Kvs {
		got = append(got, string(kv.Key))
		require.Equal(t, rev, kv.ModRevision)
	}
	require.Equal(t, []string{
		"/plexus/owners/p\x00c/Pod/ns/x\x004" + "0a000001",
		"/plexus/pools-changed",
		"/plexus/requests/r1",
		"/plexus/rev/00",
		"/plexus/state/allocs/p\x004" + "0a000001",
		"/plexus/state/pools/p",
		"/plexus/state/quarantine/p\x006" + "20010db8000000000000000000000001",
	}, got, "a commit that puts state writes no tick")
	stored, err := record.DecodeRecord(resp.Kvs[4].Value)
	require.NoError(t, err, "an allocation's value is package record's")
	require.Equal(t, *a, stored, "its revision is not stored: it is the key's mod revision")

	// A commit that puts nothing under state/ (here: it frees the
	// address) puts the tick, so a watch sees it.
	ch, err := storetest.Watch(ctx, s, rev)
	require.NoError(t, err)
	rev, err = s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpDeleteAllocation, PoolID: "p", Address: a.Address}}})
	require.NoError(t, err)
	tick, err := cli.Get(ctx, "/plexus/state/tick")
	require.NoError(t, err)
	require.Len(t, tick.Kvs, 1)
	require.Equal(t, rev, tick.Kvs[0].ModRevision)
	ev := <-ch
	require.NoError(t, ev.Err)
	require.Equal(t, store.EventDeleteAllocation, ev.Type, "the tick makes no event")
	require.Equal(t, rev, ev.Revision)
}

// TestWatchSurvivesRestart: a watch goes on across an etcd restart,
// without a gap, and commits made before the restart are still there.
func TestWatchSurvivesRestart(t *testing.T) {
	e := kubetest.StartEtcd(t)
	s := open(t, e, freshPrefix())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	put := func(id string) int64 {
		t.Helper()
		rev, err := s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: id}}}})
		require.NoError(t, err)
		return rev
	}
	ch, err := storetest.Watch(ctx, s, put("before")-1)
	require.NoError(t, err)
	require.NoError(t, e.Stop())
	require.NoError(t, e.Start(ctx))
	put("after")
	for _, want := range []string{"before", "after"} {
		select {
		case ev := <-ch:
			require.NoError(t, ev.Err)
			require.Equal(t, want, ev.Pool.ID)
		case <-ctx.Done():
			require.FailNow(t, "no event for pool "+want)
		}
	}
	snap, err := s.Snapshot(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Pools, 2)
}

// TestReady follows etcd going away and coming back.
func TestReady(t *testing.T) {
	e := kubetest.StartEtcd(t)
	s := open(t, e, freshPrefix())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, s.Ready(ctx))
	require.NoError(t, e.Stop())
	short, stop := context.WithTimeout(ctx, time.Second)
	require.Error(t, s.Ready(short))
	stop()
	require.NoError(t, e.Start(ctx))
	require.Eventually(t, func() bool {
		c, stop := context.WithTimeout(ctx, time.Second)
		defer stop()
		return s.Ready(c) == nil
	}, 20*time.Second, 100*time.Millisecond)
}

func TestOpenErrors(t *testing.T) {
	_, err := etcd.Open(etcd.Config{})
	require.ErrorContains(t, err, "no endpoints")
	_, err = etcd.Open(etcd.Config{Endpoints: []string{""}})
	require.ErrorContains(t, err, "empty endpoint")
}

// TestPoolChangesPutTheirMarker: every commit that puts or deletes a pool,
// and only those, puts pools-changed, once however many pools it changes.
func TestPoolChangesPutTheirMarker(t *testing.T) {
	e := kubetest.StartEtcd(t)
	prefix := freshPrefix()
	s := open(t, e, prefix)
	ctx := t.Context()
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints()})
	require.NoError(t, err)
	defer cli.Close()
	changed := func() int64 {
		resp, err := cli.Get(ctx, prefix+"pools-changed")
		require.NoError(t, err)
		if len(resp.Kvs) == 0 {
			return 0
		}
		return resp.Kvs[0].ModRevision
	}
	require.Zero(t, changed())

	created, err := s.Commit(ctx, store.Txn{Ops: []store.Op{
		{Kind: store.OpPutPool, Pool: &store.Pool{ID: "p", CIDRs: []string{"10.0.0.0/24"}}},
		{Kind: store.OpPutPool, Pool: &store.Pool{ID: "q", CIDRs: []string{"10.0.1.0/24"}}},
	}})
	require.NoError(t, err)
	require.Equal(t, created, changed())

	_, err = s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpPutAllocation, Allocation: &store.Allocation{
		Pool: "p", Address: netip.MustParseAddr("10.0.0.1"), Owner: decide.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: "x", UID: "u"}}}}})
	require.NoError(t, err)
	require.Equal(t, created, changed(), "an allocation changes no pool")

	deleted, err := s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpDeletePool, PoolID: "q"}}})
	require.NoError(t, err)
	require.Equal(t, deleted, changed())
}
