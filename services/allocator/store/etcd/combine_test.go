package etcd_test

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/etcd"
)

// TestCombinedCommits: allocations committed at once share etcd
// transactions, yet each succeeds or fails on its own conditions: of two
// commits racing for one address, or for one owner, or with one request
// id, exactly one wins, whether they went to etcd together or not, and
// what a commit returns is the etag of what it wrote.
func TestCombinedCommits(t *testing.T) {
	e := kubetest.StartEtcd(t) // etcd's default --max-txn-ops, as in production
	var (
		observedMu sync.Mutex
		observed   []int // commits per transaction, as the metric sees them
	)
	s, err := etcd.Open(etcd.Config{Endpoints: e.Endpoints(), Prefix: freshPrefix(), ObserveCombined: func(n int) {
		observedMu.Lock()
		observed = append(observed, n)
		observedMu.Unlock()
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	_, err = s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: "p", CIDRs: []string{"10.0.0.0/16"}}}}})
	require.NoError(t, err)

	const workers, perWorker = 32, 40
	type result struct {
		addr, owner, request string
		rev                  int64
	}
	var (
		mu   sync.Mutex
		wins []result
		errs []error
		revs = map[int64]int{}
	)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				// Workers w and w^1 race for the same address, workers w
				// and w^2 for the same owner, workers w and w^4 use the
				// same request id: every commit has a rival.
				addr := netip.AddrFrom4([4]byte{10, 0, byte(w / 2), byte(i)})
				owner := decide.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: fmt.Sprintf("o-%d-%d", w&^2, i), UID: "u"}
				request := fmt.Sprintf("r-%d-%d", w&^4, i)
				a := &store.Allocation{Pool: "p", Address: addr, Owner: owner}
				rev, err := s.Commit(ctx, store.Txn{
					Conds: []store.Cond{
						{Kind: store.CondAllocationAbsent, Pool: "p", Address: addr},
						{Kind: store.CondOwnerAbsent, Pool: "p", OwnerKey: owner.Key()},
						{Kind: store.CondRequestAbsent, RequestID: request},
					},
					Ops: []store.Op{
						{Kind: store.OpPutAllocation, Allocation: a},
						{Kind: store.OpPutRequest, Request: &store.Request{ID: request, Allocations: []string{"p/" + addr.String()}}},
					},
				})
				mu.Lock()
				switch {
				case err == nil:
					wins = append(wins, result{addr.String(), owner.Key(), request, rev})
					revs[rev]++
				case !errors.Is(err, store.ErrConflict):
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.NotEmpty(t, wins)

	seen := map[string]bool{}
	for _, w := range wins {
		for _, k := range []string{"addr " + w.addr, "owner " + w.owner, "request " + w.request} {
			require.False(t, seen[k], "%s won twice", k)
			seen[k] = true
		}
	}
	snap, err := s.Snapshot(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Allocations, len(wins))
	byAddr := map[string]int64{}
	for _, a := range snap.Allocations {
		byAddr[a.Address.String()] = a.Revision
	}
	for _, w := range wins {
		require.Equal(t, w.rev, byAddr[w.addr], "the revision a commit returned is the etag of its allocation")
		r, ok, err := s.GetRequest(ctx, w.request)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, []string{"p/" + w.addr}, r.Allocations)
	}
	shared := 0
	for _, n := range revs {
		if n > 1 {
			shared += n
		}
	}
	require.Positive(t, shared, "with %d concurrent writers some commits go to etcd together", workers)
	observedMu.Lock()
	defer observedMu.Unlock()
	sent := 0
	for _, n := range observed {
		sent += n
	}
	// The pool's creation needs no read and puts state too: it went
	// through the combiner, alone, before the workers started.
	require.Equal(t, 1+workers*perWorker, sent, "every commit went through the combiner, and was observed once")
	require.Less(t, len(observed), sent, "some transactions held several commits")
	t.Logf("%d of %d successful commits shared a revision with another", shared, len(wins))
}

