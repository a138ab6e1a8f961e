package upgrade

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// boltAllocator runs b's allocator on the bolt file path.
func boltAllocator(t *testing.T, b *Build, path, tokens string) *proctest.Proc {
	t.Helper()
	return proctest.Start(t, b.Allocator, []string{"--store", "bolt:" + path, "--auth-tokens", tokens, "--log-format", "json"})
}

// boltWrites is what one build does to the store: allocate for owners
// of several clusters in every pool, a clusterset VIP as a member
// cluster's importer, an address asked for by value, some with a
// request id, and release some of them.
type boltWrites struct {
	round string
	// acked are the allocations the build acknowledged and did not
	// release; released the addresses it released.
	acked    map[string]*allocatorv1.Allocation
	released []*allocatorv1.Allocation
}

func (w *boltWrites) run(ctx context.Context, t *testing.T, fleet, vipCaller allocatorv1.AllocatorServiceClient, explicit map[string]string) {
	t.Helper()
	w.acked = map[string]*allocatorv1.Allocation{}
	for i, cluster := range []string{"a", "b", "c"} {
		for _, pool := range []string{"pools/v4", "pools/v6"} {
			for j := range 4 {
				name := fmt.Sprintf("%s-%s-%d", w.round, cluster, j)
				req := &allocatorv1.AllocateRequest{Pool: pool, Owner: &allocatorv1.Owner{
					Cluster: cluster, Kind: []string{"Pod", "ExternalWorkload"}[j%2], Namespace: "ns" + cluster, Name: name, Uid: "uid-" + name}}
				if j == 0 {
					req.RequestId = "req-" + pool + "-" + name
				}
				if addr, ok := explicit[pool]; ok && i == 0 && j == 1 {
					req.Address = addr
				}
				resp, err := fleet.Allocate(ctx, req)
				require.NoError(t, err, "allocate %s in %s", name, pool)
				require.True(t, resp.GetCreated())
				w.acked[resp.GetAllocation().GetName()] = resp.GetAllocation()
			}
		}
	}
	// A clusterset VIP, made by a member cluster's importer: it names
	// that cluster as its creator (record encoding 2).
	vip, err := vipCaller.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/vips",
		Owner: &allocatorv1.Owner{Kind: "ClusterSetService", Namespace: "shop", Name: "web-" + w.round, Uid: "uid-web-" + w.round}})
	require.NoError(t, err)
	require.NotEmpty(t, vip.GetAllocation().GetCreatorCluster(), "the VIP names the cluster that created it")
	w.acked[vip.GetAllocation().GetName()] = vip.GetAllocation()
	// Release every third, by name and uid (safe to repeat).
	n := 0
	for _, name := range sortedKeys(w.acked) {
		a := w.acked[name]
		if n++; n%3 != 0 || a.GetPool() == "pools/vips" {
			continue
		}
		_, err := fleet.Release(ctx, &allocatorv1.ReleaseRequest{Name: name, OwnerUid: a.GetOwner().GetUid()})
		require.NoError(t, err, "release %s", name)
		w.released = append(w.released, a)
		delete(w.acked, name)
	}
}

// check asserts that view holds every allocation w acknowledged and kept,
// and none it released; and that a released address of a pool with a
// reuse delay is not handed out again.
func (w *boltWrites) check(ctx context.Context, t *testing.T, fleet allocatorv1.AllocatorServiceClient, view storeView, by string) {
	t.Helper()
	for name, a := range w.acked {
		got, ok := view.allocations[name]
		require.True(t, ok, "%s: %s's allocation %s is gone", by, w.round, name)
		require.Equal(t, mustMarshal(t, a), got, "%s: %s's allocation %s differs from what was acknowledged", by, w.round, name)
	}
	for _, a := range w.released {
		if b, ok := view.allocations[a.GetName()]; ok {
			var now allocatorv1.Allocation
			require.NoError(t, proto.Unmarshal(b, &now))
			require.NotEqual(t, a.GetOwner().GetUid(), now.GetOwner().GetUid(), "%s: %s released %s, and it is back", by, w.round, a.GetName())
			require.NotEqual(t, "pools/v4", a.GetPool(), "%s: %s is handed out again within its reuse delay", by, a.GetName())
		}
		if a.GetPool() != "pools/v4" {
			continue
		}
		_, err := fleet.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: a.GetPool(), Address: a.GetAddress(),
			Owner: &allocatorv1.Owner{Cluster: "a", Kind: "Pod", Namespace: "nsa", Name: "reuser", Uid: "uid-reuser"}})
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "%s: %s is in its reuse delay: %v", by, a.GetAddress(), err)
		require.Equal(t, "ADDRESS_IN_REUSE_DELAY", apierr.Reason(err))
	}
}

