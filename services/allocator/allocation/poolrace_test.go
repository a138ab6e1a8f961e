package allocation_test

import (
	"context"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/allocation"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/etcd"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
)

// gate holds the first armed commit that writes an op of kind, before it
// reaches the store or after, until open is closed.
type gate struct {
	kind  store.OpKind
	after bool
	armed atomic.Bool
	held  chan struct{}
	open  chan struct{}
}

func newGate(kind store.OpKind, after bool) *gate {
	return &gate{kind: kind, after: after, held: make(chan struct{}), open: make(chan struct{})}
}

func (g *gate) pass(txn store.Txn, commit func() (int64, error)) (int64, error) {
	hold := slices.ContainsFunc(txn.Ops, func(op store.Op) bool { return op.Kind == g.kind }) && g.armed.CompareAndSwap(true, false)
	if !hold {
		return commit()
	}
	var (
		rev int64
		err error
	)
	if g.after {
		rev, err = commit()
	}
	close(g.held)
	<-g.open
	if !g.after {
		rev, err = commit()
	}
	return rev, err
}

type gatedEtcd struct {
	*etcd.Store
	g *gate
}

func (s gatedEtcd) Commit(ctx context.Context, txn store.Txn) (int64, error) {
	return s.g.pass(txn, func() (int64, error) { return s.Store.Commit(ctx, txn) })
}

type gatedStore struct {
	store.Store
	g *gate
}

func (s gatedStore) Commit(ctx context.Context, txn store.Txn) (int64, error) {
	return s.g.pass(txn, func() (int64, error) { return s.Store.Commit(ctx, txn) })
}

// gatedReplicas starts two replicas on one etcd; the commits of replica
// i pass through g.
func gatedReplicas(t *testing.T, i int, g *gate) (a, b *allocation.Allocator) {
	t.Helper()
	rs, _ := replicasOf(t, 2, func(n int, st store.Store) store.Store {
		if n == i {
			return gatedEtcd{Store: st.(*etcd.Store), g: g}
		}
		return st
	})
	return rs[0], rs[1]
}

// TestOverlappingPoolsThroughTwoReplicas: b checks a new pool against the
// pools it knows and, before its commit lands, a creates an overlapping
// pool. b's commit must not land: b tells the overlap instead.
func TestOverlappingPoolsThroughTwoReplicas(t *testing.T) {
	ctx := context.Background()
	g := newGate(store.OpPutPool, false)
	a, b := gatedReplicas(t, 1, g)

	g.armed.Store(true)
	errc := make(chan error, 1)
	go func() {
		_, err := b.CreatePool(ctx, "narrow", decide.PoolSpec{CIDRs: []string{"10.0.0.0/25"}})
		errc <- err
	}()
	<-g.held
	_, err := a.CreatePool(ctx, "wide", decide.PoolSpec{CIDRs: []string{"10.0.0.0/24"}})
	require.NoError(t, err)
	close(g.open)
	require.ErrorIs(t, <-errc, decide.ErrPoolOverlap)

	for _, r := range []*allocation.Allocator{a, b} {
		require.NoError(t, r.Sync(ctx))
		_, err := r.GetPool("narrow")
		require.ErrorIs(t, err, decide.ErrPoolNotFound)
	}

	// Pools that do not overlap are created through both at once as
	// before.
	g2 := newGate(store.OpPutPool, false)
	a, b = gatedReplicas(t, 1, g2)
	g2.armed.Store(true)
	go func() {
		_, err := b.CreatePool(ctx, "one", decide.PoolSpec{CIDRs: []string{"10.1.0.0/24"}})
		errc <- err
	}()
	<-g2.held
	_, err = a.CreatePool(ctx, "two", decide.PoolSpec{CIDRs: []string{"10.2.0.0/24"}})
	require.NoError(t, err)
	close(g2.open)
	require.NoError(t, <-errc, "a conflict on another pool is decided again")
}

// TestPoolUpdateRacesAnAllocation: a has checked that the CIDR its update
// removes holds no allocation and, before its commit lands, b allocates
// there. The update must not land: a tells that the CIDR is in use, and
// the allocation stays inside the pool.
func TestPoolUpdateRacesAnAllocation(t *testing.T) {
	ctx := context.Background()
	g := newGate(store.OpPutPool, false)
	a, b := gatedReplicas(t, 0, g)
	_, err := a.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.1.0.0/24"}})
	require.NoError(t, err)
	require.NoError(t, b.Sync(ctx))

	g.armed.Store(true)
	errc := make(chan error, 1)
	go func() {
		_, _, err := a.UpdatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.1.0.0/25"}}, decide.UpdateMask{CIDRs: true}, "", false)
		errc <- err
	}()
	<-g.held
	addr := netip.MustParseAddr("10.1.0.200")
	_, _, err = b.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x"), Address: addr})
	require.NoError(t, err)
	close(g.open)
	require.ErrorIs(t, <-errc, decide.ErrCIDRInUse)

	require.NoError(t, a.Sync(ctx))
	v, err := a.GetPool("p")
	require.NoError(t, err)
	require.Equal(t, []string{"10.1.0.0/24"}, v.CIDRs)
	require.Zero(t, v.Stats.OutOfRange)
	_, err = a.GetAllocation("p", addr)
	require.NoError(t, err)
}

// TestPoolUpdateRacesAnAllocationInFlight: alone on its store, the
// allocator commits an allocation in a CIDR that an update removes, and
// the update looks at the pool before the allocation is installed. The
// store refuses the update, so the allocation never ends up outside.
func TestPoolUpdateRacesAnAllocationInFlight(t *testing.T) {
	ctx := context.Background()
	g := newGate(store.OpPutAllocation, true)
	svc, _ := newService(t, gatedStore{Store: memory.New(), g: g})
	_, err := svc.CreatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.1.0.0/24"}})
	require.NoError(t, err)

	g.armed.Store(true)
	addr := netip.MustParseAddr("10.1.0.200")
	errc := make(chan error, 1)
	go func() {
		_, _, err := svc.Allocate(ctx, decide.Request{Pool: "p", Owner: owner("x"), Address: addr})
		errc <- err
	}()
	<-g.held
	_, _, err = svc.UpdatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.1.0.0/25"}}, decide.UpdateMask{CIDRs: true}, "", false)
	require.ErrorIs(t, err, decide.ErrConflict)
	close(g.open)
	require.NoError(t, <-errc)

	v, err := svc.GetPool("p")
	require.NoError(t, err)
	require.Equal(t, []string{"10.1.0.0/24"}, v.CIDRs)
	require.Zero(t, v.Stats.OutOfRange)
	_, _, err = svc.UpdatePool(ctx, "p", decide.PoolSpec{CIDRs: []string{"10.1.0.0/25"}}, decide.UpdateMask{CIDRs: true}, "", false)
	require.ErrorIs(t, err, decide.ErrCIDRInUse, "once the allocation is in")
}