// TestTooManyOps: a batch beyond etcd's --max-txn-ops fails with an error
// that names the flag, keeps etcd's own error recognisable, and writes
// nothing.
func TestTooManyOps(t *testing.T) {
	e := kubetest.StartEtcd(t) // etcd's default --max-txn-ops of 128
	s, err := etcd.Open(etcd.Config{Endpoints: e.Endpoints(), Prefix: freshPrefix()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	_, err = s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: "p", CIDRs: []string{"10.0.0.0/16"}}}}})
	require.NoError(t, err)
	before, err := s.Snapshot(ctx)
	require.NoError(t, err)

	var txn store.Txn
	for i := range 60 {
		a := &store.Allocation{Pool: "p", Address: netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}),
			Owner: decide.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: fmt.Sprint("o-", i), UID: "u"}}
		txn.Conds = append(txn.Conds, store.Cond{Kind: store.CondAllocationAbsent, Pool: "p", Address: a.Address})
		txn.Ops = append(txn.Ops, store.Op{Kind: store.OpPutAllocation, Allocation: a})
	}
	_, err = s.Commit(ctx, txn)
	require.ErrorIs(t, err, rpctypes.ErrTooManyOps)
	require.ErrorContains(t, err, "--max-txn-ops")

	after, err := s.Snapshot(ctx)
	require.NoError(t, err)
	require.Empty(t, after.Allocations)
	require.Equal(t, before.Revision, after.Revision)
}

// TestCombinedCommitsWithinMaxTxnOps: a batch that etcd takes alone is
// never refused for what it was combined with. etcd bounds a combined
// transaction by its commits plus the compares or writes of its largest
// commit, so a batch of 40 allocations (122 writes, within the default
// limit of 128) sent with more than six small commits would fail them
// all. Here a batch is committed over and over while small commits keep
// the combiner busy, and every commit must succeed: at etcd's default
// limit, and at a lower one than the store assumes.
func TestCombinedCommitsWithinMaxTxnOps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		batch int // allocations per batch commit, within the limit alone
	}{
		{"default limit", nil, 40},                           // 81 compares, 122 writes
		{"lowered limit", []string{"--max-txn-ops=100"}, 30}, // 61 compares, 92 writes
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := kubetest.StartEtcd(t, tc.args...)
			s, err := etcd.Open(etcd.Config{Endpoints: e.Endpoints(), Prefix: freshPrefix()})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			ctx := t.Context()
			_, err = s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: "p", CIDRs: []string{"10.0.0.0/8"}}}}})
			require.NoError(t, err)

			var next atomic.Int64 // numbers addresses, owners and requests apart
			alloc := func(txn *store.Txn) string {
				i := next.Add(1)
				a := &store.Allocation{Pool: "p", Address: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}),
					Owner: decide.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: fmt.Sprint("o-", i), UID: "u"}}
				txn.Conds = append(txn.Conds,
					store.Cond{Kind: store.CondAllocationAbsent, Pool: "p", Address: a.Address},
					store.Cond{Kind: store.CondOwnerAbsent, Pool: "p", OwnerKey: a.Owner.Key()})
				txn.Ops = append(txn.Ops, store.Op{Kind: store.OpPutAllocation, Allocation: a})
				return "p/" + a.Address.String()
			}
			withRequest := func(txn store.Txn, keys []string) store.Txn {
				id := fmt.Sprint("r-", next.Add(1))
				txn.Conds = append(txn.Conds, store.Cond{Kind: store.CondRequestAbsent, RequestID: id})
				txn.Ops = append(txn.Ops, store.Op{Kind: store.OpPutRequest, Request: &store.Request{ID: id, Allocations: keys}})
				return txn
			}

			const batches, smallCommitters = 20, 16
			var (
				mu      sync.Mutex
				errs    []error
				commits int
			)
			record := func(err error) {
				mu.Lock()
				defer mu.Unlock()
				commits++
				if err != nil {
					errs = append(errs, err)
				}
			}
			done := make(chan struct{})
			var wg sync.WaitGroup
			for range smallCommitters {
				wg.Go(func() {
					for {
						select {
						case <-done:
							return
						default:
						}
						var txn store.Txn
						key := alloc(&txn)
						_, err := s.Commit(ctx, withRequest(txn, []string{key}))
						record(err)
					}
				})
			}
			for range batches {
				var txn store.Txn
				var keys []string
				for range tc.batch {
					keys = append(keys, alloc(&txn))
				}
				_, err := s.Commit(ctx, withRequest(txn, keys))
				record(err)
			}
			close(done)
			wg.Wait()
			require.Empty(t, errs, "of %d commits", commits)
		})
	}
}
