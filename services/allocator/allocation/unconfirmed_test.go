package allocation_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/etcd"
)

// unconfirming is an etcd store whose next commit is applied but
// reported as not confirmed, as etcd does when it gives up waiting for
// the apply of a proposal ("request timed out").
type unconfirming struct {
	*etcd.Store
	next *atomic.Bool
}

func (u unconfirming) Commit(ctx context.Context, txn store.Txn) (int64, error) {
	rev, err := u.Store.Commit(ctx, txn)
	if err == nil && u.next.CompareAndSwap(true, false) {
		return 0, fmt.Errorf("commit: %w: etcdserver: request timed out", store.ErrUnconfirmed)
	}
	return rev, err
}

// TestUnconfirmedCommitIsUnavailable: a commit the store could not
// confirm is the store's trouble, not the request's (ErrStoreUnavailable,
// which clients retry), and the retry with the same request id gets the
// allocation the first attempt made, which the replica learns of from
// its watch.
func TestUnconfirmedCommitIsUnavailable(t *testing.T) {
	next := &atomic.Bool{}
	rs, _ := replicasOf(t, 1, func(_ int, st store.Store) store.Store {
		return unconfirming{Store: st.(*etcd.Store), next: next}
	})
	svc := rs[0]
	ctx := t.Context()
	_, err := svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.0.0.0/29"}})
	require.NoError(t, err)

	next.Store(true)
	req := decide.Request{Pool: "p", Owner: owner("x"), RequestID: "req-x"}
	_, _, err = svc.Allocate(ctx, req)
	require.ErrorIs(t, err, decide.ErrStoreUnavailable)
	require.ErrorIs(t, err, store.ErrUnconfirmed)

	a, _, err := svc.Allocate(ctx, req)
	require.NoError(t, err)
	all := allocations(t, svc, "p")
	require.Len(t, all, 1, "one allocation, made by the first attempt")
	require.Equal(t, "x", all[a.Address])
}
