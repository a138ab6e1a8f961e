package etcd_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/etcd"
)

// requestTxn allocates the i-th address of pool "p" with request id,
// as an Allocate with a request id commits it.
func requestTxn(id string, i int) store.Txn {
	a := &store.Allocation{Pool: "p", Address: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}),
		Owner: decide.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: fmt.Sprint("o-", i), UID: "u"}, RequestID: id}
	return store.Txn{
		Conds: []store.Cond{
			{Kind: store.CondAllocationAbsent, Pool: "p", Address: a.Address},
			{Kind: store.CondOwnerAbsent, Pool: "p", OwnerKey: a.Owner.Key()},
			{Kind: store.CondRequestAbsent, RequestID: id},
		},
		Ops: []store.Op{
			{Kind: store.OpPutAllocation, Allocation: a},
			{Kind: store.OpPutRequest, Request: &store.Request{ID: id, Allocations: []string{"p/" + a.Address.String()}}},
		},
	}
}

func createPool(t *testing.T, s *etcd.Store) {
	t.Helper()
	_, err := s.Commit(t.Context(), store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: "p", CIDRs: []string{"10.0.0.0/16"}}}}})
	require.NoError(t, err)
}

// TestRequestRetention: a request record is kept for the retention
// period, then etcd drops it, so records cannot fill etcd's space quota.
// Once it is gone the request id is free again; the allocation it made
// stays.
func TestRequestRetention(t *testing.T) {
	e := kubetest.StartEtcd(t)
	s := open(t, e, freshPrefix())
	const retention = 2 * time.Second
	etcd.SetRequestRetention(s, retention)
	ctx := t.Context()
	createPool(t, s)

	before := time.Now()
	_, err := s.Commit(ctx, requestTxn("r1", 1))
	require.NoError(t, err)
	present := func() bool {
		_, ok, err := s.GetRequest(ctx, "r1")
		require.NoError(t, err)
		return ok
	}
	require.True(t, present())
	// Kept for at least the retention period after it was written...
	require.Never(t, func() bool { return !present() }, retention-time.Since(before), 50*time.Millisecond)
	// ...and dropped after it.
	require.Eventually(t, func() bool { return !present() }, 20*time.Second, 100*time.Millisecond)

	snap, err := s.Snapshot(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Allocations, 1, "only the request record expires")
	_, err = s.Commit(ctx, requestTxn("r1", 2))
	require.NoError(t, err, "the request id is free again")
}

// TestRequestLeases: the request records a store writes meanwhile share
// one etcd lease, whose TTL covers store.DefaultRequestRetention: a lease
// is not one more etcd write per request.
func TestRequestLeases(t *testing.T) {
	e := kubetest.StartEtcd(t)
	prefix := freshPrefix()
	s := open(t, e, prefix)
	ctx := t.Context()
	createPool(t, s)
	for i := range 20 {
		_, err := s.Commit(ctx, requestTxn(fmt.Sprint("r", i), i))
		require.NoError(t, err)
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints()})
	require.NoError(t, err)
	defer cli.Close()
	resp, err := cli.Get(ctx, prefix+"requests/", clientv3.WithPrefix())
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 20)
	lease := resp.Kvs[0].Lease
	require.NotZero(t, lease, "request records are put with a lease")
	for _, kv := range resp.Kvs {
		require.Equal(t, lease, kv.Lease, "%s", kv.Key)
	}
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(lease))
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Duration(ttl.TTL)*time.Second, store.DefaultRequestRetention)

	// Nothing else carries a lease: pools, allocations and the owner
	// index stay until they are deleted.
	all, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	require.NoError(t, err)
	for _, kv := range all.Kvs {
		if string(kv.Key) < prefix+"requests/" || string(kv.Key) >= prefix+"requests0" {
			require.Zero(t, kv.Lease, "%q", kv.Key)
		}
	}
}

// TestRequestLeaseLost: when the lease of the request records is gone
// before its time (revoked by an operator, or an etcd restored from an
// older backup), the next commit takes a new lease instead of failing.
func TestRequestLeaseLost(t *testing.T) {
	e := kubetest.StartEtcd(t)
	prefix := freshPrefix()
	s := open(t, e, prefix)
	ctx := t.Context()
	createPool(t, s)
	_, err := s.Commit(ctx, requestTxn("r1", 1))
	require.NoError(t, err)

	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints()})
	require.NoError(t, err)
	defer cli.Close()
	resp, err := cli.Get(ctx, prefix+"requests/r1")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	lost := resp.Kvs[0].Lease
	require.NotZero(t, lost)
	_, err = cli.Revoke(ctx, clientv3.LeaseID(lost))
	require.NoError(t, err)

	_, err = s.Commit(ctx, requestTxn("r2", 2))
	require.NoError(t, err)
	resp, err = cli.Get(ctx, prefix+"requests/r2")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	require.NotZero(t, resp.Kvs[0].Lease)
	require.NotEqual(t, lost, resp.Kvs[0].Lease)
}