// TestBoltRoundTrip: the release's allocator writes a bolt store; this
// tree's opens it and serves every allocation and pool byte for byte
// (request ids and reuse delays included), writes more, and the release
// opens the file again after the rollback and serves exactly what this
// tree left.
func TestBoltRoundTrip(t *testing.T) {
	rel, cur := release(t), current(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "plexus-allocator.db")
	tokens := tokensFile(t)

	// The release writes.
	old := boltAllocator(t, rel, path, tokens)
	fleet := allocClient(t, old.GRPCAddr, tokenFleet)
	for _, p := range []*allocatorv1.CreatePoolRequest{
		{PoolId: "v4", Pool: &allocatorv1.Pool{Cidrs: []string{"10.20.0.0/24", "10.21.0.0/28"}, Reserved: []string{"10.20.0.1-10.20.0.9"},
			ReuseDelay: durationpb.New(time.Hour), Labels: map[string]string{"team": "net"}, ClusterQuota: 100}},
		{PoolId: "v6", Pool: &allocatorv1.Pool{Cidrs: []string{"fd00:20::/120"}}},
		{PoolId: "vips", Pool: &allocatorv1.Pool{Cidrs: []string{"10.30.0.0/28"}}},
	} {
		_, err := fleet.CreatePool(ctx, p)
		require.NoError(t, err, "create pool %s", p.PoolId)
	}
	first := &boltWrites{round: "release"}
	first.run(ctx, t, fleet, allocClient(t, old.GRPCAddr, tokenClusterA), map[string]string{"pools/v4": "10.21.0.5", "pools/v6": "fd00:20::99"})
	written := viewStore(ctx, t, fleet)
	first.check(ctx, t, fleet, written, rel.Name)
	old.Stop()

	// This tree opens it: the same store, byte for byte.
	cur1 := boltAllocator(t, cur, path, tokens)
	fleet = allocClient(t, cur1.GRPCAddr, tokenFleet)
	requireSameStore(t, written, viewStore(ctx, t, fleet), "this tree reads the release's store")
	first.check(ctx, t, fleet, written, cur.Name)
	// A request id the release remembered answers with its first result.
	again := first.retryRequestID(ctx, t, fleet)
	second := &boltWrites{round: "new"}
	second.run(ctx, t, fleet, allocClient(t, cur1.GRPCAddr, tokenClusterB), map[string]string{"pools/v4": "10.21.0.6"})
	left := viewStore(ctx, t, fleet)
	second.check(ctx, t, fleet, left, cur.Name)
	first.check(ctx, t, fleet, left, cur.Name)
	cur1.Stop()

	// Rollback: the release opens what this tree wrote.
	old2 := boltAllocator(t, rel, path, tokens)
	fleet = allocClient(t, old2.GRPCAddr, tokenFleet)
	requireSameStore(t, left, viewStore(ctx, t, fleet), "the release reads the store this tree left")
	first.check(ctx, t, fleet, left, rel.Name+" after the rollback")
	second.check(ctx, t, fleet, left, rel.Name+" after the rollback")
	require.Equal(t, again, first.retryRequestID(ctx, t, fleet), "the request id answers the same after the rollback")
	// And it goes on writing: a new owner gets a free address.
	resp, err := fleet.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/v6", Owner: &allocatorv1.Owner{Cluster: "c", Kind: "Pod", Name: "after", Uid: "uid-after"}})
	require.NoError(t, err)
	require.True(t, resp.GetCreated())
	require.NotContains(t, left.allocations, resp.GetAllocation().GetName(), "the release hands out an address this tree allocated")
}

// retryRequestID repeats the first request-id allocation of w that w
// kept and returns the answer, which must be the first result, not a new
// one.
func (w *boltWrites) retryRequestID(ctx context.Context, t *testing.T, fleet allocatorv1.AllocatorServiceClient) []byte {
	t.Helper()
	for _, name := range sortedKeys(w.acked) {
		a := w.acked[name]
		if !strings.HasSuffix(a.GetOwner().GetName(), "-0") {
			continue
		}
		resp, err := fleet.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: a.GetPool(), RequestId: "req-" + a.GetPool() + "-" + a.GetOwner().GetName(), Owner: a.GetOwner()})
		require.NoError(t, err)
		require.False(t, resp.GetCreated(), "a repeated request id allocates nothing new")
		got := mustMarshal(t, resp.GetAllocation())
		require.Equal(t, mustMarshal(t, a), got, "a repeated request id answers the first result")
		return got
	}
	t.Fatalf("%s kept no allocation made with a request id", w.round)
	return nil
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	require.NoError(t, err)
	return b
}
